#!/usr/bin/env bash
# What lower-precision numbers do to a model's loss, measured beside the speed:
#   tests/bench/wire_loss.sh [--workload FILE] [--steps N] [--cases "C ..."] [--json FILE]
# Builds (Release, -march=native) in build-bench/ and trains scps-trainer's
# click model (default workload deploy/workloads/ctr-demo.json, 2000 steps,
# pipelined) once per case, each against a fresh 2-process x 2-SparseCore
# cluster, on the same data and initial tables: float32 first, then every
# case. A case is a wire format (scps-trainer --wire-format: bfloat16, e4m3,
# float32/e3m0 for e3m0 gradients alone, e2m1s ...), or storage:FORMAT[:nearest]
# for every table held in SparseCore memory in FORMAT (its "storage_format";
# rounded stochastically, or to nearest with :nearest). Default cases:
# bfloat16 e4m3 e5m2 float32/e3m0 float32/e3m0s e2m1s storage:e4m3 storage:e3m2
# storage:e3m2:nearest (storage cases only where the server takes them).
# Prints each case's held-out log-loss and AUC against float32's and its
# verdict: no harm when its log-loss is at most 0.5% (wire) or 1% (storage)
# above float32's and its AUC at most 0.005 below; a case that harms is
# reported as such. The benchmarks count their bfloat16 and e4m3 rows
# against the targets only with that verdict. Writes {float32, bfloat16:
# trainer JSON, no_harm (bfloat16's), cases: [...], verdict} (default
# build-bench/bench-wire-loss.json).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
shared=${SCPS_SHARED_DIR:-$(dirname "$repo")/shared}
workload=$repo/deploy/workloads/ctr-demo.json
steps=2000
json=$repo/build-bench/bench-wire-loss.json
cases="bfloat16 e4m3 e5m2 float32/e3m0 float32/e3m0s e2m1s storage:e4m3 storage:e3m2 storage:e3m2:nearest"
while [ $# -gt 0 ]; do
  case "$1" in
    --workload) workload=${2:?--workload needs a file}; shift 2 ;;
    --steps) steps=${2:?--steps needs a number}; shift 2 ;;
    --cases) cases=${2:?--cases needs a list}; shift 2 ;;
    --json) json=${2:?--json needs a file}; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "wire_loss.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
done
[ -f "$workload" ] || { echo "wire_loss.sh: workload '$workload' not found" >&2; exit 2; }
case "$steps" in ''|*[!0-9]*|0) echo "wire_loss.sh: --steps '$steps' is not a positive integer" >&2; exit 2 ;; esac

. "$repo/tests/bench/lib.sh"
scps_bench_build scps-server scps-trainer

runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
n=0
for c in float32 $cases; do
  n=$((n + 1))
  wire=$c wl=$workload
  if [ "${c%%:*}" = storage ]; then
    # Every table stored in the case's format: the workload rewritten.
    wire=float32 wl=$runs/workload-$n.json
    /usr/bin/python3 - "$workload" "$wl" "$c" <<'PY'
import json, sys
src, dst, case = sys.argv[1:4]
parts = case.split(":")
w = json.load(open(src))
for t in w["tables"]:
    t["storage_format"] = parts[1]
    if len(parts) > 2:
        t["storage_rounding"] = parts[2]
json.dump(w, open(dst, "w"), indent=1)
PY
  fi
  # A cluster per run: the trainer resumes from the servers' tables, and the
  # comparison needs every run to start from the same ones.
  if ! (
    . "$repo/deploy/cluster.sh"
    scps_cluster_start "$build/server/scps-server" "$wl" 2 2 256M
    "$build/client/scps-trainer" --servers "$SCPS_CLUSTER_SERVERS" --workload "$wl" --steps "$steps" \
      --pipelined --wire-format "$wire" --json "$runs/$n.json" >&2
  ); then
    echo "wire_loss.sh: case $c did not run (a server that does not take it?); left out" >&2
    rm -f "$runs/$n.json"
  fi
  echo "$c" >"$runs/$n.case"
done

/usr/bin/python3 - "$runs" "$json" "$(basename "$workload" .json)" "$n" <<'PY'
import json, os, sys
runs, out, workload, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
got = {}
for i in range(1, n + 1):
    case = open(f"{runs}/{i}.case").read().strip()
    if os.path.exists(f"{runs}/{i}.json"):
        got[case] = json.load(open(f"{runs}/{i}.json"))
base = got["float32"]
cases = []
print(f"{'case':22s} {'log-loss':>9s} {'change':>8s} {'AUC':>7s} {'change':>8s}  verdict")
for case, x in got.items():
    storage = case.startswith("storage:")
    limit = 0.01 if storage else 0.005
    dloss = (x["heldout_logloss"] - base["heldout_logloss"]) / base["heldout_logloss"]
    dauc = x["heldout_auc"] - base["heldout_auc"]
    no_harm = dloss <= limit and dauc >= -0.005
    entry = {"case": case, "kind": "storage" if storage else "wire", "heldout_logloss": x["heldout_logloss"],
             "heldout_auc": x["heldout_auc"], "logloss_change": dloss, "auc_change": dauc,
             "loss_limit": limit, "no_harm": no_harm, "samples_per_s": x["samples_per_s"], "steps": x["steps"]}
    cases.append(entry)
    verdict = "" if case == "float32" else ("no harm" if no_harm else "HARM")
    print(f"{case:22s} {x['heldout_logloss']:9.4f} {100 * dloss:+7.2f}% {x['heldout_auc']:7.4f} {dauc:+8.4f}  {verdict}")
print(f"(planted model's log-loss {base['planted_logloss']:.4f}; {base['steps']} steps; limits: log-loss +0.5% "
      f"for wire formats, +1% for storage, AUC -0.005)")
res = {"workload": workload, "float32": base, "cases": cases,
       "criterion": "held-out log-loss <= float32's + 0.5% (wire) or + 1% (storage) and AUC >= float32's - 0.005"}
bf = next((c for c in cases if c["case"] == "bfloat16"), None)
if bf:
    res.update(bfloat16=got["bfloat16"], logloss_change=bf["logloss_change"], auc_change=bf["auc_change"],
               no_harm=bf["no_harm"])
e4 = next((c for c in cases if c["case"] == "e4m3"), None)
if e4:
    res["e4m3_no_harm"] = e4["no_harm"]
res["verdict"] = "; ".join(f"{c['case']} {'no harm' if c['no_harm'] else 'HARM'}" for c in cases
                           if c["case"] != "float32")
json.dump(res, open(out, "w"), indent=1)
PY
