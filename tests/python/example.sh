#!/usr/bin/env bash
# client/python/examples/train_ctr.py as CI runs it: pipelined and
# sequential on fresh 2-process clusters of deploy/workloads/ctr-demo.json,
# and scps-trainer (pipelined) on another. The 2000-step runs' held-out
# log-loss must be within 2% of the planted model's on their own held-out
# data, and the pipelined one within 1% of scps-trainer's. The sequential
# run, the slowest, trains a shorter 800 steps, held to 4%. Both draw the same planted
# model but their own id streams, so many held-out batches keep the two
# estimates' sampling error well below that 1%.
#   example.sh SCPS_SERVER SCPS_TRAINER PYTHONPATH
set -euo pipefail
server=$1 trainer=$2
export PYTHONPATH=$3
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
workload=$repo/deploy/workloads/ctr-demo.json
. "$repo/deploy/cluster.sh"
out=$(mktemp -d)
trap 'scps_cluster_stop; rm -rf "$out"' EXIT
run() {  # run NAME STEPS PROGRAM ARGS...: on a fresh cluster
  local name=$1 steps=$2
  shift 2
  scps_cluster_start "$server" "$workload" 2 2 64M
  "$@" --servers "$SCPS_CLUSTER_SERVERS" --workload "$workload" --steps "$steps" --eval-batches 300 \
    --json "$out/$name.json"
  scps_cluster_stop
  SCPS_CLUSTER_DIR=$(mktemp -d)
}
run py-pipelined 2000 /usr/bin/python3 "$repo/client/python/examples/train_ctr.py" --pipelined
run py-sequential 800 /usr/bin/python3 "$repo/client/python/examples/train_ctr.py" --sequential
run trainer 2000 "$trainer" --pipelined
/usr/bin/python3 - "$out" <<'PY'
import json, os, sys
r = {n: json.load(open(os.path.join(sys.argv[1], n + ".json"))) for n in ("py-pipelined", "py-sequential", "trainer")}
bad = []
for n, x in r.items():
    excess = x["heldout_logloss"] / x["planted_logloss"] - 1
    print("%-14s loss %.4f planted %.4f (%+.2f%%) auc %.4f %8.0f samples/s"
          % (n, x["heldout_logloss"], x["planted_logloss"], 100 * excess, x["heldout_auc"], x["samples_per_s"]))
    limit = 0.02 if x["steps"] == 2000 else 0.04
    if not excess < limit:
        bad.append("%s: held-out log-loss %.2f%% above the planted model's, over %g%%" % (n, 100 * excess, 100 * limit))
d = r["py-pipelined"]["heldout_logloss"] / r["trainer"]["heldout_logloss"] - 1
print("train_ctr.py pipelined vs scps-trainer: %+.2f%%" % (100 * d))
if not abs(d) < 0.01:
    bad.append("train_ctr.py's held-out log-loss %+.2f%% off scps-trainer's, over 1%%" % (100 * d))
print("\n".join("FAILED: " + b for b in bad) or "example: ok")
sys.exit(1 if bad else 0)
PY
