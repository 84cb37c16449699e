#!/usr/bin/env bash
# What bfloat16 on the wire does to a model's loss, measured beside the speed:
#   tests/bench/wire_loss.sh [--workload FILE] [--steps N] [--json FILE]
# Builds (Release, -march=native) in build-bench/ and trains scps-trainer's
# click model (default workload deploy/workloads/ctr-demo.json, 2000 steps,
# pipelined) twice against a fresh 2-process x 2-SparseCore cluster: once
# with float32 activations and gradients on the wire, once with bfloat16,
# on the same data and initial tables. Each activation then crosses the wire
# rounded once per process. Prints both held-out log-losses and AUCs and
# the verdict: no harm when bfloat16's held-out log-loss is at most 0.5%
# above float32's and its AUC at most 0.005 below. The benchmarks count
# their bfloat16 rows against the targets only with that verdict. Writes
# {float32: trainer JSON, bfloat16: ..., no_harm, criterion, verdict}
# (default build-bench/bench-wire-loss.json).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
shared=${SCPS_SHARED_DIR:-$(dirname "$repo")/shared}
workload=$repo/deploy/workloads/ctr-demo.json
steps=2000
json=$repo/build-bench/bench-wire-loss.json
while [ $# -gt 0 ]; do
  case "$1" in
    --workload) workload=${2:?--workload needs a file}; shift 2 ;;
    --steps) steps=${2:?--steps needs a number}; shift 2 ;;
    --json) json=${2:?--json needs a file}; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "wire_loss.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
done
[ -f "$workload" ] || { echo "wire_loss.sh: workload '$workload' not found" >&2; exit 2; }
case "$steps" in ''|*[!0-9]*|0) echo "wire_loss.sh: --steps '$steps' is not a positive integer" >&2; exit 2 ;; esac

. "$repo/tests/bench/lib.sh"
scps_bench_build scps-server scps-trainer

runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
for fmt in float32 bfloat16; do
  # A cluster per run: the trainer resumes from the servers' tables, and the
  # comparison needs both runs to start from the same ones.
  (
    . "$repo/deploy/cluster.sh"
    scps_cluster_start "$build/server/scps-server" "$workload" 2 2 256M
    "$build/client/scps-trainer" --servers "$SCPS_CLUSTER_SERVERS" --workload "$workload" --steps "$steps" \
      --pipelined --wire-format "$fmt" --json "$runs/$fmt.json" >&2
  )
done

/usr/bin/python3 - "$runs" "$json" "$(basename "$workload" .json)" <<'PY'
import json, sys
runs, out, workload = sys.argv[1:4]
r = {f: json.load(open(f"{runs}/{f}.json")) for f in ("float32", "bfloat16")}
a, b = r["float32"], r["bfloat16"]
dloss = (b["heldout_logloss"] - a["heldout_logloss"]) / a["heldout_logloss"]
dauc = b["heldout_auc"] - a["heldout_auc"]
no_harm = dloss <= 0.005 and dauc >= -0.005
for f in ("float32", "bfloat16"):
    x = r[f]
    print(f"{f:9s} held-out log-loss {x['heldout_logloss']:.4f} (planted model {x['planted_logloss']:.4f}), "
          f"AUC {x['heldout_auc']:.4f}, {x['steps']} steps, {x['samples_per_s']:.0f} samples/s")
verdict = (f"bfloat16 log-loss {100 * dloss:+.2f}%, AUC {dauc:+.4f} against float32: "
           + ("no harm" if no_harm else "HARM: bfloat16 rows stay information"))
print(verdict)
json.dump({"workload": workload, "float32": a, "bfloat16": b, "logloss_change": dloss,
           "auc_change": dauc, "no_harm": no_harm,
           "criterion": "bfloat16 held-out log-loss <= float32's + 0.5% and AUC >= float32's - 0.005",
           "verdict": verdict}, open(out, "w"), indent=1)
PY
