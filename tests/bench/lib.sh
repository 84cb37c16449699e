# Sourced by the tests/bench scripts once they have set repo and shared: the
# Release (-march=native) tree they all measure, build-bench/, in $build.
build=$repo/build-bench

# Server flags for the benchmark workloads: they keep the declared default
# per-partition limits (256 per table), far below what one of their batches
# sends a partition, and the servers enforce the limits in force; measure
# every id rather than refused or dropped ones (libscps adopts these).
SCPS_BENCH_SERVER_FLAGS=(--partition-limits 1073741824,1073741824)

# scps_bench_build TARGET...: configures build-bench/ and builds the targets.
scps_bench_build() {
  cmake -S "$repo" -B "$build" -DSCPS_NATIVE=ON -DCMAKE_BUILD_TYPE=Release -DSCPS_SHARED_DIR="$shared" >/dev/null
  cmake --build "$build" -j2 --target "$@" >/dev/null
}
