#!/usr/bin/env python3
"""Runs every Aside benchmark of a Release build and summarises them.

    bench/run.py --build-dir build-release [--quick] [--only micro,rpc,...]

Parts (each writes JSON to build/bench/):
  micro   selector_bench and client_bench (Google Benchmark, repetitions)
  rpc     Pick against an empty unary RPC on one aside-server, rpc_load in a
          separate process, alternating, repeated
  fanout  one change to 1, 100 and 1000 Watch subscribers (fanout_load)
  fanout-xds  one change to 1000 Watch then 1000 ADS subscribers of one
          group in the same run (fanout_load --ads), as ratios
  probe   the health prober against a bare Asio connect loop (probe_load)
  arena   the balancing arena (arena): the default scenario's policies
          against a perfect-information dispatcher, with real processes
  sim     the balancing simulator (arena_sim) on the default scenario,
          Prequal's 100 x 100 shape and 1000 x 1000
Then summary.json and summary.md: every DESIGN.md section 8 target with the
measured figure, its ratio to the floor or peer of the same run, and whether
it is met. BENCH_QUICK=1 (or --quick) runs everything shorter.
"""

import argparse
import json
import os
import platform
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTS = ["micro", "rpc", "fanout", "fanout-xds", "probe", "arena", "sim",
         "scale"]


def log(msg):
    print(msg, flush=True)


# --------------------------------------------------------------- processes


class Server:
    """An aside-server child process on loopback; its stderr is drained by a
    thread so that the pipe never fills."""

    def __init__(self, bin_dir, state_dir, extra=()):
        self.proc = subprocess.Popen(
            [os.path.join(bin_dir, "aside-server"), "--listen", "127.0.0.1:0",
             "--metrics", "127.0.0.1:0", "--state-dir", state_dir, *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.port = None
        deadline = time.monotonic() + 30
        for line in self.proc.stderr:
            m = re.search(r"event=grpc\.listening .*port=(\d+)", line)
            if m:
                self.port = int(m.group(1))
            if "event=server.started" in line:
                break
            if time.monotonic() > deadline:
                break
        if self.port is None:
            self.stop()
            raise RuntimeError("aside-server did not start")
        self.drain = threading.Thread(target=self._drain, daemon=True)
        self.drain.start()

    def _drain(self):
        for _ in self.proc.stderr:
            pass

    @property
    def target(self):
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self):
        return self.proc.pid

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_json_line(argv, timeout):
    """Runs a tool that prints one JSON object on stdout; returns it."""
    out = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{os.path.basename(argv[0])} exited "
                           f"{out.returncode}: {out.stderr.strip()[-500:]}")
    for line in reversed(out.stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"{os.path.basename(argv[0])}: no JSON on stdout")


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values),
            "max": max(values), "n": len(values)}


# ------------------------------------------------------------------- parts


def run_micro(args, out_dir):
    reps = 1 if args.quick else 3
    min_time = "0.01" if args.quick else os.environ.get("BENCH_MIN_TIME", "0.2")
    for name in ("selector_bench", "client_bench"):
        binary = os.path.join(args.bin_dir, name)
        log(f"== {name} (min_time {min_time} s, {reps} repetition(s))")
        subprocess.run(
            [binary, f"--benchmark_min_time={min_time}",
             f"--benchmark_repetitions={reps}",
             "--benchmark_display_aggregates_only=true",
             f"--benchmark_out={os.path.join(out_dir, name + '.json')}",
             "--benchmark_out_format=json"],
            check=True, timeout=1800)


def run_rpc(args, out_dir):
    reps = 2 if args.quick else 5
    seconds = 1.0 if args.quick else 3.0
    warmup = 0.3 if args.quick else 1.0
    concurrency = 16
    log(f"== rpc: Pick vs empty unary RPC, {reps} alternating repetitions of "
        f"{seconds} s, {concurrency} calls in flight")
    with tempfile.TemporaryDirectory(prefix="aside-bench-") as tmp:
        server = Server(args.bin_dir, tmp)
        try:
            runs = []
            for rep in range(reps):
                order = ["pick", "empty"] if rep % 2 == 0 else ["empty", "pick"]
                result = {}
                for method in order:
                    result[method] = run_json_line(
                        [os.path.join(args.bin_dir, "rpc_load"), "--target",
                         server.target, "--method", method, "--group", "demo",
                         "--concurrency", str(concurrency), "--seconds",
                         str(seconds), "--warmup", str(warmup)],
                        timeout=120)
                p, e = result["pick"], result["empty"]
                result["p50_ratio"] = p["p50_us"] / e["p50_us"]
                result["p99_ratio"] = p["p99_us"] / e["p99_us"]
                result["qps_ratio"] = p["qps"] / e["qps"]
                log(f"  rep {rep + 1}: pick p50 {p['p50_us']:.0f} us "
                    f"{p['qps']:.0f}/s, empty p50 {e['p50_us']:.0f} us "
                    f"{e['qps']:.0f}/s: p50 {result['p50_ratio']:.2f}x, "
                    f"throughput {result['qps_ratio']:.2f}x")
                runs.append(result)
        finally:
            server.stop()
    summary = {
        key: spread([r[key] for r in runs])
        for key in ("p50_ratio", "p99_ratio", "qps_ratio")}
    for method in ("pick", "empty"):
        for key in ("p50_us", "p99_us", "qps"):
            summary[f"{method}_{key}"] = spread([r[method][key] for r in runs])
    doc = {"concurrency": concurrency, "seconds": seconds, "warmup": warmup,
           "repetitions": runs, "summary": summary}
    write_json(os.path.join(out_dir, "rpc.json"), doc)


