#!/usr/bin/env bash
# Runs every benchmark of a Release build and writes JSON results and a
# summary of the DESIGN.md targets to build/bench/ (see bench/README.md).
# Usage: bench/run.sh BUILD_DIR [run.py flags]; BENCH_QUICK=1 runs shorter.
set -euo pipefail
build_dir=${1:-build-release}
shift || true
exec python3 "$(dirname "$0")/run.py" --build-dir "$build_dir" "$@"
