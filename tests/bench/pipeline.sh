#!/usr/bin/env bash
# Pipelined against sequential training, in one run on one cluster:
#   tests/bench/pipeline.sh [--steps N] [--workload FILE]
# Builds (Release, -march=native) in build-bench/, starts 2 scps-server
# processes (2 SparseCores each), runs scps-trainer --sequential then
# --pipelined, and prints samples/s, their ratio, each lane's busy time and
# every server stage's busy time and task count (from the Stats RPC).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
shared=${SCPS_SHARED_DIR:-$(dirname "$repo")/shared}
workload=$repo/deploy/workloads/ctr-demo.json
steps=1000
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=${2:?--steps needs a number}; shift 2 ;;
    --workload) workload=${2:?--workload needs a file}; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "pipeline.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
done

. "$repo/tests/bench/lib.sh"
scps_bench_build scps-server scps-trainer

. "$repo/deploy/cluster.sh"
scps_cluster_start "$build/server/scps-server" "$workload" 2 2 1G
servers=$SCPS_CLUSTER_SERVERS
tmp=$SCPS_CLUSTER_DIR

/usr/bin/python3 -m grpc_tools.protoc -I"$repo/proto" --python_out="$tmp" --grpc_python_out="$tmp" "$repo/proto/scps.proto"
stats() {
  /usr/bin/python3 - "$tmp" "$servers" "$1" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
import grpc, scps_pb2, scps_pb2_grpc
out = []
for addr in sys.argv[2].split(","):
    s = scps_pb2_grpc.EmbeddingServiceStub(grpc.insecure_channel(addr)).Stats(scps_pb2.StatsRequest(), timeout=10)
    out.append({g.stage: [g.busy_seconds, g.tasks] for g in s.stages})
json.dump(out, open(sys.argv[3], "w"))
PY
}

stats "$tmp/stages0.json"
for mode in sequential pipelined; do
  "$build/client/scps-trainer" --servers "$servers" --workload "$workload" --steps "$steps" "--$mode" \
    --eval-batches 2 --json "$tmp/$mode.json" 2>/dev/null >/dev/null
  stats "$tmp/stages-$mode.json"
done

/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
r = {m: json.load(open(f"{t}/{m}.json")) for m in ("sequential", "pipelined")}
before = {"sequential": json.load(open(f"{t}/stages0.json")),
          "pipelined": json.load(open(f"{t}/stages-sequential.json"))}
print(f"{'mode':12s} {'samples/s':>10s} {'wall s':>8s} {'SC lane s':>10s} {'TC lane s':>10s}  server stage busy s (tasks)")
for m in ("sequential", "pipelined"):
    x = r[m]
    after = json.load(open(f"{t}/stages-{m}.json"))
    parts = []
    for p, (a, b) in enumerate(zip(after, before[m])):
        parts.append(f"p{p}: " + " ".join(f"{k} {a[k][0] - b[k][0]:.2f} ({a[k][1] - b[k][1]})" for k in sorted(a)))
    print(f"{m:12s} {x['samples_per_s']:10.0f} {x['wall_seconds']:8.2f} {x['sc_busy_seconds']:10.2f} "
          f"{x['tc_busy_seconds']:10.2f}  {'; '.join(parts)}")
ratio = r["pipelined"]["samples_per_s"] / r["sequential"]["samples_per_s"]
print(f"pipelined / sequential throughput: {ratio:.2f} (target >= 1.5)")
PY
