#!/usr/bin/env bash
# What a lookup through the scps Python package costs over the same lookup
# through libscps from C: for each workload, one server process (2
# SparseCores) on loopback, then rounds that alternate scps-bench-client
# --mode lookup and tests/bench/python_lookup.py (both prepare + Lookup, 1
# batch in flight, the same prep threads and wire format), the median of
# each round's median reported.
#   tests/bench/python.sh [--build DIR] [--rounds R] [--batches K] [WORKLOAD...]
# Default workloads: shared/workloads/serving-small-batch.json and dlrm8.json;
# default build: build-bench/ (Release, -march=native), built here.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
shared=${SCPS_SHARED_DIR:-$(dirname "$repo")/shared}
. "$repo/tests/bench/lib.sh"
rounds=3 batches=30 own_build=""
workloads=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) own_build=$(cd "${2:?--build needs a folder}" && pwd); shift 2 ;;
    --rounds) rounds=${2:?}; shift 2 ;;
    --batches) batches=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) workloads+=("$1"); shift ;;
  esac
done
[ ${#workloads[@]} -gt 0 ] || workloads=("$shared/workloads/serving-small-batch.json" "$shared/workloads/dlrm8.json")
if [ -n "$own_build" ]; then
  build=$own_build
else
  scps_bench_build scps-server scps-bench-client scps_python
fi
. "$repo/deploy/cluster.sh"
SCPS_CLUSTER_FLAGS=("${SCPS_BENCH_SERVER_FLAGS[@]}")
out=$(mktemp -d)
for w in "${workloads[@]}"; do
  name=$(basename "$w" .json)
  scps_cluster_start "$build/server/scps-server" "$w" 1 2 8G
  for ((r = 0; r < rounds; r++)); do
    "$build/tests/bench/scps-bench-client" --servers "$SCPS_CLUSTER_SERVERS" --workload "$w" --mode lookup \
      --batches "$batches" --prep-threads 2 >>"$out/$name-c.json"
    PYTHONPATH=$build/client/python /usr/bin/python3 "$repo/tests/bench/python_lookup.py" \
      --servers "$SCPS_CLUSTER_SERVERS" --workload "$w" --batches "$batches" --prep-threads 2 >>"$out/$name-py.json"
  done
  scps_cluster_stop
  SCPS_CLUSTER_DIR=$(mktemp -d)
done
/usr/bin/python3 - "$out" "${workloads[@]}" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
print("%-22s %12s %12s %10s %8s" % ("workload", "C ms/batch", "Py ms/batch", "overhead", "ratio"))
for w in sys.argv[2:]:
    name = os.path.basename(w)[:-5]
    med = lambda side: statistics.median(json.loads(l)["ms_per_batch_median"] for l in open(os.path.join(out, "%s-%s.json" % (name, side))))
    c, p = med("c"), med("py")
    print("%-22s %12.3f %12.3f %+9.3f %8.3f" % (name, c, p, p - c, p / c))
PY
rm -rf "$out"
