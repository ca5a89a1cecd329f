#!/usr/bin/python3
"""ORCA's cost to the backends: one Aside server against N stock clients.

Usage: bench/orca/orca_cost.py SERVER_BIN_DIR ORCA_CLIENTS [--clients N]
           [--backends M] [--seconds S] [--repetitions R]

Starts M stock Node.js ORCA backends (tests/xds/node/orca_backend.js:
grpc-js 1.14's ServerMetricRecorder, reporting every second), then, in
alternating repetitions:
  - aside: one aside-server whose group holds the M backends with
    `orca: {interval: 1s}`: M streams, one per backend;
  - clients: orca_clients with N clients, each holding its own channel and
    stream to every backend, as gRPC's weighted_round_robin clients do
    (gRFC A58): N x M streams.
For each, the backends' CPU time (from /proc) over S seconds once every
stream is open, the streams the backends saw, and the ratio of the two
runs. Prints a JSON object; bench/README.md ("ORCA: one stream per backend")
quotes it.
"""

import argparse
import json
import os
import re
import subprocess
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BACKEND = os.path.join(HERE, "..", "..", "tests", "xds", "node",
                       "orca_backend.js")


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_line(process, needle, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        if needle in line:
            return line
    raise RuntimeError("no %r from %s" % (needle, process.args))


class Backend:
    """One orca_backend.js process; a thread counts the streams it logs."""

    def __init__(self, i):
        self.process = subprocess.Popen(
            ["node", BACKEND, "100", str(0.1 + 0.02 * i)],
            stderr=subprocess.PIPE, text=True)
        line = read_line(self.process, "event=backend.started")
        self.address = "127.0.0.1:%s" % re.search(r"port=(\d+)", line).group(1)
        self.pid = self.process.pid
        self.streams = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stderr:
            m = re.search(r"event=orca\.stream streams=(\d+)", line)
            if m:
                self.streams = int(m.group(1))


def start_backends(count):
    return [Backend(i) for i in range(count)]


def streams_seen(backends):
    """Streams the backends counted so far."""
    return sum(b.streams for b in backends)


def measure(backends, seconds):
    before = sum(cpu_seconds(b.pid) for b in backends)
    time.sleep(seconds)
    return sum(cpu_seconds(b.pid) for b in backends) - before


def run_aside(bin_dir, backends, seconds, tmp):
    os.makedirs(tmp, exist_ok=True)
    config = os.path.join(tmp, "aside.yaml")
    with open(config, "w") as f:
        f.write("listen: 127.0.0.1:0\nmetrics: \"\"\ngroups:\n"
                "  - name: web\n    policy: weighted_round_robin\n"
                "    health_check: {kind: none}\n"
                "    orca: {interval: 1s, weights: true, blackout_period: 0s}\n"
                "    backends: [%s]\n" % ", ".join(b.address for b in backends))
    start = streams_seen(backends)
    server = subprocess.Popen(
        [os.path.join(bin_dir, "aside-server"), "--config", config,
         "--state-dir", os.path.join(tmp, "state")],
        stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while (streams_seen(backends) - start < len(backends) and
               time.monotonic() < deadline):
            time.sleep(0.1)
        time.sleep(2)  # past the streams' first reports
        cpu = measure(backends, seconds)
        return {"streams": streams_seen(backends) - start, "cpu_s": cpu}
    finally:
        server.terminate()
        server.wait(timeout=30)


def run_clients(tool, backends, clients, seconds):
    start = streams_seen(backends)
    p = subprocess.Popen([tool, "--clients", str(clients), "--seconds",
                          "%ds" % (seconds + 60)] + [b.address for b in backends],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True)
    try:
        want = clients * len(backends)
        deadline = time.monotonic() + 60
        while (streams_seen(backends) - start < want and
               time.monotonic() < deadline):
            time.sleep(0.2)
        time.sleep(2)
        cpu = measure(backends, seconds)
        return {"streams": streams_seen(backends) - start, "cpu_s": cpu}
    finally:
        p.terminate()
        p.wait(timeout=30)


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("orca_clients")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--backends", type=int, default=20)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    backends = start_backends(args.backends)
    runs = {"aside": [], "clients": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.repetitions):
                runs["aside"].append(run_aside(args.bin_dir, backends,
                                               args.seconds,
                                               os.path.join(tmp, str(r))))
                runs["clients"].append(run_clients(
                    args.orca_clients, backends, args.clients, args.seconds))
    finally:
        for b in backends:
            b.process.kill()
    aside = median([r["cpu_s"] for r in runs["aside"]]) / args.seconds
    clients = median([r["cpu_s"] for r in runs["clients"]]) / args.seconds
    print(json.dumps({
        "backends": args.backends, "clients": args.clients,
        "seconds": args.seconds, "runs": runs,
        "backend_cpu_per_s": {"aside": aside, "clients": clients},
        "streams": {"aside": median([r["streams"] for r in runs["aside"]]),
                    "clients": median([r["streams"]
                                       for r in runs["clients"]])},
        "ratio_clients_over_aside": clients / aside if aside > 0 else None,
    }, indent=2))


if __name__ == "__main__":
    main()
