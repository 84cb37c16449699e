#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan+UBSan) in build-fuzz/ and runs
# each for SECONDS (default 60), as many at once as there are CPUs, starting
# from the committed corpus.
#   tests/fuzz/run.sh [SECONDS]
# New inputs go to a scratch directory, not the corpus; a crash stops the run
# with libFuzzer's report and leaves the input as build-fuzz/crash-*.
set -euo pipefail
cd "$(dirname "$0")/../.."
case "${1:-}" in -h|--help) sed -n '2,7p' "$0"; exit 0 ;; esac
seconds=${1:-60}
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "tests/fuzz/run.sh: SECONDS must be a number, got '$seconds'" >&2; exit 2; }
shared=$(cd .. && pwd)/shared
CC=clang cmake -S . -B build-fuzz -DSCPS_FUZZ=ON -DSCPS_NATIVE=OFF -DSCPS_SHARED_DIR="$shared" >/dev/null
targets=(request spec workload lookup_reply)
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]/#/fuzz_}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Each target is one single-threaded libFuzzer process: as many run at once
# as there are CPUs, each for its full SECONDS, so the run takes
# SECONDS x targets / CPUs.
fuzz_one() {
  local t=$1 scratch rc=0
  scratch=$(mktemp -d)
  (cd build-fuzz && "./tests/fuzz/fuzz_$t" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 \
      -timeout=10 -print_final_stats=1 "$scratch" "../tests/fuzz/corpus/$t" 2>"fuzz_$t.log") || rc=$?
  echo "$rc" >"build-fuzz/fuzz_$t.rc"
  rm -rf "$scratch"
}
running=0
for t in "${targets[@]}"; do
  echo "fuzz_$t: ${seconds} s"
  rm -f "build-fuzz/fuzz_$t.rc"
  fuzz_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$(nproc)" ]; then wait -n || true; running=$((running - 1)); fi
done
wait || true
for t in "${targets[@]}"; do
  if [ "$(cat "build-fuzz/fuzz_$t.rc" 2>/dev/null)" != 0 ]; then
    tail -60 "build-fuzz/fuzz_$t.log" >&2
    echo "fuzz_$t: FAILED (build-fuzz/fuzz_$t.log)" >&2
    exit 1
  fi
  echo -n "fuzz_$t: "
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "build-fuzz/fuzz_$t.log" | tr '\n' ' '
  echo
done
echo "fuzz: every target ran ${seconds} s without a finding"
