#!/usr/bin/env bash
# Installs dependencies, builds scps and runs every test with ctest.
#   tests/run.sh              normal build in build/
#   tests/run.sh --sanitize   AddressSanitizer + UBSan build in build-asan/
#   tests/run.sh --tsan       ThreadSanitizer build in build-tsan/ (threaded tests)
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-normal}
case "$mode" in
  normal)     dir=build;      flags=() ;;
  --sanitize) dir=build-asan; flags=(-DSCPS_SANITIZE=ON) ;;
  --tsan)     dir=build-tsan; flags=(-DSCPS_TSAN=ON) ;;
  -h|--help)  sed -n '2,5p' "$0"; exit 0 ;;
  *) echo "tests/run.sh: unknown option '$mode' (try --help)" >&2; exit 2 ;;
esac

deploy/install-deps.sh
shared=$(cd .. && pwd)/shared
cmake -S . -B "$dir" -DSCPS_WERROR=ON -DSCPS_SHARED_DIR="$shared" "${flags[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1
if [ "$mode" = --tsan ]; then
  # Only tests that start threads are worth the ThreadSanitizer slowdown.
  (cd "$dir" && ctest --output-on-failure --no-tests=error -L threaded)
else
  (cd "$dir" && ctest --output-on-failure -j"$(nproc)")
fi
