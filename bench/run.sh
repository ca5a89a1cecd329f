#!/usr/bin/env bash
# Runs every benchmark binary of a Release build and writes JSON results to
# build/bench/. Usage: bench/run.sh BUILD_DIR
set -euo pipefail
build_dir=${1:-build-release}
out_dir=build/bench
mkdir -p "$out_dir"
min_time=${BENCH_MIN_TIME:-0.2}
if [ -n "${BENCH_QUICK:-}" ]; then
  min_time=0.02
fi
for bench in "$build_dir"/bin/*_bench; do
  name=$(basename "$bench")
  echo "== $name"
  "$bench" --benchmark_min_time="$min_time" \
    --benchmark_out="$out_dir/$name.json" --benchmark_out_format=json
done
