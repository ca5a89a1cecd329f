#!/usr/bin/env bash
# clang-tidy, with the checks in the root .clang-tidy, over the project's own
# translation units in BUILD_DIR's compile_commands.json (generated protobuf
# code excluded), JOBS at a time. Findings are errors (WarningsAsErrors).
#
#   scripts/run-tidy.sh [BUILD_DIR] [JOBS] [FILE_REGEX]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build-clang}
jobs=${2:-2}
regex=${3:-"$PWD/(lib|server|client|tools|proto|tests|bench|examples)/.*\\.cc\$"}
tidy=$(command -v run-clang-tidy || command -v run-clang-tidy-14)
start=$(date +%s)
# -quiet: no per-file banner; the findings and the summary are printed.
# Headers: the project's own, not the generated ones under the build tree.
"$tidy" -p "$build_dir" -j "$jobs" -quiet \
  -header-filter="^$PWD/(lib|server|client|tools|proto|tests|bench|examples)/" \
  "$regex"
echo "run-tidy: clean in $(( $(date +%s) - start )) s"