class FloorServer:
    """fanout_floor (bench/load/fanout_floor.cc): a bare gRPC callback-API
    Watch server of Aside's shape, the fan-out floor."""

    def __init__(self, bin_dir, update_bytes):
        self.proc = subprocess.Popen(
            [os.path.join(bin_dir, "fanout_floor"), "--listen", "127.0.0.1:0",
             "--update_bytes", str(update_bytes)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        m = re.match(r"port=(\d+)", line)
        if not m:
            self.stop()
            raise RuntimeError("fanout_floor did not start")
        self.port = int(m.group(1))

    @property
    def target(self):
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self):
        return self.proc.pid

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def fanout_channels(subscribers):
    """20 channels, or enough to stay within the server's default of 100
    concurrent streams per connection."""
    return max(min(subscribers, 20), -(-subscribers // 100))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fanout_once(args, target, pid, token, group, subscribers, changes,
                rss=False):
    """One fanout_load run. With `rss`, also the server's memory per
    stream: its peak RSS during the run (streams open) less its RSS before,
    over the streams (polled every 20 ms from /proc)."""
    before = peak = rss_kib(pid) if rss else 0
    stop = threading.Event()

    def poll():
        nonlocal peak
        while not stop.wait(0.02):
            peak = max(peak, rss_kib(pid))

    poller = threading.Thread(target=poll, daemon=True)
    if rss:
        poller.start()
    try:
        r = run_json_line(
            [os.path.join(args.bin_dir, "fanout_load"), "--target", target,
             "--token", token, "--group", group, "--subscribers",
             str(subscribers), "--changes", str(changes), "--server-pid",
             str(pid), "--channels", str(fanout_channels(subscribers))],
            timeout=900)
    finally:
        stop.set()
        if rss:
            poller.join()
    if rss:
        r["rss_per_stream_kib"] = (peak - before) / subscribers
    return r


def read_json(proc, timeout=180):
    """The next line of `proc`'s stdout as JSON, within `timeout` s."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    if not line:
        raise RuntimeError(f"{os.path.basename(proc.args[0])}: no output "
                           f"(exit {proc.poll()})")
    return json.loads(line)


# Every subscriber of the many-streams benchmarks runs on loopback, one
# address: the per-peer Watch and balancer (ADS) caps (10 000 by default)
# are lifted above the largest run plus the streams of the run before that
# the server may not have retired, and so is the per-address reset budget
# (the streams a run ends are reset from that one address).
MANY_STREAMS_LIMITS = ("limits: {max_watch_streams_per_peer: 100000, "
                       "max_balancer_streams_per_peer: 100000, "
                       "max_stream_resets: 0}\n")


def many_streams_server(tmp, token):
    """Files in `tmp` for an aside-server of thousands of streams from one
    address: an Admin token file for `token` and a config with
    MANY_STREAMS_LIMITS. Returns their paths."""
    tokens = os.path.join(tmp, "tokens")
    with open(os.open(tokens, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(f"{token} admin\n")
    config = os.path.join(tmp, "aside.yaml")
    with open(config, "w") as f:
        f.write(MANY_STREAMS_LIMITS)
    return tokens, config


def reap(procs):
    """Waits for each of `procs` (30 s), killing those that do not end."""
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def fanout_procs_once(args, target, pid, token, procs, per, changes):
    """`procs` fanout_load processes of `per` streams each on one server:
    one drives the changes in step with the others (--coordinate,
    --observe). Server memory per idle stream (RSS with every stream open
    and holding the first table, less RSS before any), CPU per stream per
    update over all streams, and the last subscriber of all processes."""
    tool = os.path.join(args.bin_dir, "fanout_load")
    common = ["--target", target, "--group", "fanout-procs",
              "--subscribers", str(per), "--channels",
              str(fanout_channels(per))]
    before = rss_kib(pid)
    started = []

    def start(extra):
        p = subprocess.Popen([tool, *common, *extra], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        started.append(p)
        return p

    try:
        driver = start(["--token", token, "--changes", str(changes),
                        "--server-pid", str(pid), "--coordinate"])
        read_json(driver)
        observers = [start(["--observe"]) for _ in range(procs - 1)]
        for o in observers:
            read_json(o)
        idle = rss_kib(pid)
        driver.stdin.write("go\n")
        driver.stdin.flush()
        last = []
        for _ in range(changes):
            c = read_json(driver)
            for o in observers:
                o.stdin.write(f"{c['generation']}\n")
                o.stdin.flush()
            ends = [c["last_ns"]] + [read_json(o)["last_ns"]
                                     for o in observers]
            last.append((max(ends) - c["t0_ns"]) / 1e6)
            driver.stdin.write("next\n")
            driver.stdin.flush()
        final = read_json(driver)
        for o in observers:
            o.stdin.write("stop\n")
            o.stdin.flush()
    finally:
        reap(started)
    streams = procs * per
    last.sort()
    return {
        "streams": streams, "processes": procs, "changes": changes,
        "rss_per_idle_stream_kib": (idle - before) / streams,
        "cpu_per_stream_update_us":
            final["server_cpu_s"] * 1e6 / (streams * changes),
        "last_p50_ms": last[len(last) // 2],
        "last_p99_ms": last[min(len(last) - 1, int(0.99 * len(last)))],
        "update_bytes": final["update_bytes"],
    }


def run_fanout_procs(args, out_dir):
    """--fanout-procs: 10 000 Watch streams on one replica from 10
    subscriber processes of 1000, against the floor, alternating pairs."""
    procs, per, changes, reps = 10, 1000, 10, 2
    log(f"== fanout-procs: {procs} subscriber processes x {per} streams on "
        f"one server, {changes} changes, {reps} alternating pairs with the "
        "floor")
    token = "bench-fanout-admin-token"
    pairs = []

    def show(who, r):
        log(f"  {who}: {r['streams']} streams: idle RSS "
            f"{r['rss_per_idle_stream_kib']:.1f} KiB per stream; CPU "
            f"{r['cpu_per_stream_update_us']:.2f} us per stream per update; "
            f"last subscriber p50 {r['last_p50_ms']:.1f} ms, p99 "
            f"{r['last_p99_ms']:.1f} ms")

    with tempfile.TemporaryDirectory(prefix="aside-bench-") as tmp:
        tokens, config = many_streams_server(tmp, token)
        for rep in range(reps):
            server = Server(args.bin_dir, os.path.join(tmp, f"state-{rep}"),
                            ["--admin-token-file", tokens, "--config",
                             config])
            try:
                a = fanout_procs_once(args, server.target, server.pid, token,
                                      procs, per, changes)
            finally:
                server.stop()
            show("aside", a)
            floor = FloorServer(args.bin_dir, a["update_bytes"])
            try:
                f = fanout_procs_once(args, floor.target, floor.pid, token,
                                      procs, per, changes)
            finally:
                floor.stop()
            show("floor", f)
            pairs.append({"aside": a, "floor": f,
                          "cpu_ratio": a["cpu_per_stream_update_us"] /
                          f["cpu_per_stream_update_us"],
                          "p99_ratio": a["last_p99_ms"] / f["last_p99_ms"]})
            log(f"    ratio: CPU {pairs[-1]['cpu_ratio']:.2f}x, "
                f"last-subscriber p99 {pairs[-1]['p99_ratio']:.2f}x")
    summary = {key: spread([p[key] for p in pairs])
               for key in ("cpu_ratio", "p99_ratio")}
    for who in ("aside", "floor"):
        for key in ("cpu_per_stream_update_us", "last_p50_ms", "last_p99_ms",
                    "rss_per_idle_stream_kib"):
            summary[f"{who}_{key}"] = spread([p[who][key] for p in pairs])
    write_json(os.path.join(out_dir, "fanout_procs.json"),
               {"processes": procs, "streams_per_process": per,
                "changes": changes, "pairs": pairs, "summary": summary})


def histogram_percentiles(hist, ps=(50, 99, 100)):
    """Percentiles (ms) of a merged {bucket_us: count} histogram."""
    items = sorted((int(k), v) for k, v in hist.items())
    total = sum(v for _, v in items)
    out = {}
    for p in ps:
        rank = min(total - 1, int(p / 100 * total)) if total else 0
        seen = 0
        for bucket, count in items:
            seen += count
            if seen > rank:
                out[p] = bucket / 1000
                break
        else:
            out[p] = 0.0
    return out


def fanout_churn_once(args, target, pid, token, procs, per, groups, rate,
                      seconds):
    """`procs` fanout_churn processes of `per` streams over `groups` groups;
    the first drives `rate` changes/s for `seconds`. The merged lags from
    each change's reply (and from its sending) to each subscriber of its
    group, and the server's CPU per subscriber per second of churn."""
    tool = os.path.join(args.bin_dir, "fanout_churn")
    started = []

    def start(index, extra=()):
        p = subprocess.Popen(
            [tool, "--target", target, "--process", str(index),
             "--subscribers", str(per), "--groups", str(groups),
             "--channels", str(fanout_channels(per) // 2 or 1), *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        started.append(p)
        return p

    try:
        driver = start(0, ["--drive", "--token", token, "--rate", str(rate),
                           "--seconds", str(seconds), "--server-pid",
                           str(pid)])
        read_json(driver, timeout=300)
        others = [start(i) for i in range(1, procs)]
        for o in others:
            read_json(o, timeout=300)
        driver.stdin.write("go\n")
        driver.stdin.flush()
        drove = read_json(driver, timeout=seconds + 120)
        reports = []
        for p in [driver, *others]:
            p.stdin.write(drove["changes"] + "\n")
            p.stdin.flush()
        for p in [driver, *others]:
            reports.append(read_json(p, timeout=180))
    finally:
        reap(started)
    merged = {"from_ack_us": {}, "from_send_us": {}}
    for r in reports:
        for key in merged:
            for bucket, count in r[key].items():
                merged[key][bucket] = merged[key].get(bucket, 0) + count
    streams = procs * per
    pairs = sum(r["pairs"] for r in reports)
    messages = sum(r["messages"] for r in reports)
    ack = histogram_percentiles(merged["from_ack_us"])
    send = histogram_percentiles(merged["from_send_us"])
    return {
        "streams": streams, "groups": groups, "rate": rate,
        "seconds": drove["seconds"], "sent": drove["sent"],
        "failed": drove["failed"], "pairs": pairs,
        "late": sum(r["late"] for r in reports),
        "from_ack_p50_ms": ack[50], "from_ack_p99_ms": ack[99],
        "from_ack_max_ms": ack[100], "from_send_p50_ms": send[50],
        "from_send_p99_ms": send[99], "from_send_max_ms": send[100],
        "cpu_per_subscriber_second_us":
            drove["server_cpu_s"] * 1e6 / (streams * drove["seconds"]),
        "server_cores": drove["server_cpu_s"] / drove["seconds"],
        "messages_per_change_per_stream": messages / max(1, pairs),
        "bytes_per_message":
            sum(r["bytes"] for r in reports) / max(1, messages),
    }


def run_fanout_churn(args, out_dir):
    """--fanout-churn: --churn-rate changes/s (1000) over 100 groups to
    10 000 Watch streams from 10 processes, Aside against the floor,
    alternating (--churn-pairs pairs, 2)."""
    procs, per, groups, seconds = 10, 1000, 100, 10
    rate, reps = args.churn_rate, args.churn_pairs
    log(f"== fanout-churn: {rate} changes/s over {groups} groups for "
        f"{seconds} s to {procs} x {per} Watch streams, {reps} alternating "
        "pairs with the floor")
    token = "bench-fanout-admin-token"
    pairs = []

    def show(who, r):
        log(f"  {who}: {r['sent'] - r['failed']} of {r['sent']} changes "
            f"acknowledged in {r['seconds']:.1f} s; subscriber current "
            f"after the reply p50 {r['from_ack_p50_ms']:.1f} ms, p99 "
            f"{r['from_ack_p99_ms']:.1f} ms, max {r['from_ack_max_ms']:.0f} "
            f"ms (after sending: p99 {r['from_send_p99_ms']:.1f} ms); "
            f"{r['late']} late of {r['pairs']}; server "
            f"{r['server_cores']:.2f} cores, "
            f"{r['cpu_per_subscriber_second_us']:.1f} us per subscriber per "
            f"second; {r['bytes_per_message']:.0f} B per message")

    with tempfile.TemporaryDirectory(prefix="aside-bench-") as tmp:
        tokens, config = many_streams_server(tmp, token)
        for rep in range(reps):
            server = Server(args.bin_dir, os.path.join(tmp, f"state-{rep}"),
                            ["--admin-token-file", tokens, "--config",
                             config])
            try:
                a = fanout_churn_once(args, server.target, server.pid, token,
                                      procs, per, groups, rate, seconds)
            finally:
                server.stop()
            show("aside", a)
            floor = FloorServer(args.bin_dir,
                                max(20, int(a["bytes_per_message"])))
            try:
                f = fanout_churn_once(args, floor.target, floor.pid, token,
                                      procs, per, groups, rate, seconds)
            finally:
                floor.stop()
            show("floor", f)
            pairs.append({
                "aside": a, "floor": f,
                "cpu_ratio": a["cpu_per_subscriber_second_us"] /
                f["cpu_per_subscriber_second_us"],
                "p99_ratio": a["from_send_p99_ms"] /
                max(f["from_send_p99_ms"], 1e-3)})
            log(f"    ratio: CPU {pairs[-1]['cpu_ratio']:.2f}x, p99 from "
                f"sending {pairs[-1]['p99_ratio']:.2f}x")
    write_json(os.path.join(out_dir, "fanout_churn.json"),
               {"processes": procs, "streams_per_process": per,
                "groups": groups, "rate": rate, "seconds": seconds,
                "pairs": pairs})


FANOUT_RATES = (10, 20, 50, 100, 150, 200, 300, 500, 1000, 2000)


def fanout_rate_once(args, target, pid, token, group, subscribers):
    """fanout_load --rates: changes sent open loop at each rate in turn
    for 3 s; one JSON line per step, then the highest bounded rate."""
    out = subprocess.run(
        [os.path.join(args.bin_dir, "fanout_load"), "--target", target,
         "--token", token, "--group", group, "--subscribers",
         str(subscribers), "--channels", str(fanout_channels(subscribers)),
         "--server-pid", str(pid), "--step-seconds", "3", "--rates",
         ",".join(str(r) for r in FANOUT_RATES)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"fanout_load --rates exited {out.returncode}: "
                           f"{out.stderr.strip()[-500:]}")
    lines = [json.loads(line) for line in out.stdout.splitlines()
             if line.startswith("{")]
    return {"steps": [x for x in lines if "rate" in x], **lines[-1]}


def run_fanout_rate(args, out_dir):
    """--fanout-rate: the update rate one replica sustains with 1000 Watch
    streams (20 channels, as the fan-out part), against the floor; also
    Aside with its state on tmpfs (the SQLite commit's fsync nearly free)
    and Aside with one stream (the Admin write path without the fan-out),
    to say what bounds the rate, and Aside with `publication.window: 0s`
    (every publication sent at once) against the default window.
    Alternating repetitions, fresh servers."""
    reps, n = 2, 1000
    log(f"== fanout-rate: changes at {', '.join(map(str, FANOUT_RATES))}/s, "
        f"3 s each, open loop, to {n} Watch streams; highest rate with "
        f"bounded lag; {reps} alternating repetitions with the floor")
    token = "bench-fanout-admin-token"
    runs = []

    def show(who, r):
        steps = ", ".join(
            f"{s['rate']:g}/s {s['lag_early_ms']:.0f}->{s['lag_late_ms']:.0f}"
            f" ms, {s['bytes_per_message']:.0f} B/msg"
            f"{'' if s['bounded'] else ' (not bounded)'}"
            for s in r["steps"])
        log(f"  {who}: sustained {r['sustained_rate']:g}/s "
            f"(last-subscriber lag, first->last quarter: {steps})")

    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="aside-bench-") as tmp, \
            tempfile.TemporaryDirectory(prefix="aside-bench-",
                                        dir=shm) as fast:
        tokens, config = many_streams_server(tmp, token)
        no_window = os.path.join(tmp, "aside-no-window.yaml")
        with open(no_window, "w") as f:
            f.write(MANY_STREAMS_LIMITS + "publication: {window: 0s}\n")
        for rep in range(reps):
            run = {}
            for who, state, streams, cfg in (
                    ("aside", os.path.join(tmp, f"state-{rep}"), n, config),
                    ("aside_no_window", os.path.join(tmp, f"nw-{rep}"), n,
                     no_window),
                    ("aside_tmpfs", os.path.join(fast, f"state-{rep}"), n,
                     config),
                    ("aside_1_stream", os.path.join(tmp, f"one-{rep}"), 1,
                     config)):
                server = Server(args.bin_dir, state,
                                ["--admin-token-file", tokens, "--config",
                                 cfg])
                try:
                    run[who] = fanout_rate_once(args, server.target,
                                                server.pid, token,
                                                f"rate-{rep}", streams)
                finally:
                    server.stop()
                show(who, run[who])
            floor = FloorServer(args.bin_dir, run["aside"]["update_bytes"])
            try:
                run["floor"] = fanout_rate_once(args, floor.target, floor.pid,
                                                token, "fanout", n)
            finally:
                floor.stop()
            show("floor", run["floor"])
            fr = run["floor"]["sustained_rate"]
            run["ratio"] = (run["aside"]["sustained_rate"] / fr if fr > 0
                            else None)
            log(f"    ratio: sustained rate "
                f"{fmt(run['ratio'], 'x', 2)} the floor's")
            runs.append(run)
    summary = {"ratio": spread([r["ratio"] for r in runs])}
    for who in ("aside", "aside_no_window", "aside_tmpfs", "aside_1_stream",
                "floor"):
        summary[f"{who}_sustained_rate"] = spread(
            [r[who]["sustained_rate"] for r in runs])
    write_json(os.path.join(out_dir, "fanout_rate.json"),
               {"streams": n, "rates": FANOUT_RATES, "step_seconds": 3,
                "runs": runs, "summary": summary})


def fanout_stall_once(args, server, token, streams, seconds=8.0,
                      tick=0.25):
    """`streams` idle Watch streams (fanout_load), then as many that never
    grant flow-control window (tests/abuse/h2_attack.py window_stall, 500
    streams per attacker), with a change every `tick` s to all of them;
    the server's RSS per stalled stream every `tick` s for `seconds` s."""
    attack = os.path.join(ROOT, "tests", "abuse", "h2_attack.py")
    # The attacker needs Debian's python3-h2 (hpack, hyperframe), which a
    # python3 other than the system's may not see.
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") \
        else sys.executable
    before = rss_kib(server.pid)
    started = []
    try:
        driver = subprocess.Popen(
            [os.path.join(args.bin_dir, "fanout_load"), "--target",
             server.target, "--token", token, "--group", "web",
             "--subscribers", str(streams), "--channels",
             str(fanout_channels(streams)), "--changes",
             str(int(seconds / tick)), "--coordinate"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        started.append(driver)
        read_json(driver)
        idle = rss_kib(server.pid)
        t0 = time.monotonic()
        for _ in range(streams // 500):
            started.append(subprocess.Popen(
                [python, attack, "127.0.0.1", str(server.port),
                 "window_stall", str(seconds + 3)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        series = []
        # One second for the attackers to open their streams, then a
        # change per tick while sampling.
        while time.monotonic() < t0 + 1.0:
            time.sleep(tick / 5)
        driver.stdin.write("go\n")
        driver.stdin.flush()
        for i in range(int(seconds / tick)):
            read_json(driver)
            series.append({"t_s": round(time.monotonic() - t0, 2),
                           "kib_per_stream":
                           (rss_kib(server.pid) - idle) / streams})
            time.sleep(max(0.0, t0 + 1.0 + (i + 1) * tick -
                           time.monotonic()))
            driver.stdin.write("next\n")
            driver.stdin.flush()
        read_json(driver)
    finally:
        for p in started:
            try:
                p.wait(timeout=seconds + 30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    values = [x["kib_per_stream"] for x in series]
    return {"streams": streams,
            "idle_kib_per_stream": (idle - before) / streams,
            "stalled_first_kib": values[0], "stalled_last_kib": values[-1],
            "stalled_max_kib": max(values),
            "growth": values[-1] / values[0] if values[0] > 0 else None,
            # Over the second half alone, after the allocator has settled.
            "growth_second_half": values[-1] / values[len(values) // 2]
            if values[len(values) // 2] > 0 else None,
            "series": series}


def run_fanout_stall(args, out_dir):
    """--fanout-stall: 1000 stalled Watch streams on a server with the
    shipped limits cost bounded memory: RSS per stalled stream over 8 s of
    changes (flat = bounded), against 1000 idle streams' in the same run."""
    reps, n = 2, 1000
    log(f"== fanout-stall: {n} idle Watch streams, then {n} that never "
        f"grant window, a change every 0.25 s for 8 s; {reps} repetitions")
    token = "bench-fanout-admin-token"
    runs = []
    with tempfile.TemporaryDirectory(prefix="aside-bench-") as tmp:
        tokens = os.path.join(tmp, "tokens")
        with open(os.open(tokens, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(f"{token} admin\n")
        for rep in range(reps):
            server = Server(args.bin_dir, os.path.join(tmp, f"state-{rep}"),
                            ["--admin-token-file", tokens])
            try:
                r = fanout_stall_once(args, server, token, n)
            finally:
                server.stop()
            log(f"  idle {r['idle_kib_per_stream']:.1f} KiB per stream; "
                f"stalled {r['stalled_first_kib']:.1f} KiB per stream at "
                f"{r['series'][0]['t_s']} s, {r['stalled_last_kib']:.1f} at "
                f"{r['series'][-1]['t_s']} s (max "
                f"{r['stalled_max_kib']:.1f}; last/first "
                f"{r['growth']:.2f}x, over the second half "
                f"{r['growth_second_half']:.3f}x)")
            runs.append(r)
    summary = {key: spread([r[key] for r in runs])
               for key in ("idle_kib_per_stream", "stalled_first_kib",
                           "stalled_last_kib", "stalled_max_kib", "growth",
                           "growth_second_half")}
    summary["stalled_vs_idle"] = spread(
        [r["stalled_last_kib"] / r["idle_kib_per_stream"] for r in runs])
    write_json(os.path.join(out_dir, "fanout_stall.json"),
               {"streams": n, "runs": runs, "summary": summary})


def run_fanout(args, out_dir):
    changes = 10 if args.quick else 40
    reps = 2 if args.quick else 3
    floor_sizes = (1000,) if args.quick else (1000, 10000)
    log(f"== fanout: one change to 1, 100 and 1000 Watch subscribers, "
        f"{changes} changes each; against the bare gRPC floor at "
        f"{', '.join(str(n) for n in floor_sizes)} streams, {reps} "
        "alternating repetitions")
    token = "bench-fanout-admin-token"
    results = []
    pairs = []

    def show(who, r):
        log(f"  {who} {r['subscribers']:5d} subscribers: last subscriber p50 "
            f"{r['last_p50_ms']:.2f} ms, p99 {r['last_p99_ms']:.2f} "
            f"ms; server CPU {r['cpu_per_stream_update_us']:.2f} us "
            f"per stream per update")

    with tempfile.TemporaryDirectory(prefix="aside-bench-") as tmp:
        tokens, config = many_streams_server(tmp, token)
        server = Server(args.bin_dir, os.path.join(tmp, "state"),
                        ["--admin-token-file", tokens, "--config", config])
        try:
            for subscribers in (1, 100):
                r = fanout_once(args, server.target, server.pid, token,
                                f"fanout-{subscribers}", subscribers, changes)
                show("aside", r)
                results.append(r)
        finally:
            server.stop()
        # Each pair starts fresh servers, so that the memory a run's
        # streams take is not served from what earlier runs freed.
        for n in floor_sizes:
            for rep in range(reps):
                server = Server(args.bin_dir,
                                os.path.join(tmp, f"state-{n}-{rep}"),
                                ["--admin-token-file", tokens, "--config",
                                 config])
                try:
                    a = fanout_once(args, server.target, server.pid, token,
                                    f"fanout-{n}-{rep}", n, changes, rss=True)
                finally:
                    server.stop()
                show("aside", a)
                floor = FloorServer(args.bin_dir, a["update_bytes"])
                try:
                    f = fanout_once(args, floor.target, floor.pid, token,
                                    "fanout", n, changes, rss=True)
                finally:
                    floor.stop()
                show("floor", f)
                if rep == 0:
                    results.append(a)
                pairs.append({
                    "subscribers": n, "aside": a, "floor": f,
                    "cpu_ratio": a["cpu_per_stream_update_us"] /
                    f["cpu_per_stream_update_us"],
                    "p99_ratio": a["last_p99_ms"] / f["last_p99_ms"]})
                log(f"    ratio: CPU {pairs[-1]['cpu_ratio']:.2f}x, "
                    f"last-subscriber p99 {pairs[-1]['p99_ratio']:.2f}x")
    floor_summary = {}
    for n in floor_sizes:
        mine = [p for p in pairs if p["subscribers"] == n]
        floor_summary[str(n)] = {
            key: spread([p[key] for p in mine])
            for key in ("cpu_ratio", "p99_ratio")}
        for who in ("aside", "floor"):
            for key in ("cpu_per_stream_update_us", "last_p99_ms",
                        "cpu_per_update_us", "rss_per_stream_kib"):
                floor_summary[str(n)][f"{who}_{key}"] = spread(
                    [p[who][key] for p in mine])
    write_json(os.path.join(out_dir, "fanout.json"),
               {"changes": changes, "runs": results, "floor_pairs": pairs,
                "floor": floor_summary})
    if getattr(args, "fanout_procs", False) and not args.quick:
        run_fanout_procs(args, out_dir)
    if getattr(args, "fanout_churn", False) and not args.quick:
        run_fanout_churn(args, out_dir)
    if getattr(args, "fanout_rate", False) and not args.quick:
        run_fanout_rate(args, out_dir)
    if getattr(args, "fanout_stall", False) and not args.quick:
        run_fanout_stall(args, out_dir)


def run_probe(args, out_dir):
    if args.quick:
        flags = ["--seconds=2", "--saturate_seconds=0.5", "--rounds=2"]
    else:
        flags = ["--seconds=10", "--saturate_seconds=2", "--rounds=5"]
    log("== probe: prober against a bare Asio connect loop, "
        + " ".join(flags))
    subprocess.run(
        [os.path.join(args.bin_dir, "probe_load"), "--targets=1000,10000",
         "--concurrency=64", *flags,
         f"--json={os.path.join(out_dir, 'probe.json')}"],
        check=True, timeout=900)


def run_arena(args, out_dir):
    # The default scenario (bench/scenario/default.scn) with every policy
    # it names, the limit and gRPC's own round_robin; the table goes to
    # stdout as it is, the figures to arena.json. Service times twice the
    # file's (2800 calls/s at full load, which keeps the arena's processes
    # near half of this 2-core machine at the top step) and its times at
    # 0.6 (12 s measured per step: about 11 minutes in all). Quick: the
    # smoke run.
    log("== arena: balancing against the perfect-information limit")
    argv = [os.path.join(args.bin_dir, "arena"), "--service_scale=2",
            "--time_scale=0.6",
            f"--json={os.path.join(out_dir, 'arena.json')}"]
    if args.quick:
        argv.append("--smoke")
    subprocess.run(argv, check=True, timeout=3600)


def run_sim(args, out_dir):
    # Deterministic, on a virtual clock: its tables go into sim.md and the
    # end of report.md.
    scenarios = [os.path.join(ROOT, "bench", "scenario", f)
                 for f in ("default.scn", "prequal.scn", "thousand.scn")]
    argv = [os.path.join(args.bin_dir, "arena_sim"),
            "--scenario=" + ",".join(scenarios),
            f"--json={os.path.join(out_dir, 'sim.json')}"]
    if args.quick:
        argv.append("--loads=0.9")
    log("== sim: " + " ".join(argv[1:]))
    with open(os.path.join(out_dir, "sim.md"), "w") as f:
        subprocess.run(argv, check=True, timeout=1800, stdout=f,
                       stderr=subprocess.DEVNULL)


def run_scale(args, out_dir):
    # In process: large groups, many groups, the fixed cost of one update.
    # Its tables (markdown, ratios to floors of the same run) go into
    # scale.md and the end of report.md.
    argv = [os.path.join(args.bin_dir, "scale_bench"), "--reps=3"]
    if args.quick:
        argv.append("--quick")
    log("== scale: " + " ".join(argv[1:]))
    with open(os.path.join(out_dir, "scale.md"), "w") as f:
        subprocess.run(argv, check=True, timeout=900, stdout=f,
                       stderr=subprocess.DEVNULL)


def write_json(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")


def machine():
    info = {"platform": platform.platform(), "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        info["loadavg_start"] = open("/proc/loadavg").read().split()[:3]
    except OSError:
        pass
    try:
        info["compiler"] = subprocess.run(
            ["c++", "--version"], stdout=subprocess.PIPE, text=True,
            check=False).stdout.splitlines()[0]
    except (OSError, IndexError):
        pass
    return info


# ----------------------------------------------------------------- summary


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class Micro:
    """Per benchmark name: the repetitions' values of one field."""

    def __init__(self, doc):
        self.runs = {}
        if doc is None:
            return
        for b in doc.get("benchmarks", []):
            if b.get("run_type") == "aggregate":
                continue
            # Benchmarks with their own MinTime carry it in the name.
            name = re.sub(r"/min_time:[0-9.]+", "", b["run_name"])
            self.runs.setdefault(name, []).append(b)

    UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}

    def values(self, name, field="cpu_time"):
        """The repetitions' values; times in nanoseconds."""
        out = []
        for b in self.runs.get(name, []):
            if field not in b:
                continue
            v = float(b[field])
            if field in ("cpu_time", "real_time"):
                v *= self.UNIT_NS.get(b.get("time_unit", "ns"), 1.0)
            out.append(v)
        return out

    def get(self, name, field="cpu_time"):
        return spread(self.values(name, field))

    def median(self, name, field="cpu_time"):
        s = self.get(name, field)
        return None if s is None else s["median"]


def fmt(v, unit="", digits=None):
    if v is None:
        return "n/a"
    if digits is None:
        digits = 0 if abs(v) >= 100 else (1 if abs(v) >= 10 else 2)
    return f"{v:.{digits}f}{unit}"


def fmt_spread(s, unit="", scale=1.0):
    if s is None:
        return "n/a"
    if s.get("n", 2) <= 1 or s["min"] == s["max"]:
        return fmt(s["median"] * scale, unit)
    return (f"{fmt(s['median'] * scale, unit)} "
            f"({fmt(s['min'] * scale)}–{fmt(s['max'] * scale)})")


def summarize(out_dir):
    rows = []

    def row(area, what, target, measured, vs_floor, vs_target, met):
        rows.append({"area": area, "what": what, "target": target,
                     "measured": measured, "vs_floor": vs_floor,
                     "vs_target": vs_target, "met": met})

    sel = Micro(load(os.path.join(out_dir, "selector_bench.json")))
    cli = Micro(load(os.path.join(out_dir, "client_bench.json")))
    floor1 = sel.median("BM_FloorAtomicIncrement/threads:1")
    floor2 = sel.median("BM_FloorAtomicIncrement/threads:2")
    sizes = (10, 100, 1000, 10000)

    def pick(policy, n, threads):
        return sel.get(f"BM_Pick/{policy}/{n}/threads:{threads}")

    def ratio(a, b):
        return None if a is None or b is None or b == 0 else a / b

    if sel.runs:
        row("floor", "relaxed atomic increment, 1 / 2 threads",
            "≈ 9.5 ns (32 ns contended)",
            f"{fmt(floor1, ' ns')} / {fmt(floor2, ' ns')}", "1.00×", None,
            None)
        for policy in ("round_robin", "weighted_round_robin", "random",
                       "hash"):
            one = [pick(policy, n, 1) for n in sizes]
            med = [s["median"] for s in one if s]
            worst = max(med) if med else None
            row("micro", f"local pick, {policy}, 1 thread (10–10000 backends)",
                "≤ 10 ns", f"{fmt(min(med), ' ns') if med else 'n/a'}–"
                f"{fmt(worst, ' ns')}", f"{fmt(ratio(worst, floor1))}×",
                f"{fmt(ratio(worst, 10))}×",
                worst is not None and worst <= 10)
            two = [ratio(pick(policy, n, 2)["median"] if pick(policy, n, 2)
                         else None, s["median"] if s else None)
                   for n, s in zip(sizes, one)]
            two = [t for t in two if t is not None]
            row("micro", f"local pick, {policy}, 2 threads / 1 thread",
                "≤ 2×", f"{fmt(min(two)) if two else 'n/a'}–"
                f"{fmt(max(two)) if two else 'n/a'}×", None,
                f"{fmt(max(two) / 2 if two else None)}×",
                bool(two) and max(two) <= 2)
        for policy, n, limit in (("ketama", 1000, 40), ("maglev", 1000, 5),
                                 ("p2c_pending", 1000, 20),
                                 ("p2c_peak_ewma", 1000, 20)):
            s = pick(policy, n, 1)
            allsizes = [pick(policy, k, 1) for k in sizes]
            med = [x["median"] for x in allsizes if x]
            row("micro", f"local pick, {policy}, {n} backends, 1 thread "
                f"(all sizes {fmt(min(med)) if med else 'n/a'}–"
                f"{fmt(max(med)) if med else 'n/a'} ns)",
                f"≤ {limit} ns", fmt_spread(s, " ns"),
                f"{fmt(ratio(s and s['median'], floor1))}×",
                f"{fmt(ratio(s and s['median'], limit))}×",
                s is not None and s["median"] <= limit)
        allocs = [max(sel.values(n, "allocs_per_pick") or [0])
                  for n in sel.runs if n.startswith("BM_Pick/")]
        row("micro", f"allocations per pick ({len(allocs)} pick benchmarks)",
            "0", fmt(max(allocs) if allocs else None, digits=3), None, None,
            bool(allocs) and max(allocs) == 0)
        for model in ("peak_ewma", "pending"):
            s = sel.get(f"BM_FinishOnly/{model}/threads:1")
            row("micro", f"recording a completion, {model} (Finish)",
                "≤ 15 ns", fmt_spread(s, " ns"),
                f"{fmt(ratio(s and s['median'], floor1))}×",
                f"{fmt(ratio(s and s['median'], 15))}×",
                s is not None and s["median"] <= 15)
        steady = sel.get("BM_PickDuringSwap/0", "p99_ns")
        for arg, label in ((1, "a swap every 100 µs"), (2, "back-to-back swaps")):
            s = sel.get(f"BM_PickDuringSwap/{arg}", "p99_ns")
            r = ratio(s and s["median"], steady and steady["median"])
            row("micro", f"server pick p99 during snapshot swaps ({label}) vs "
                "steady", "≤ 1.2×",
                f"{fmt_spread(s, ' ns')} vs {fmt_spread(steady, ' ns')}",
                f"{fmt(r)}×", f"{fmt(ratio(r, 1.2))}×",
                r is not None and r <= 1.2)
        sort = sel.median("BM_FloorSortRingPoints/160000")
        for name, what, limit in (
                ("BM_KetamaBuild/1000", "ketama build, 1000 backends × 160",
                 1.5e6),
                ("BM_KetamaOneBackendChange", "ketama one-backend change",
                 0.2e6),
                ("BM_MaglevBuild/1000", "maglev build, 65537 slots, 1000",
                 1e6)):
            s = sel.get(name)
            row("micro", what, f"≤ {limit / 1e6:g} ms",
                fmt_spread(s, " ms", 1e-6),
                f"{fmt(ratio(s and s['median'], sort), digits=3)}× sort",
                f"{fmt(ratio(s and s['median'], limit))}×",
                s is not None and s["median"] <= limit)
    if cli.runs:
        steady = cli.get("BM_ClientPickDuringUpdates/0", "p99_ns")
        s = cli.get("BM_ClientPickDuringUpdates/1000", "p99_ns")
        r = ratio(s and s["median"], steady and steady["median"])
        row("micro", "stub pick+Done p99 during 1000 table updates/s vs steady",
            "≤ 1.2×", f"{fmt_spread(s, ' ns')} vs {fmt_spread(steady, ' ns')}",
            f"{fmt(r)}×", f"{fmt(ratio(r, 1.2))}×",
            r is not None and r <= 1.2)
        for label, name, base, limit in (
                ("round robin", "BM_ClientPickDoneRoundRobin",
                 "BM_TableSelectorPick", 2),
                ("round robin", "BM_ClientPickDoneRoundRobin",
                 "BM_SelectorPickTwoStamps", None),
                ("p2c peak_ewma", "BM_ClientPickDonePeakEwma",
                 "BM_TableSelectorPickPeakEwma", 2)):
            s = cli.get(f"{name}/threads:1")
            lib = cli.get(f"{base}/threads:1")
            r = ratio(s and s["median"], lib and lib["median"])
            if limit is None:
                if lib is None or not lib["median"]:
                    continue  # no safe TSC on this machine
                row("micro", f"stub Pick + Done, {label}, 1 thread, vs the "
                    "selector between two TSC stamps (the floor of an "
                    "exactly timed pick)", "—",
                    f"{fmt_spread(s, ' ns')} vs {fmt_spread(lib, ' ns')}",
                    f"{fmt(r)}×", "—", None)
                continue
            row("micro", f"stub Pick + Done, {label}, 1 thread, vs the lib "
                "selector's pick of the same table",
                f"≤ {limit}× lib pick",
                f"{fmt_spread(s, ' ns')} vs {fmt_spread(lib, ' ns')}",
                f"{fmt(r)}×", f"{fmt(ratio(r, limit))}×",
                r is not None and r <= limit)

    rpc = load(os.path.join(out_dir, "rpc.json"))
    if rpc:
        s = rpc["summary"]
        row("rpc", "Pick RPC p50 vs empty unary RPC, same server", "≤ 1.1×",
            f"{fmt(s['pick_p50_us']['median'], ' µs')} vs "
            f"{fmt(s['empty_p50_us']['median'], ' µs')}",
            fmt_spread(s["p50_ratio"], "×"),
            f"{fmt(s['p50_ratio']['median'] / 1.1)}×",
            s["p50_ratio"]["median"] <= 1.1)
        row("rpc", "Pick RPC throughput vs empty unary RPC", "≥ 0.9×",
            f"{fmt(s['pick_qps']['median'], '/s')} vs "
            f"{fmt(s['empty_qps']['median'], '/s')}",
            fmt_spread(s["qps_ratio"], "×"),
            f"{fmt(s['qps_ratio']['median'] / 0.9)}×",
            s["qps_ratio"]["median"] >= 0.9)

    fan = load(os.path.join(out_dir, "fanout.json"))
    if fan:
        for n, fl in sorted(fan.get("floor", {}).items(),
                            key=lambda kv: int(kv[0])):
            cpu, p99 = fl["cpu_ratio"], fl["p99_ratio"]
            row("fanout", f"server CPU per stream per update, {int(n)} "
                "streams, vs the bare gRPC floor", "≤ 0.7× floor",
                f"{fmt_spread(fl['aside_cpu_per_stream_update_us'], ' µs')} "
                f"vs {fmt_spread(fl['floor_cpu_per_stream_update_us'], ' µs')}",
                f"{fmt_spread(cpu, '×')}",
                f"{fmt(ratio(cpu and cpu['median'], 0.7))}×",
                cpu is not None and cpu["median"] <= 0.7)
            row("fanout", f"last-subscriber p99, {int(n)} streams, vs the "
                "bare gRPC floor", "≤ 1.0× floor",
                f"{fmt_spread(fl['aside_last_p99_ms'], ' ms')} vs "
                f"{fmt_spread(fl['floor_last_p99_ms'], ' ms')}",
                f"{fmt_spread(p99, '×')}",
                f"{fmt(p99 and p99['median'])}×",
                p99 is not None and p99["median"] <= 1.0)
            mem, fmem = (fl.get("aside_rss_per_stream_kib"),
                         fl.get("floor_rss_per_stream_kib"))
            if mem:
                row("fanout", f"server memory per Watch stream, {int(n)} "
                    "streams (peak RSS growth during the run / streams)",
                    "≤ 32 KiB",
                    f"{fmt_spread(mem, ' KiB')} vs "
                    f"{fmt_spread(fmem, ' KiB')}",
                    f"{fmt(ratio(mem['median'], fmem and fmem['median']))}× "
                    "floor",
                    f"{fmt(mem['median'] / 32)}×", mem["median"] <= 32)
        procs = load(os.path.join(out_dir, "fanout_procs.json"))
        if procs:
            ps = procs["summary"]
            streams = procs["processes"] * procs["streams_per_process"]
            where = (f"{streams} streams from {procs['processes']} "
                     "subscriber processes")
            cpu = ps["cpu_ratio"]
            row("fanout", f"server CPU per stream per update, {where}, vs "
                "the floor", "≤ 0.7× floor",
                f"{fmt_spread(ps['aside_cpu_per_stream_update_us'], ' µs')} "
                f"vs {fmt_spread(ps['floor_cpu_per_stream_update_us'], ' µs')}",
                fmt_spread(cpu, "×"), f"{fmt(cpu['median'] / 0.7)}×",
                cpu["median"] <= 0.7)
            p99 = ps["p99_ratio"]
            row("fanout", f"last-subscriber p50 / p99, {where}, vs the floor",
                "p99 ≤ 1.0× floor",
                f"{fmt_spread(ps['aside_last_p50_ms'], ' ms')} / "
                f"{fmt_spread(ps['aside_last_p99_ms'], ' ms')} vs "
                f"{fmt_spread(ps['floor_last_p99_ms'], ' ms')}",
                fmt_spread(p99, "×"), f"{fmt(p99['median'])}×",
                p99["median"] <= 1.0)
            mem = ps["aside_rss_per_idle_stream_kib"]
            row("fanout", f"server memory per idle Watch stream, {where}",
                "≤ 32 KiB",
                f"{fmt_spread(mem, ' KiB')} vs "
                f"{fmt_spread(ps['floor_rss_per_idle_stream_kib'], ' KiB')}",
                "—", f"{fmt(mem['median'] / 32)}×", mem["median"] <= 32)
        by = {r["subscribers"]: r for r in fan["runs"]}
        big, one = by.get(1000), by.get(1)
        if big and one and "cpu_per_update_us" in one:
            row("fanout", "fixed cost per update (1 stream: Admin drain, "
                "commit, rebuild, encode, one write)", "—",
                fmt(one["cpu_per_update_us"], " µs"), None, None, None)

    rate = load(os.path.join(out_dir, "fanout_rate.json"))
    if rate:
        rs = rate["summary"]
        ratio = rs["ratio"]
        row("fanout", f"sustained update rate, {rate['streams']} streams "
            "(open loop, bounded last-subscriber lag), vs the floor",
            "—",
            f"{fmt_spread(rs['aside_sustained_rate'], '/s')} vs "
            f"{fmt_spread(rs['floor_sustained_rate'], '/s')} ("
            + (f"publication.window 0s "
               f"{fmt_spread(rs['aside_no_window_sustained_rate'], '/s')}, "
               if "aside_no_window_sustained_rate" in rs else "")
            + f"state on "
            f"tmpfs {fmt_spread(rs['aside_tmpfs_sustained_rate'], '/s')}"
            f", 1 stream "
            f"{fmt_spread(rs['aside_1_stream_sustained_rate'], '/s')})",
            fmt_spread(ratio, "×") if ratio else "n/a", None, None)
    stall = load(os.path.join(out_dir, "fanout_stall.json"))
    if stall:
        ss = stall["summary"]
        row("fanout", f"server memory per stalled Watch stream "
            f"({stall['streams']} that never grant window, 8 s of "
            "changes) vs an idle one", "bounded",
            f"{fmt_spread(ss['stalled_last_kib'], ' KiB')} vs idle "
            f"{fmt_spread(ss['idle_kib_per_stream'], ' KiB')}; second "
            f"half growth {fmt_spread(ss['growth_second_half'], '×')}",
            fmt_spread(ss["stalled_vs_idle"], "×"), None,
            ss["growth_second_half"]["max"] <= 1.05)

    probe = load(os.path.join(out_dir, "probe.json"))
    if probe:
        steady = {s["targets"]: s for s in probe.get("steady", [])}
        ten = steady.get(10000)
        if ten:
            row("probe", "10 000 targets at 1 s: prober CPU", "≤ 25 % of a core",
                f"{100 * ten['cpu_fraction']:.1f} % "
                f"({100 * ten['cpu_fraction_min']:.1f}–"
                f"{100 * ten['cpu_fraction_max']:.1f})",
                f"{fmt(ten['cpu_ratio_to_paced_floor'])}× paced connects",
                f"{fmt(ten['cpu_fraction'] / 0.25)}×",
                ten["cpu_fraction"] <= 0.25)
        rr = probe.get("saturated_rate_ratio")
        cr = probe.get("saturated_per_cpu_rate_ratio")
        row("probe", "probe rate vs bare Asio connect loop (plain / per CPU)",
            "≥ 0.9×",
            f"{fmt(probe.get('saturated_probes_per_second'), '/s')} vs "
            f"{fmt(probe.get('bare_connects_per_second'), '/s')}",
            f"{fmt(rr)}× / {fmt(cr)}×", f"{fmt(ratio(rr, 0.9))}×",
            rr is not None and rr >= 0.9)

    arena = load(os.path.join(out_dir, "arena.json"))
    if arena:
        runs = {r["name"]: r for r in arena["runs"] if "steps" in r}
        limit = runs.get("limit")
        step = None
        if limit:
            loads = [st["load"] for st in limit["steps"]]
            step = min(range(len(loads)), key=lambda i: abs(loads[i] - 0.9))

        def at(name, key):
            r = runs.get(name)
            return None if r is None or step is None or \
                step >= len(r["steps"]) else r["steps"][step][key]

        stubs = [n for n, r in runs.items() if r["mode"] == "stub"]
        # The recommended policy: prequal once it runs, else the stub
        # policy with the lowest p99 at the 0.9 step.
        best = "prequal" if "prequal" in runs else (
            min(stubs, key=lambda n: at(n, "p99_ms") or 1e9) if stubs
            else None)
        if best and limit:
            load_txt = f"{limit['steps'][step]['load']:g}"
            p99, lp99 = at(best, "p99_ms"), at("limit", "p99_ms")
            row("arena", f"{best} p99 at {load_txt} load vs the "
                "perfect-information limit", "≤ 1.25×",
                f"{fmt(p99, ' ms')} vs {fmt(lp99, ' ms')}",
                f"{fmt(ratio(p99, lp99))}×",
                f"{fmt(ratio(ratio(p99, lp99), 1.25))}×",
                ratio(p99, lp99) is not None and p99 / lp99 <= 1.25)
            for peer, target in (("p2c_peak_ewma", 0.75),
                                 ("round_robin", 0.5)):
                q = at(peer, "p99_ms")
                if q is None or peer == best:
                    continue
                row("arena", f"{best} p99 / {peer} p99 at {load_txt}",
                    f"≤ {target}×", f"{fmt(p99, ' ms')} vs {fmt(q, ' ms')}",
                    f"{fmt(ratio(p99, q))}×",
                    f"{fmt(ratio(ratio(p99, q), target))}×",
                    ratio(p99, q) is not None and p99 / q <= target)
            sb, sl = (runs[best].get("sustainable_load"),
                      limit.get("sustainable_load"))
            row("arena", f"{best} sustainable load (p99 ≤ 5× mean call) vs "
                "the limit's", "≥ 0.9×", f"{fmt(sb)} vs {fmt(sl)}",
                f"{fmt(ratio(sb, sl))}×",
                f"{fmt(ratio(0.9, ratio(sb, sl)))}×" if sb else "—",
                ratio(sb, sl) is not None and sb / sl >= 0.9)
            e = runs[best].get("extra_per_query")
            row("arena", f"{best} extra messages per query, fleet-wide",
                "≤ 0.1", fmt(e, digits=3), None,
                f"{fmt(ratio(e, 0.1))}×", e is not None and e <= 0.1)
            k = at(best, "sinkhole_share")
            row("arena", f"{best} calls to the sinkhole after its first "
                f"second at {load_txt}", "≤ 1 %",
                fmt(k and 100 * k, " %"), None,
                f"{fmt(ratio(k, 0.01))}×", k is not None and k <= 0.01)

    doc = {"machine": load(os.path.join(out_dir, "machine.json")),
           "rows": rows}
    write_json(os.path.join(out_dir, "summary.json"), doc)
    lines = ["| area | what | target | measured (median, min–max) | vs floor "
             "or peer | vs target | met |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        met = "—" if r["met"] is None else ("**yes**" if r["met"] else "no")
        lines.append(f"| {r['area']} | {r['what']} | {r['target']} | "
                     f"{r['measured']} | {r['vs_floor'] or '—'} | "
                     f"{r['vs_target'] or '—'} | {met} |")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write(table)
    return table


def details(out_dir):
    """Markdown tables of every figure, for bench/README.md."""
    out = []
    sel = Micro(load(os.path.join(out_dir, "selector_bench.json")))
    cli = Micro(load(os.path.join(out_dir, "client_bench.json")))

    def ns(name, micro=sel, field="cpu_time"):
        return micro.median(name, field)

    def rel(v, floor):
        return "" if v is None or not floor else f" ({v / floor:.1f}×)"

    if sel.runs:
        f1 = ns("BM_FloorAtomicIncrement/threads:1")
        f2 = ns("BM_FloorAtomicIncrement/threads:2")
        out.append("#### Picks (ns per pick, median of repetitions; ratio to "
                   "the atomic floor of the same thread count)\n")
        out.append(f"Floors: atomic increment {fmt(f1)} ns (1 thread), "
                   f"{fmt(f2)} ns (2 threads); clock read "
                   f"{fmt(ns('BM_FloorClockRead'))} ns.\n")
        out.append("| policy | 10: 1 thr / 2 thr | 100 | 1000 | 10000 | "
                   "allocs/pick |")
        out.append("|---|---|---|---|---|---|")
        policies = []
        for name in sel.runs:
            if name.startswith("BM_Pick/"):
                policy = name.split("/")[1]
                if policy not in policies:
                    policies.append(policy)
        for policy in policies:
            cells = []
            allocs = 0.0
            for n in (10, 100, 1000, 10000):
                one = ns(f"BM_Pick/{policy}/{n}/threads:1")
                two = ns(f"BM_Pick/{policy}/{n}/threads:2")
                cells.append(f"{fmt(one)}{rel(one, f1)} / "
                             f"{fmt(two)}{rel(two, f2)}")
                for t in (1, 2):
                    allocs = max([allocs] + sel.values(
                        f"BM_Pick/{policy}/{n}/threads:{t}",
                        "allocs_per_pick"))
            out.append(f"| {policy} | " + " | ".join(cells) +
                       f" | {allocs:g} |")
        out.append("")
        out.append("#### Load recording (ns per operation)\n")
        out.append("| operation | 1 thread | 2 threads |")
        out.append("|---|---|---|")
        for label, name in (
                ("Start + Finish, pending", "BM_RecordCompletion/pending"),
                ("Finish only, pending", "BM_FinishOnly/pending"),
                ("Start + Finish, peak-EWMA", "BM_RecordCompletion/peak_ewma"),
                ("Finish only, peak-EWMA", "BM_FinishOnly/peak_ewma"),
                ("Start + Finish, least-time EWMAs",
                 "BM_RecordCompletion/least_time"),
                ("SnapshotCell::Acquire", "BM_SnapshotAcquire")):
            one = ns(f"{name}/threads:1")
            two = ns(f"{name}/threads:2")
            out.append(f"| {label} | {fmt(one)}{rel(one, f1)} | "
                       f"{fmt(two)}{rel(two, f2)} |")
        out.append(f"| SnapshotCell::Publish (swap, prebuilt table) | "
                   f"{fmt(ns('BM_SnapshotPublish'))} | |")
        out.append("")
        out.append("#### Picks during snapshot swaps (server path: Acquire + "
                   "round-robin pick, 100 backends; per pick, from 16-pick "
                   "batches)\n")
        out.append("| writer | swaps/s | p50 ns | p99 ns | p99.9 ns | "
                   "p99 vs steady |")
        out.append("|---|---|---|---|---|---|")
        steady = ns("BM_PickDuringSwap/0", field="p99_ns")
        for arg, label in ((0, "none (steady)"), (1, "every 100 µs"),
                           (2, "back to back")):
            name = f"BM_PickDuringSwap/{arg}"
            p99 = ns(name, field="p99_ns")
            out.append(f"| {label} | {fmt(ns(name, field='swaps_per_s'))} | "
                       f"{fmt(ns(name, field='p50_ns'))} | {fmt(p99)} | "
                       f"{fmt(ns(name, field='p999_ns'))} | "
                       f"{fmt(p99 / steady if p99 and steady else None)}× |")
        out.append("")
        sort = ns("BM_FloorSortRingPoints/160000")
        out.append(f"#### Builds (CPU time; ratio to std::sort of 160 000 "
                   f"ring points, {fmt(sort and sort / 1e6)} ms)\n")
        out.append("| build | time | ratio |")
        out.append("|---|---|---|")
        for label, name in (
                ("ketama ring, 1000 backends × 160 points",
                 "BM_KetamaBuild/1000"),
                ("ketama ring, one backend added to 1000 (merge)",
                 "BM_KetamaOneBackendChange"),
                ("maglev table, 65537 slots, 1000 backends",
                 "BM_MaglevBuild/1000")):
            v = ns(name)
            out.append(f"| {label} | {fmt(v and v / 1e6)} ms | "
                       f"{fmt(v / sort if v and sort else None, digits=3)}× |")
        out.append("")
        out.append("Whole table builds (`Table::Create`: validate, sort, "
                   "eligibility, selector), weights 1..7:\n")
        out.append("| policy | 1000 backends | 10000 backends |")
        out.append("|---|---|---|")
        builds = []
        for name in sel.runs:
            if name.startswith("BM_TableBuild/"):
                policy = name.split("/")[1]
                if policy not in builds:
                    builds.append(policy)
        for policy in builds:
            a = ns(f"BM_TableBuild/{policy}/1000")
            b = ns(f"BM_TableBuild/{policy}/10000")
            out.append(f"| {policy} | {fmt(a and a / 1e6)} ms | "
                       f"{fmt(b and b / 1e6)} ms |")
        out.append("")
        out.append("#### Disruption (keys key-0..key-99999 whose first "
                   "choice moves, 100 backends)\n")
        out.append("| policy | one added (ideal 0.99 %) | one removed (ideal "
                   "1.00 %) |")
        out.append("|---|---|---|")
        for policy in ("hash", "ketama", "maglev"):
            cells = []
            for arg in (1, 0):
                name = next((n for n in sel.runs if n.startswith(
                    f"BM_Disruption/{policy}/100/{arg}")), None)
                v = ns(name, field="moved_pct") if name else None
                cells.append(f"{fmt(v, digits=2)} %")
            out.append(f"| {policy} | {cells[0]} | {cells[1]} |")
        out.append("")
    if cli.runs:
        f1 = ns("BM_RelaxedIncrement/threads:1", cli)
        f2 = ns("BM_RelaxedIncrement/threads:2", cli)
        out.append("#### Client stub (`client_bench`; ns per op, ratio to "
                   "the relaxed increment of the same run)\n")
        out.append("| benchmark | 1 thread | 2 threads | allocs/op |")
        out.append("|---|---|---|---|")
        for label, name in (
                ("relaxed increment (floor)", "BM_RelaxedIncrement"),
                ("atomic<shared_ptr>-style SnapshotCell::Acquire",
                 "BM_SnapshotCellAcquire"),
                ("lib selector alone (rr, 10 backends)",
                 "BM_TableSelectorPick"),
                ("clock read", "BM_ClockNow"),
                ("TSC read, scaled to ns", "BM_TscNow"),
                ("lib selector between two TSC stamps",
                 "BM_SelectorPickTwoStamps"),
                ("stub Pick, rr (handle dropped)", "BM_ClientPickRoundRobin"),
                ("stub Pick + Done, rr", "BM_ClientPickDoneRoundRobin"),
                ("stub Pick, wrr", "BM_ClientPickWeightedRoundRobin"),
                ("stub Pick + Done, wrr",
                 "BM_ClientPickDoneWeightedRoundRobin"),
                ("lib selector alone (p2c peak_ewma, 10 backends)",
                 "BM_TableSelectorPickPeakEwma"),
                ("stub Pick + Done, p2c peak_ewma",
                 "BM_ClientPickDonePeakEwma")):
            one = ns(f"{name}/threads:1", cli)
            two = ns(f"{name}/threads:2", cli)
            allocs = max(cli.values(f"{name}/threads:1", "allocs_per_op") +
                         cli.values(f"{name}/threads:2", "allocs_per_op") +
                         [0])
            out.append(f"| {label} | {fmt(one)}{rel(one, f1)} | "
                       f"{fmt(two)}{rel(two, f2)} | {allocs:.2g} |")
        out.append("")
        accuracy = []
        for ms, iters in ((1, 5), (10, 5), (100, 5), (1000, 2)):
            errs = cli.values(f"BM_TscAccuracy/{ms}/iterations:{iters}",
                              "err_ns")
            if errs:
                worst = max(errs, key=abs)
                accuracy.append(f"{worst:+.0f} ns over {ms} ms")
        if accuracy:
            out.append("TSC-derived durations against CLOCK_MONOTONIC's "
                       "(the largest difference over the repetitions): " +
                       ", ".join(accuracy) + ".\n")
        out.append("Stub Pick + Done while the table changes (per pick, from "
                   "16-pick batches):\n")
        out.append("| table updates pushed | applied/s | p50 ns | p99 ns | "
                   "p99.9 ns | p99 vs steady |")
        out.append("|---|---|---|---|---|---|")
        steady = ns("BM_ClientPickDuringUpdates/0", cli, "p99_ns")
        for arg in (0, 100, 1000):
            name = f"BM_ClientPickDuringUpdates/{arg}"
            p99 = ns(name, cli, "p99_ns")
            out.append(f"| {arg}/s | {fmt(ns(name, cli, 'tables_per_s'))} | "
                       f"{fmt(ns(name, cli, 'p50_ns'))} | {fmt(p99)} | "
                       f"{fmt(ns(name, cli, 'p999_ns'))} | "
                       f"{fmt(p99 / steady if p99 and steady else None)}× |")
        out.append("")

    rpc = load(os.path.join(out_dir, "rpc.json"))
    if rpc:
        out.append(f"#### Pick RPC against an empty unary RPC "
                   f"({rpc['concurrency']} calls in flight, "
                   f"{len(rpc['repetitions'])} alternating repetitions of "
                   f"{rpc['seconds']:g} s)\n")
        out.append("| rep | Pick p50 / p99 µs, calls/s | empty p50 / p99 µs, "
                   "calls/s | p50 ratio | throughput ratio |")
        out.append("|---|---|---|---|---|")
        for i, r in enumerate(rpc["repetitions"]):
            p, e = r["pick"], r["empty"]
            out.append(f"| {i + 1} | {p['p50_us']:.0f} / {p['p99_us']:.0f}, "
                       f"{p['qps']:.0f} | {e['p50_us']:.0f} / "
                       f"{e['p99_us']:.0f}, {e['qps']:.0f} | "
                       f"{r['p50_ratio']:.2f}× | {r['qps_ratio']:.2f}× |")
        sm = rpc["summary"]
        out.append(f"| median (min–max) | | | "
                   f"{fmt_spread(sm['p50_ratio'], '×')} | "
                   f"{fmt_spread(sm['qps_ratio'], '×')} |")
        out.append("")
    fan = load(os.path.join(out_dir, "fanout.json"))
    if fan:
        out.append(f"#### Fan-out ({fan['changes']} changes per run, each a "
                   "drain through Admin)\n")
        out.append("| subscribers | last subscriber p50 / p99 / max ms | "
                   "median subscriber p50 ms | server CPU per update | "
                   "per stream per update |")
        out.append("|---|---|---|---|---|")
        for r in fan["runs"]:
            out.append(f"| {r['subscribers']} | {r['last_p50_ms']:.2f} / "
                       f"{r['last_p99_ms']:.2f} / {r['last_max_ms']:.2f} | "
                       f"{r['median_p50_ms']:.2f} | "
                       f"{fmt(r.get('cpu_per_update_us'), ' µs')} | "
                       f"{r['cpu_per_stream_update_us']:.2f} µs |")
        out.append("")
        if fan.get("floor_pairs"):
            out.append("#### Fan-out against the bare gRPC floor "
                       "(`fanout_floor`, same subscriber tool, alternating)\n")
            out.append("| streams | rep | update bytes | Aside CPU per stream "
                       "per update | floor | ratio | Aside last p99 ms | "
                       "floor | ratio |")
            out.append("|---|---|---|---|---|---|---|---|---|")
            for i, p in enumerate(fan["floor_pairs"]):
                a, f = p["aside"], p["floor"]
                out.append(f"| {p['subscribers']} | {i + 1} | "
                           f"{a.get('update_bytes', 'n/a')} / "
                           f"{f.get('update_bytes', 'n/a')} | "
                           f"{a['cpu_per_stream_update_us']:.2f} µs | "
                           f"{f['cpu_per_stream_update_us']:.2f} µs | "
                           f"{p['cpu_ratio']:.2f}× | "
                           f"{a['last_p99_ms']:.2f} | {f['last_p99_ms']:.2f} "
                           f"| {p['p99_ratio']:.2f}× |")
            out.append("")
    probe = load(os.path.join(out_dir, "probe.json"))
    if probe:
        out.append(f"#### Probing ({probe['rounds']} saturated rounds, "
                   f"{probe['concurrency']} in flight)\n")
        out.append(f"Saturated: bare loop "
                   f"{probe['bare_connects_per_second']:.0f} connects/s at "
                   f"{probe['bare_cpu_us_per_connect']:.2f} µs CPU each; "
                   f"prober {probe['saturated_probes_per_second']:.0f} "
                   f"probes/s at {probe['saturated_cpu_us_per_probe']:.2f} µs "
                   f"each: rate ratio "
                   f"{probe['saturated_rate_ratio']:.2f}×, per-CPU rate "
                   f"ratio {probe['saturated_per_cpu_rate_ratio']:.2f}×.\n")
        out.append("| targets at 1 s | probes/s | prober CPU (range) | × paced "
                   "floor | × saturated floor | failures |")
        out.append("|---|---|---|---|---|---|")
        for st in probe.get("steady", []):
            out.append(f"| {st['targets']} | {st['probes_per_second']:.0f} of "
                       f"{st['expected_per_second']:.0f} | "
                       f"{100 * st['cpu_fraction']:.1f} % "
                       f"({100 * st['cpu_fraction_min']:.1f}–"
                       f"{100 * st['cpu_fraction_max']:.1f}) | "
                       f"{st['cpu_ratio_to_paced_floor']:.2f}× | "
                       f"{st['cpu_ratio_to_bare_floor']:.2f}× | "
                       f"{st['failures']:.0f} |")
        out.append("")
    arena = load(os.path.join(out_dir, "arena.json"))
    if arena:
        runs = arena["runs"]
        limit = next((r for r in runs if r["name"] == "limit"), None)
        out.append(f"#### Balancing arena ({arena['scenario']}, "
                   f"{arena['aggregate_capacity']:.0f} calls/s capacity, "
                   f"mean call {arena['mean_call_ms']:.2f} ms, "
                   f"{arena['clients']} clients, "
                   f"{arena['duration_s']:g} s per step)\n")
        for k, load_ in enumerate(arena["loads"]):
            lim = limit["steps"][k] if limit and "steps" in limit else None
            cpu = [r["steps"][k]["machine_cpu"] for r in runs
                   if "steps" in r and k < len(r["steps"])]
            own = [r["steps"][k]["arena_cpu"] for r in runs
                   if "steps" in r and k < len(r["steps"])]
            out.append(f"load {load_:g}, machine CPU (/proc/stat) "
                       f"{100 * min(cpu):.0f}–{100 * max(cpu):.0f} %, the "
                       f"arena's processes {100 * min(own):.0f}–"
                       f"{100 * max(own):.0f} % of it:\n"
                       if cpu else f"load {load_:g}:\n")
            out.append("| policy | p50 ms | p99 ms | p99 ×limit | p99.9 ms "
                       "| p99.9 ×limit | errors | max RIF | share/capacity "
                       "(max) | recovery | sinkhole after 1 s | extra "
                       "msgs/query |")
            out.append("|---" * 12 + "|")
            for r in runs:
                if "steps" not in r or k >= len(r["steps"]):
                    continue
                st = r["steps"][k]
                rec = st["recovery_s"]
                rec = ("—" if rec is None else rec if isinstance(rec, str)
                       else f"{rec:.1f} s")
                out.append(
                    f"| {r['name']} | {fmt(st['p50_ms'])} | "
                    f"{fmt(st['p99_ms'])} | "
                    f"{fmt(lim and st['p99_ms'] / lim['p99_ms'])}× | "
                    f"{fmt(st['p999_ms'])} | "
                    f"{fmt(lim and st['p999_ms'] / lim['p999_ms'])}× | "
                    f"{100 * st['errors'] / max(st['calls'], 1):.2f} % | "
                    f"{st['max_rif']} | {st['max_share_ratio']:.2f}× | "
                    f"{rec} | {100 * st['sinkhole_share']:.2f} % | "
                    f"{r['extra_per_query']:.3f} |")
            out.append("")
        out.append("| policy | sustainable load | ×limit | extra messages "
                   "per query (by kind) |")
        out.append("|---|---|---|---|")
        ls = limit.get("sustainable_load") if limit else None
        for r in runs:
            if "steps" not in r:
                continue
            kinds = ", ".join(f"{k} {v}" for k, v in r["extra"].items() if v)
            out.append(f"| {r['name']} | {r['sustainable_load']:g} | "
                       f"{fmt(ls and r['sustainable_load'] / ls)}× | "
                       f"{r['extra_per_query']:.3f} ({kinds or 'none'}) |")
        out.append("")
        skipped = [f"{r['name']} ({r['skipped']})" for r in runs
                   if "skipped" in r]
        if skipped:
            out.append("Skipped: " + "; ".join(skipped) + "\n")
    return "\n".join(out)


def run_fanout_xds(args, out_dir):
    """fanout-xds: the xDS fan-out cost against Watch's in the same run:
    one server, 1000 Watch streams on one group for `changes` changes,
    then 1000 ADS streams on it for as many more (fanout_load --ads);
    the ratios ADS / Watch of last-subscriber p50 and p99 and of server
    CPU per stream per update, over `reps` runs on fresh servers."""
    n = 1000
    changes = 10 if args.quick else 40
    reps = 1 if args.quick else 3
    log(f"== fanout-xds: {n} Watch then {n} ADS subscribers of one group, "
        f"{changes} changes each, {reps} runs")
    token = "bench-fanout-admin-token"
    runs = []
    with tempfile.TemporaryDirectory(prefix="aside-bench-") as tmp:
        tokens, config = many_streams_server(tmp, token)
        for rep in range(reps):
            server = Server(args.bin_dir, os.path.join(tmp, f"state-{rep}"),
                            ["--admin-token-file", tokens, "--config",
                             config])
            try:
                r = run_json_line(
                    [os.path.join(args.bin_dir, "fanout_load"), "--target",
                     server.target, "--token", token, "--group",
                     f"fanout-xds-{rep}", "--subscribers", str(n),
                     "--changes", str(changes), "--server-pid",
                     str(server.pid), "--channels",
                     str(fanout_channels(n)), "--ads"],
                    timeout=900)
            finally:
                server.stop()
            log(f"  run {rep}: Watch last p50 {r['last_p50_ms']:.2f} ms, "
                f"p99 {r['last_p99_ms']:.2f} ms, CPU "
                f"{r['cpu_per_stream_update_us']:.2f} us/stream/update; ADS "
                f"{r['ads_last_p50_ms']:.2f} / {r['ads_last_p99_ms']:.2f} ms, "
                f"{r['ads_cpu_per_stream_update_us']:.2f} us; ratios p50 "
                f"{r['ads_to_watch_last_p50']:.2f}x, p99 "
                f"{r['ads_to_watch_last_p99']:.2f}x, CPU "
                f"{r['ads_to_watch_cpu_per_stream_update']:.2f}x")
            runs.append(r)
    summary = {key: spread([r[key] for r in runs])
               for key in ("ads_to_watch_last_p50", "ads_to_watch_last_p99",
                           "ads_to_watch_cpu_per_stream_update",
                           "cpu_per_stream_update_us",
                           "ads_cpu_per_stream_update_us")}
    write_json(os.path.join(out_dir, "fanout_xds.json"),
               {"subscribers": n, "changes": changes, "runs": runs,
                "summary": summary})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default="build-release")
    parser.add_argument("--out-dir", default=os.path.join(ROOT, "build",
                                                          "bench"))
    parser.add_argument("--quick", action="store_true",
                        default=bool(os.environ.get("BENCH_QUICK")))
    parser.add_argument("--only", default=",".join(PARTS),
                        help="comma-separated parts: " + ",".join(PARTS))
    parser.add_argument("--fanout-procs", action="store_true",
                        help="with the fanout part, not in quick mode: "
                        "10 000 Watch streams from 10 subscriber processes "
                        "against the floor (fanout_procs.json)")
    parser.add_argument("--fanout-churn", action="store_true",
                        help="with the fanout part, not in quick mode: "
                        "1000 changes/s over 100 groups to 10 000 Watch "
                        "streams from 10 processes, against the floor "
                        "(fanout_churn.json)")
    parser.add_argument("--churn-rate", type=int, default=1000,
                        help="with --fanout-churn: changes per second "
                        "(default 1000)")
    parser.add_argument("--churn-pairs", type=int, default=2,
                        help="with --fanout-churn: Aside/floor pairs "
                        "(default 2)")
    parser.add_argument("--fanout-rate", action="store_true",
                        help="with the fanout part, not in quick mode: the "
                        "update rate one replica sustains to 1000 Watch "
                        "streams, against the floor (fanout_rate.json)")
    parser.add_argument("--fanout-stall", action="store_true",
                        help="with the fanout part, not in quick mode: "
                        "server memory of 1000 Watch streams that never "
                        "grant window, against 1000 idle ones "
                        "(fanout_stall.json)")
    parser.add_argument("--summary-only", action="store_true",
                        help="summarise the JSON already in --out-dir")
    args = parser.parse_args()
    args.bin_dir = os.path.join(os.path.abspath(args.build_dir), "bin")
    os.makedirs(args.out_dir, exist_ok=True)
    failed = []
    if not args.summary_only:
        write_json(os.path.join(args.out_dir, "machine.json"), machine())
        began = time.monotonic()
        runners = {"micro": run_micro, "rpc": run_rpc, "fanout": run_fanout,
                   "fanout-xds": run_fanout_xds, "probe": run_probe,
                   "arena": run_arena, "sim": run_sim, "scale": run_scale}
        for part in args.only.split(","):
            if part not in runners:
                sys.exit(f"run.py: unknown part '{part}'")
            t0 = time.monotonic()
            try:
                runners[part](args, args.out_dir)
            except (subprocess.SubprocessError, RuntimeError, OSError,
                    KeyError, ValueError) as e:
                log(f"!! {part} failed: {e}")
                failed.append(part)
            log(f"   ({part}: {time.monotonic() - t0:.0f} s)")
        log(f"== all parts: {time.monotonic() - began:.0f} s")
    table = summarize(args.out_dir)
    with open(os.path.join(args.out_dir, "report.md"), "w") as f:
        f.write("### Against the targets\n\n" + table + "\n" +
                details(args.out_dir))
        sim = os.path.join(args.out_dir, "sim.md")
        if os.path.exists(sim):
            with open(sim) as s:
                f.write("\n## Arena simulator (arena_sim)\n" + s.read())
        scale = os.path.join(args.out_dir, "scale.md")
        if os.path.exists(scale):
            with open(scale) as s:
                f.write("\n## Scale (scale_bench)\n" + s.read())
    log("\nTargets (DESIGN.md section 8); JSON, summary.md and report.md in "
        + os.path.relpath(args.out_dir, os.getcwd()) + "/\n")
    log(table)
    if failed:
        sys.exit(f"run.py: failed parts: {', '.join(failed)}")


if __name__ == "__main__":
    main()
