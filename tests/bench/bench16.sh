#!/usr/bin/env bash
# Issue 30's figures on the 16-core host, from the bundle of shared/bench16/bundle.sh:
#   bash tests/bench/bench16.sh        (on that host, from the checkout's root)
# Runs .bench16/run.sh (floors, anchors, scps 1x8 and 2x4 at depth 1, 2, 4),
# then what it does not measure, with the servers on the first half of the
# cores and the clients on the second:
# - CPU time per batch (scps-bench-client --server-pid), one batch at a time,
#   dlrm8 and criteo26 at 1 process x 8 SparseCores, float32, lookup and
#   train, answers through shared memory (auto), through shared memory left in
#   place (--view, lookup only) and over loopback TCP (off), and with an
#   8-bit wire (e4m3:auto, e4m3:off; issue 31), in ROUNDS rounds
#   (default 3) whose order alternates; then the engine's in-process gather
#   and update of the same batches (the floor);
# - serving-small-batch, 16 scps-loadgen clients, at 1x8 and 2x4: the
#   closed-loop peak, 70% of it open loop twice, the peak again; at 1x8 also
#   over TCP (--shared-memory off), its own peak and 70% of that;
# - retrieval (issue 32), when the bundle has scps-bench-knn
#   (shared/bench16/bundle.sh scps-bench-knn): TopK over KNN_ROWS (default
#   4194304) x 64 rows at 1x8 and 2x4, k 10 and 100, exact and approximate
#   at recall 0.95, 256 queries; then, on the clients' half, numpy's sgemm
#   and table read (the roofline) and FAISS flat where that python3 has
#   faiss (PYTHON picks the python3).
# Each figure is one JSON line in $OUT/extra.jsonl (OUT defaults to /tmp/out),
# prefixed by what it measured; tests/bench/bench16_report.py turns
# results.jsonl and extra.jsonl into the tables of BENCHMARKS.md.
set -u
case "${1:-}" in -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
repo=$(cd "$(dirname "$0")/../.." && pwd)
D=$repo/.bench16; B=$D/bin
[ -x "$B/scps-server" ] || { echo "bench16.sh: no bundle in $D; run shared/bench16/bundle.sh first" >&2; exit 2; }
export OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -n "${SKIP_RUN:-}" ] || bash "$D/run.sh"   # SKIP_RUN=1: the extras alone
export LD_LIBRARY_PATH=$D/lib
X=$OUT/extra.jsonl; : >"$X"; ROUNDS=${ROUNDS:-3}
N=${NCPU:-$(nproc)}; H=$((N/2)); SRV=${SRV:-"0-$((H-1))"}; CLI=${CLI:-"$H-$((N-1))"}
t0=$(date +%s); el() { echo "[extra $(( $(date +%s) - t0 ))s] $*"; }
pids=() servers=""
start() { # WORKLOAD P S
  local wl=$1 P=$2 S=$3 p; dir=$(mktemp -d); servers="" pids=()
  for ((p = 0; p < P; p++)); do
    taskset -c "$SRV" "$B/scps-server" --config "$wl" --listen 127.0.0.1:0 --port-file "$dir/port$p" \
      --process-index $p --num-processes "$P" --sc-per-process "$S" --sc-memory 8G 2>"$dir/s$p.log" &
    pids+=($!)
  done
  for ((p = 0; p < P; p++)); do
    for _ in $(seq 900); do [ -s "$dir/port$p" ] && break; sleep 0.1; done
    servers+="${servers:+,}127.0.0.1:$(cat "$dir/port$p")"
  done
}
stop() { kill -TERM "${pids[@]}"; wait "${pids[@]}"; rm -rf "$dir"; }
for w in dlrm8 criteo26; do
  wl=$D/wl/$w.json
  el "$w CPU per batch, 1x$H, $ROUNDS rounds"
  start "$wl" 1 "$H"
  ways=(auto view off e4m3:auto e4m3:off)
  for ((r = 0; r < ROUNDS; r++)); do
    for m in lookup train; do
      order=("${ways[@]}"); [ $((r % 2)) = 0 ] || order=(e4m3:off e4m3:auto off view auto)
      for way in "${order[@]}"; do
        [ "$m/$way" = train/view ] && continue
        fmt=float32 how=$way
        [ "${way%%:*}" = e4m3 ] && fmt=e4m3 how=${way#e4m3:}
        echo -n "{\"cpu\":1,\"w\":\"$w\",\"mode\":\"$m\",\"way\":\"$way\",\"round\":$r} " >>"$X"
        taskset -c "$CLI" timeout 90 "$B/scps-bench-client" --servers "$servers" --workload "$wl" --mode $m \
          --batches 40 --prep-threads "$H" --wire-format "$fmt" --shared-memory "${how/view/auto}" \
          $([ $how = view ] && echo --view) \
          --server-pid "${pids[0]}" 2>/dev/null | tail -1 | tee -a "$X" | cut -c1-300
      done
    done
  done
  stop
  echo -n "{\"engine\":1,\"w\":\"$w\"} " >>"$X"
  # The engine's lines, one per phase, on one line of their own for the report.
  taskset -c "$SRV" "$B/scps-bench-engine" --workload "$wl" --topology "1x$H" --threads "$H" --batches 40 \
    --distinct 4 2>/dev/null | grep '^{' | tr '\n' ' ' >>"$X"; echo >>"$X"
done
wl=$D/wl/serving-small-batch.json
serve() { # PHASE [LOADGEN OPTION...]: one run, its report as one line
  local phase=$1; shift
  taskset -c "$CLI" "$B/scps-loadgen" --workload "$wl" --servers "$servers" --mode lookup --concurrency 16 \
    --duration 5 --warmup 2 --quiet --json "$OUT/lg.json" "$@" >/dev/null 2>&1
  echo "{\"serving\":1,\"P\":$P,\"S\":$S,\"phase\":\"$phase\"} $(tr -d '\n' <"$OUT/lg.json")" | tee -a "$X" | cut -c1-160
  rm -f "$OUT/lg.json"
}
rate70() { grep "\"phase\":\"$1\"" "$X" | tail -1 | sed 's/^[^}]*} //' |
  awk 'match($0, /"requests_per_s": *[0-9.]+/) { split(substr($0, RSTART, RLENGTH), a, ":"); printf "%.1f", 0.7 * a[2] }'; }
for topo in "1 $H" "2 $((H/2))"; do
  set -- $topo; P=$1; S=$2
  el "serving-small-batch ${P}x$S, 16 clients"
  start "$wl" "$P" "$S"
  # Shared memory (libscps's default on the servers' host): the peak, 70%
  # of it twice, the peak again. Then over TCP, which moves each answer
  # through the loadgen's receive: its own peak and 70% of that.
  serve "peak-$P-$S"; r=$(rate70 "peak-$P-$S")
  serve "at70-$P-$S" --rate "$r"; serve "at70b-$P-$S" --rate "$r"; serve "peak2-$P-$S"
  if [ "$P" = 1 ]; then
    serve "tcp-peak-$P-$S" --shared-memory off; r=$(rate70 "tcp-peak-$P-$S")
    serve "tcp-at70-$P-$S" --rate "$r" --shared-memory off
  fi
  stop
done
if [ -x "$B/scps-bench-knn" ]; then
  KR=${KNN_ROWS:-4194304}; kd=$(mktemp -d); kw=$kd/knn.json
  # knn.sh's workload: rows N(0, 1/64), SGD, one univalent feature.
  printf '%s\n' '{"name": "knn-retrieval", "batch_size": 16, "ids": {"distribution": "uniform", "seed": 1},' \
    ' "tables": [{"name": "items", "vocabulary_size": '"$KR"', "embedding_dim": 64, "combiner": "sum",' \
    '   "optimizer": {"type": "sgd", "learning_rate": 0.01},' \
    '   "initializer": {"type": "normal", "stddev": 0.125, "seed": 7}}],' \
    ' "features": [{"name": "item", "table": "items", "valency": 1}]}' >"$kw"
  for topo in "1 $H" "2 $((H/2))"; do
    set -- $topo; P=$1; S=$2
    el "retrieval ${P}x$S, $KR rows x 64"
    start "$kw" "$P" "$S"
    dump=(); [ "$P" = 1 ] && dump=(--dump-table "$kd/table.f32" --dump-queries "$kd/queries.f32")
    taskset -c "$CLI" timeout 600 "$B/scps-bench-knn" --servers "$servers" --table items --k 10,100 --recall 0.95 \
      --rounds 10 ${dump[@]+"${dump[@]}"} 2>/dev/null | sed "s/^/{\"knn\":1,\"P\":$P,\"S\":$S} /" | tee -a "$X" | cut -c1-160
    stop
  done
  PY=${PYTHON:-python3}; skip=ivf,hnsw
  "$PY" -c "import faiss" 2>/dev/null || skip=flat,ivf,hnsw
  el "retrieval: the roofline$([ "$skip" = ivf,hnsw ] && echo " and FAISS flat"), $H threads"
  taskset -c "$CLI" env OMP_WAIT_POLICY=passive "$PY" "$repo/tests/bench/knn_faiss.py" --table "$kd/table.f32" \
    --queries "$kd/queries.f32" --rows "$KR" --dim 64 --threads "$H" --k 10,100 --rounds 10 --skip "$skip" \
    2>/dev/null | sed 's/^/{"knn":2} /' | tee -a "$X" | cut -c1-160
  rm -rf "$kd"
fi
el done
