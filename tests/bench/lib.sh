# Sourced by the tests/bench scripts once they have set repo and shared: the
# Release (-march=native) tree they all measure, build-bench/, in $build.
build=$repo/build-bench

# scps_bench_build TARGET...: configures build-bench/ and builds the targets.
scps_bench_build() {
  cmake -S "$repo" -B "$build" -DSCPS_NATIVE=ON -DCMAKE_BUILD_TYPE=Release -DSCPS_SHARED_DIR="$shared" >/dev/null
  cmake --build "$build" -j2 --target "$@" >/dev/null
}
