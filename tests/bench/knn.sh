#!/usr/bin/env bash
# TopK retrieval (TPU-KNN) next to FAISS and the machine's roofline, one run:
#   tests/bench/knn.sh [--rows N] [--dim D] [--queries Q] [--k LIST] [--recall R]
#                      [--rounds R] [--threads T] [--quick] [--build DIR] [--out DIR]
# Writes a retrieval workload (one table of N rows x D, default 1048576 x 64,
# normal initializer, SGD) and runs scps-bench-knn on it over loopback,
# (a) 1 server process x 2 SparseCores, (b) 2 processes x 1 SparseCore, each
# on a freshly started cluster: per k of LIST (default 10,100), exact and
# approximate (recall target R, default 0.95), R timed calls (default 10)
# of one batch of Q queries (default 256). The first run dumps the table and
# the queries; tests/bench/knn_faiss.py measures on those same vectors with
# T threads (default 2): FAISS IndexFlatIP (libgomp's OMP_WAIT_POLICY
# passive after the first cluster, active after the second) and the
# roofline (sgemm of the same shape, a read of the table) right after each
# cluster, then IndexIVFFlat and IndexHNSWFlat tuned to the same recall,
# with their build times. Prints the table of tests/bench/knn_report.py (FAISS's best flat
# figure, the best peaks), with the issue's two verdicts, and writes
# OUT/knn-results.json (OUT: build-bench/knn unless --out).
# --quick: 65536 rows, 2 rounds, no HNSW (a smoke run, for ctest).
# Builds scps-server and scps-bench-knn in build-bench/ (Release,
# -march=native) unless --build DIR names a build tree that has them; a
# full run holds /tmp/scps-bench.lock, as run.sh does, a quick one does not.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
shared=${SCPS_SHARED_DIR:-$(dirname "$repo")/shared}
rows=1048576 dim=64 queries=256 ks=10,100 recall=0.95 rounds=10 threads=2 quick=0 own_build="" out=""
args=("$@")
die() { echo "knn.sh: $*" >&2; exit 2; }
rows_set=0 rounds_set=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) rows=${2:?--rows needs a number}; rows_set=1; shift 2 ;;
    --dim) dim=${2:?--dim needs a number}; shift 2 ;;
    --queries) queries=${2:?--queries needs a number}; shift 2 ;;
    --k) ks=${2:?--k needs a list}; shift 2 ;;
    --recall) recall=${2:?--recall needs a number}; shift 2 ;;
    --rounds) rounds=${2:?--rounds needs a number}; rounds_set=1; shift 2 ;;
    --threads) threads=${2:?--threads needs a number}; shift 2 ;;
    --quick) quick=1; shift ;;
    --build) own_build=$(cd "${2:?--build needs a folder}" && pwd); shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (try --help)" ;;
  esac
done
if [ "$quick" = 1 ]; then
  [ "$rows_set" = 1 ] || rows=65536
  [ "$rounds_set" = 1 ] || rounds=2
fi
for v in rows dim queries rounds threads; do
  case "${!v}" in ''|*[!0-9]*|0) die "--$v '${!v}' is not a positive integer" ;; esac
done
case "$ks" in ''|*[!0-9,]*|,*|*,|*,,*) die "--k '$ks' is not a comma list of positive integers" ;; esac
awk -v r="$recall" 'BEGIN { exit !(r + 0 > 0 && r + 0 <= 1 && r ~ /^[0-9.]+$/) }' || die "--recall '$recall' is not in (0, 1]"

# A full run holds the lock so nothing else timed shares the cores.
if [ "$quick" = 0 ] && [ -z "${SCPS_BENCH_SUITE_LOCKED:-}" ]; then
  echo "knn.sh: waiting for /tmp/scps-bench.lock" >&2
  SCPS_BENCH_SUITE_LOCKED=1 exec flock /tmp/scps-bench.lock "$0" ${args[@]+"${args[@]}"}
fi

. "$repo/tests/bench/lib.sh"
if [ -n "$own_build" ]; then
  build=$own_build
else
  echo "knn.sh: building in $build" >&2
  scps_bench_build scps-server scps-bench-knn
fi
for b in server/scps-server tests/bench/scps-bench-knn; do
  [ -x "$build/$b" ] || die "'$build/$b' is missing (build it, or leave out --build)"
done
out=${out:-$build/knn}
mkdir -p "$out"
rm -f "$out"/scps-*.json "$out"/faiss-*.json "$out"/busy-*.txt "$out"/knn-results.json "$out"/table.f32 \
  "$out"/queries.f32 "$out"/knn-workload.json
