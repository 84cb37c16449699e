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

# scps_bench_cpu_busy: how busy the host's cores were over the next 2 s,
# in percent: the untimed work of others (builds, tests) does not take the
# bench lock, so the scripts report it beside their figures.
scps_bench_cpu_busy() {
  local a b
  a=$(head -1 /proc/stat); sleep 2; b=$(head -1 /proc/stat)
  echo "$a $b" | awk '{n = (NF - 2) / 2; for (i = 2; i <= n + 1; i++) { t0 += $i; t1 += $(i + n + 1) }
    idle = ($(n + 1 + 5) + $(n + 1 + 6)) - ($5 + $6); printf "%.0f\n", 100 * (1 - idle / (t1 - t0)) }'
}

# scps_bench_option OPTION VALUE: the options of the scripts that run one
# workload on one server (cpu.sh, callgrind.sh) into workload, sc, batches,
# mode, wire and own_build; returns 1 for an option it does not know.
scps_bench_option() {
  case "$1" in
    --workload) workload=${2:?--workload needs a file} ;;
    --sc) sc=${2:?--sc needs a number} ;;
    --batches) batches=${2:?--batches needs a number} ;;
    --mode) mode=${2:?--mode needs lookup or train} ;;
    --wire-format) wire=${2:?--wire-format needs float32 or bfloat16} ;;
    --build) own_build=$(cd "${2:?--build needs a folder}" && pwd) ;;
    *) return 1 ;;
  esac
}
