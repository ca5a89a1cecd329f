#!/usr/bin/env bash
# Runs every libFuzzer target of a `make fuzz` build for a bounded time.
#   scripts/run-fuzzers.sh BUILD_DIR SECONDS [TARGET...]
# Each target starts from its kept seeds (tests/fuzz/corpus/<target>/) and
# a working corpus in BUILD_DIR/fuzz-corpus/<target>/ (new inputs land
# there, never in the tree). A crash, leak, sanitizer report, timeout or
# out-of-memory leaves its input in BUILD_DIR/fuzz-artifacts/ and fails the
# run; copy such an input into tests/fuzz/corpus/<target>/ with the fix so
# that it stays a regression test.
set -euo pipefail

build=$1
seconds=$2
shift 2
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(config_yaml_fuzz group_proto_fuzz watch_update_fuzz duration_fuzz
           token_file_fuzz http_request_fuzz dns_answer_fuzz
           health_probe_fuzz store_value_fuzz xds_request_fuzz
           grpclb_request_fuzz pick_request_fuzz session_token_fuzz)
fi
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$build/fuzz-artifacts"
failed=()
for t in "${targets[@]}"; do
  work="$build/fuzz-corpus/$t"
  mkdir -p "$work"
  echo "== $t: ${seconds}s" >&2
  if ! "$build/bin/$t" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
      -artifact_prefix="$build/fuzz-artifacts/$t-" \
      "$work" "$root/tests/fuzz/corpus/$t" 2> "$build/fuzz-$t.log"; then
    tail -n 60 "$build/fuzz-$t.log" >&2
    failed+=("$t")
  else
    grep -E '^stat::number_of_executed_units|^#[0-9]+.*DONE' \
      "$build/fuzz-$t.log" >&2 || true
  fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: failed: ${failed[*]} (inputs in $build/fuzz-artifacts/)" >&2
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran ${seconds}s each without a finding" >&2
