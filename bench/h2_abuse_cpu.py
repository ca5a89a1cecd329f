#!/usr/bin/python3
"""Server CPU under HTTP/2 abuse, with and without Aside's limits.

Usage: bench/h2_abuse_cpu.py BIN_DIR [SECONDS]

For each attack (rapid reset, PING flood, SETTINGS flood) starts one
aside-server with the limits off (no connection age, no ping strikes,
no reset budget, 100 000 concurrent streams) and one with the defaults, runs
tests/abuse/h2_attack.py against it for SECONDS (default 5), and reads the
server's CPU time and peak RSS from /proc. Prints, per attack, the
server's CPU seconds per wall second and per 1000 attack frames and its
peak RSS in both runs, and the ratios (defaults / unmitigated); see
bench/README.md ("HTTP/2 abuse").
"""

import os
import re
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ATTACK = os.path.join(HERE, "..", "tests", "abuse", "h2_attack.py")

GROUPS = """groups:
  - name: web
    policy: round_robin
    health_check: {kind: none}
    backends: [127.0.0.1:9001, 127.0.0.1:9002]
"""
UNMITIGATED = """limits:
  max_connection_age: 0s
  max_ping_strikes: 0
  max_stream_resets: 0
  max_concurrent_streams: 100000
"""


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0


def start_server(bin_dir, tmp, limits):
    config = os.path.join(tmp, "aside.yaml")
    with open(config, "w") as f:
        f.write(limits + GROUPS)
    proc = subprocess.Popen(
        [os.path.join(bin_dir, "aside-server"), "--config", config,
         "--listen", "127.0.0.1:0", "--metrics", "",
         "--state-dir", os.path.join(tmp, "state")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = None
    for line in proc.stderr:
        m = re.search(r"event=grpc\.listening .*port=(\d+)", line)
        if m:
            port = int(m.group(1))
        if "event=server.started" in line:
            break
    if port is None:
        proc.kill()
        raise RuntimeError("aside-server did not start")
    threading.Thread(target=lambda: [None for _ in proc.stderr],
                     daemon=True).start()
    return proc, port


def run(bin_dir, attack, limits, seconds):
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_server(bin_dir, tmp, limits)
        try:
            before = cpu_seconds(proc.pid)
            start = time.monotonic()
            out = subprocess.run(
                ["/usr/bin/python3", ATTACK, "127.0.0.1", str(port), attack,
                 str(seconds)],
                stderr=subprocess.PIPE, text=True, timeout=seconds + 60)
            wall = time.monotonic() - start
            cpu = cpu_seconds(proc.pid) - before
            peak = peak_rss_mib(proc.pid)
        finally:
            proc.kill()
            proc.wait()
    m = re.search(r"frames=(\d+) connections=(\d+)", out.stderr)
    frames = int(m.group(1)) if m else 0
    connections = int(m.group(2)) if m else 0
    return {"cpu_per_s": cpu / wall,
            "cpu_ms_per_1k_frames": 1e6 * cpu / max(frames, 1),
            "frames": frames, "connections": connections, "peak_mib": peak}


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    bin_dir = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 5
    print("| attack | limits | server CPU s/s | server CPU ms per 1000 "
          "frames | frames sent | connections | server peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    for attack in ("rapid_reset", "ping_flood", "settings_flood"):
        results = {}
        for name, limits in (("off", UNMITIGATED), ("defaults", "")):
            r = run(bin_dir, attack, limits, seconds)
            results[name] = r
            print("| %s | %s | %.2f | %.1f | %d | %d | %.0f |" %
                  (attack, name, r["cpu_per_s"], r["cpu_ms_per_1k_frames"],
                   r["frames"], r["connections"], r["peak_mib"]))
        off, on = results["off"], results["defaults"]
        print("| %s | ratio defaults/off | %.2f× | %.2f× | | | %.2f× |" %
              (attack, on["cpu_per_s"] / max(off["cpu_per_s"], 1e-9),
               on["cpu_ms_per_1k_frames"] /
               max(off["cpu_ms_per_1k_frames"], 1e-9),
               on["peak_mib"] / max(off["peak_mib"], 1e-9)))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
