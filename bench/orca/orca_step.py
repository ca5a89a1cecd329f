#!/usr/bin/python3
"""How fast a backend's load step reaches the weights every client reads.

Usage: bench/orca/orca_step.py SERVER_BIN_DIR [--interval MS] [--steps N]

Starts three stock Node.js ORCA backends (tests/xds/node/orca_backend.js:
grpc-js 1.14's ServerMetricRecorder) at qps 100 and CPU utilisation 0.2,
0.2 and 0.8, and one aside-server whose weighted_round_robin group holds
them with `orca: {interval: ..., weights: true, blackout_period: 0s}`.
Backend 0 then steps between utilisation 0.2 and 0.9 (SIGUSR1), N times;
for each step, the time from the signal until the group's published table
(`/status.json`, the table Pick, Watch, grpclb and xDS all serve) gives
backend 0 its new share: 1/9 ... 4/9 of the weight up and 0.15 down, both
within 0.01. The floor is the report interval itself: a report sent just
after the step reaches the server up to one interval later. Prints a JSON
object; bench/README.md ("ORCA: one stream per backend") quotes it.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request

from orca_cost import BACKEND, read_line


def start_backend(args):
    p = subprocess.Popen(["node", BACKEND] + args, stderr=subprocess.PIPE,
                         text=True)
    line = read_line(p, "event=backend.started")
    threading.Thread(target=p.stderr.read, daemon=True).start()
    return p, "127.0.0.1:%s" % re.search(r"port=(\d+)", line).group(1)


def share_of_first(port, addresses):
    with urllib.request.urlopen(
            "http://127.0.0.1:%d/status.json" % port, timeout=5) as r:
        status = json.load(r)
    for g in status["groups"]:
        if g["name"] != "web":
            continue
        weights = {m["address"]: m["effective_weight"]
                   for m in g.get("backends", [])}
        total = sum(weights.get(a, 0) for a in addresses)
        return weights.get(addresses[0], 0) / total if total else None
    return None


def await_share(port, addresses, want, timeout=30):
    """Seconds until backend 0's share is within 0.01 of `want`."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        share = share_of_first(port, addresses)
        if share is not None and abs(share - want) <= 0.01:
            return time.monotonic() - start
        time.sleep(0.005)
    raise RuntimeError("share never reached %.3f" % want)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("--interval", type=int, default=1000,
                        help="ORCA report interval, ms")
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()

    backends = [start_backend(a) for a in
                (["100", "0.2", "100", "0.9"], ["100", "0.2"], ["100", "0.8"])]
    addresses = [a for _, a in backends]
    tmp = tempfile.mkdtemp(prefix="aside-orca-step-")
    config = os.path.join(tmp, "aside.yaml")
    with open(config, "w") as f:
        f.write("listen: 127.0.0.1:0\nmetrics: 127.0.0.1:0\ngroups:\n"
                "  - name: web\n    policy: weighted_round_robin\n"
                "    health_check: {kind: none}\n"
                "    orca: {interval: %dms, weights: true, "
                "blackout_period: 0s}\n"
                "    backends: [%s]\n" % (args.interval, ", ".join(addresses)))
    server = subprocess.Popen(
        [os.path.join(args.bin_dir, "aside-server"), "--config", config,
         "--state-dir", os.path.join(tmp, "state")],
        stderr=subprocess.PIPE, text=True)
    try:
        line = read_line(server, "event=metrics.listening")
        port = int(re.search(r"port=(\d+)", line).group(1))
        threading.Thread(target=server.stderr.read, daemon=True).start()
        # 0.2 / 0.2 / 0.8: weights 500 / 500 / 125, backend 0 at 4/9.
        await_share(port, addresses, 4 / 9)
        ups, downs = [], []
        for step in range(args.steps):
            stepped = step % 2 == 0
            # Stepping at a random phase of the report interval.
            time.sleep((args.interval / 1000) * (0.5 + (step % 3) / 3))
            backends[0][0].send_signal(signal.SIGUSR1)
            # 0.9 / 0.2 / 0.8: 111 / 500 / 125, backend 0 at 0.151.
            took = await_share(port, addresses,
                               (100 / 0.9) / (100 / 0.9 + 500 + 125)
                               if stepped else 4 / 9)
            (downs if stepped else ups).append(took)
        every = sorted(ups + downs)
        print(json.dumps({
            "interval_s": args.interval / 1000,
            "step_to_share_s": [round(t, 3) for t in ups + downs],
            "median_s": round(every[len(every) // 2], 3),
            "max_s": round(every[-1], 3),
            "median_over_interval":
                round(every[len(every) // 2] / (args.interval / 1000), 2),
        }, indent=2))
    finally:
        server.terminate()
        server.wait(timeout=30)
        for p, _ in backends:
            p.terminate()
            p.wait(timeout=30)


if __name__ == "__main__":
    main()
