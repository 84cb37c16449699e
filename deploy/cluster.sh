# Sourced by scripts that need a local cluster (demo, benchmarks, tests):
# starts scps-server processes on free loopback ports and stops them on exit.
#
#   . deploy/cluster.sh
#   scps_cluster_start SERVER_BIN CONFIG PROCESSES SC_PER_PROCESS SC_MEMORY
#   ... "$SCPS_CLUSTER_SERVERS" is "127.0.0.1:PORT,..." in process order;
#   ... "$SCPS_CLUSTER_DIR" is a scratch directory removed on exit.
# Flags in the array SCPS_CLUSTER_FLAGS, if set, go to every process
# (e.g. SCPS_CLUSTER_FLAGS=(--checkpoint-dir /data/ckpt)).

SCPS_CLUSTER_DIR=$(mktemp -d)
SCPS_CLUSTER_SERVERS=""
scps_cluster_pids=()

# A server that did not exit 0 (it failed mid-run, or ignored SIGTERM's
# drain) has its log's tail printed before the scratch directory goes.
scps_cluster_stop() {
  local p i=0 rc
  for p in "${scps_cluster_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${scps_cluster_pids[@]}"; do
    rc=0
    wait "$p" 2>/dev/null || rc=$?
    if [ "$rc" != 0 ] && [ -s "$SCPS_CLUSTER_DIR/server$i.log" ]; then
      echo "scps-server process $i exited with status $rc; the end of its log:" >&2
      tail -n 20 "$SCPS_CLUSTER_DIR/server$i.log" >&2
    fi
    i=$((i + 1))
  done
  scps_cluster_pids=()
  rm -rf "$SCPS_CLUSTER_DIR"
}
trap scps_cluster_stop EXIT

scps_cluster_start() {
  local bin=$1 config=$2 procs=$3 sc=$4 mem=$5 p
  for ((p = 0; p < procs; p++)); do
    "$bin" --config "$config" --listen 127.0.0.1:0 --port-file "$SCPS_CLUSTER_DIR/port$p" \
      --process-index "$p" --num-processes "$procs" --sc-per-process "$sc" --sc-memory "$mem" \
      ${SCPS_CLUSTER_FLAGS[@]+"${SCPS_CLUSTER_FLAGS[@]}"} 2>"$SCPS_CLUSTER_DIR/server$p.log" &
    scps_cluster_pids+=($!)
  done
  SCPS_CLUSTER_SERVERS=""
  for ((p = 0; p < procs; p++)); do
    # Up to 60 s (tables are initialized before the port is written), but
    # not a moment longer than the process lives.
    for _ in $(seq 600); do
      [ -s "$SCPS_CLUSTER_DIR/port$p" ] && break
      kill -0 "${scps_cluster_pids[p]}" 2>/dev/null || break
      sleep 0.1
    done
    if [ ! -s "$SCPS_CLUSTER_DIR/port$p" ]; then
      echo "scps-server process $p did not start:" >&2
      cat "$SCPS_CLUSTER_DIR/server$p.log" >&2
      return 1
    fi
    SCPS_CLUSTER_SERVERS+="${SCPS_CLUSTER_SERVERS:+,}127.0.0.1:$(cat "$SCPS_CLUSTER_DIR/port$p")"
  done
}