started=$(date +%s)
# Untimed work of others does not take the lock: how busy the cores were
# before and after goes beside the figures (not in a quick run).
[ "$quick" = 1 ] || scps_bench_cpu_busy >"$out/busy-start.txt"
log() { echo "knn.sh [$(($(date +%s) - started))s]: $*" >&2; }

# The table's values come from the servers' initializer; FAISS gets them
# as the servers hold them (scps-bench-knn --dump-table).
wl=$out/knn-workload.json
cat >"$wl" <<EOF
{
 "name": "knn-retrieval",
 "description": "One table of $rows rows x $dim float32, N(0, 1/$dim) rows, for TopK retrieval (tests/bench/knn.sh).",
 "batch_size": 16,
 "ids": {"distribution": "uniform", "seed": 1},
 "tables": [
  {
   "name": "items",
   "vocabulary_size": $rows,
   "embedding_dim": $dim,
   "combiner": "sum",
   "optimizer": {"type": "sgd", "learning_rate": 0.01},
   "initializer": {"type": "normal", "stddev": $(awk -v d="$dim" 'BEGIN { printf "%.6f", 1 / sqrt(d) }'), "seed": 7}
  }
 ],
 "features": [{"name": "item", "table": "items", "valency": 1}]
}
EOF

# Room for the rows and the servers' scratch, whatever the split.
sc_memory=$(((rows * dim * 4 / 1073741824 + 2)))G
cleanup() { if declare -F scps_cluster_stop >/dev/null; then scps_cluster_stop; fi; }
trap cleanup EXIT
faiss_args=(--threads "$threads" --k "$ks" --recall "$recall" --rounds "$rounds")
# FAISS on the table and queries the first cluster dumped (raw float32).
faiss() {
  /usr/bin/python3 "$repo/tests/bench/knn_faiss.py" --table "$out/table.f32" --queries "$out/queries.f32" \
    --rows "$rows" --dim "$dim" "${faiss_args[@]}" "$@"
}
run=0
for topo in 1x2 2x1; do
  procs=${topo%x*} sc=${topo#*x}
  log "scps: $procs server process(es) x $sc SparseCore(s), $rows x $dim, k $ks, $rounds rounds"
  # Sourced anew per cluster: its scratch directory goes with each stop.
  . "$repo/deploy/cluster.sh"
  trap cleanup EXIT
  SCPS_CLUSTER_FLAGS=("${SCPS_BENCH_SERVER_FLAGS[@]}")
  scps_cluster_start "$build/server/scps-server" "$wl" "$procs" "$sc" "$sc_memory"
  dump=()
  [ "$run" != 0 ] || dump=(--dump-table "$out/table.f32" --dump-queries "$out/queries.f32")
  "$build/tests/bench/scps-bench-knn" --servers "$SCPS_CLUSTER_SERVERS" --table items --queries "$queries" \
    --k "$ks" --recall "$recall" --rounds "$rounds" ${dump[@]+"${dump[@]}"} >"$out/scps-$topo.json"
  scps_cluster_stop
  # FAISS flat and the roofline right after each cluster, so that what
  # else the machine runs weighs on both sides alike. libgomp's idle
  # workers spin (OMP_WAIT_POLICY active), taking cores from OpenBLAS's
  # threads in the flat search's sgemm, or sleep (passive) and are slow to
  # wake: the flat index is measured each way once; the report takes
  # FAISS's best flat figure and the best peaks. The roofline runs in a
  # process whose OpenMP workers never spin.
  policy=$([ "$run" = 0 ] && echo passive || echo active)
  log "FAISS flat (OMP_WAIT_POLICY $policy) and the roofline, $threads threads"
  OMP_WAIT_POLICY=$policy faiss --skip ivf,hnsw,roofline >"$out/faiss-flat-$policy.json"
  OMP_WAIT_POLICY=passive faiss --skip flat,ivf,hnsw >"$out/faiss-roofline-$run.json"
  run=$((run + 1))
done

skip=$([ "$quick" = 1 ] && echo hnsw, || echo "")flat,roofline
log "FAISS IVF$([ "$quick" = 1 ] || echo " and HNSW") tuned to recall $recall (OMP_WAIT_POLICY passive), $threads threads"
OMP_WAIT_POLICY=passive faiss --skip "$skip" >"$out/faiss-index.json"

log "done; the table:"
[ "$quick" = 1 ] || scps_bench_cpu_busy >"$out/busy-end.txt"
echo
/usr/bin/python3 "$repo/tests/bench/knn_report.py" "$out" --json "$out/knn-results.json" \
  --seconds "$(($(date +%s) - started))" $([ "$quick" = 1 ] && echo "--quick")
