#!/usr/bin/env bash
# Preprocessing throughput (user batches to COO partitions), 1 and 2 threads:
#   tests/bench/prep.sh [--topology PxS] [--batches K]
# Builds scps-bench-prep (Release, -march=native) in build-bench/, runs it on
# dlrm8.json and criteo26.json and prints ids/s per run and per thread
# (target: 40 M ids/s per core). shared/ is the repo's sibling folder unless
# SCPS_SHARED_DIR is set.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
shared=${SCPS_SHARED_DIR:-$(dirname "$repo")/shared}
topology=2x4
batches=40
while [ $# -gt 0 ]; do
  case "$1" in
    --topology) topology=${2:?--topology needs PxS}; shift 2 ;;
    --batches) batches=${2:?--batches needs a number}; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "prep.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
done

. "$repo/tests/bench/lib.sh"
scps_bench_build scps-bench-prep
printf '%-10s %-8s %8s %14s %18s %10s\n' workload topology threads "ids/s" "ids/s per thread" "ms/batch"
for w in dlrm8 criteo26; do
  for t in 1 2; do
    "$build/tests/bench/scps-bench-prep" --workload "$shared/workloads/$w.json" --threads "$t" \
      --batches "$batches" --topology "$topology" |
      /usr/bin/python3 -c 'import json,sys
r = json.loads(sys.stdin.readline())
print("%-10s %-8s %8d %14.3e %18.3e %10.3f" % (r["workload"], r["topology"], r["threads"], r["ids_per_s"],
      r["ids_per_s_per_thread"], r["ms_per_batch"]))'
  done
done
