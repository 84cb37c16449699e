#!/usr/bin/env bash
# Acceptance of the example trainer: against a real 2-process cluster,
# --sequential and --pipelined training, and pipelined training with
# bfloat16 and with eXmY (e4m3 activations, e3m0 gradients with row scales)
# on the wire, reach a held-out log-loss within 2% of the planted model's
# (or an AUC within 0.01 of it). The eXmY run also dumps its gradients
# (--gradient-dump): every 100th step's, one block per feature.
#   trainer_converges.sh SCPS_SERVER SCPS_TRAINER WORKLOAD [STEPS]
set -euo pipefail
server=$1 trainer=$2 workload=$3 steps=${4:-2000}
. "$(dirname "$0")/../../deploy/cluster.sh"
scps_cluster_start "$server" "$workload" 2 2 64M
servers=$SCPS_CLUSTER_SERVERS
tmp=$SCPS_CLUSTER_DIR

status=0
for run in sequential:float32 pipelined:float32 pipelined:bfloat16 pipelined:e4m3/e3m0s; do
  mode=${run%:*} wire=${run#*:} name=${run//\//_}
  dump=()
  [ "$wire" = float32 ] || [ "$wire" = bfloat16 ] || dump=(--gradient-dump "$tmp/grads.bin")
  "$trainer" --servers "$servers" --workload "$workload" --steps "$steps" "--$mode" --wire-format "$wire" \
    --json "$tmp/$name.json" "${dump[@]}" 2>/dev/null
  /usr/bin/python3 - "$tmp/$name.json" <<'PY' || status=1
import json, sys
r = json.load(open(sys.argv[1]))
gap = (r["heldout_logloss"] - r["planted_logloss"]) / r["planted_logloss"]
auc_gap = r["planted_auc"] - r["heldout_auc"]
ok = gap <= 0.02 or auc_gap <= 0.01
print(f"{r['mode']} {r['wire_format']}: log-loss {r['heldout_logloss']:.4f} vs planted {r['planted_logloss']:.4f} ({100 * gap:+.2f}%), "
      f"AUC {r['heldout_auc']:.4f} vs {r['planted_auc']:.4f}, {r['samples_per_s']:.0f} samples/s: "
      + ("ok" if ok else "FAILED (needs log-loss within 2% or AUC within 0.01)"))
sys.exit(0 if ok else 1)
PY
done
# The dump: steps 0, 100, ... each a block per feature of int32 width,
# int32 batch and batch x width gradients, finite and not all zero.
/usr/bin/python3 - "$tmp/grads.bin" "$steps" "$workload" <<'PY' || status=1
import json, struct, sys
import numpy as np
path, steps, wl = sys.argv[1], int(sys.argv[2]), json.load(open(sys.argv[3]))
dims = [next(t["embedding_dim"] for t in wl["tables"] if t["name"] == f["table"]) for f in wl["features"]]
data, at, blocks = open(path, "rb").read(), 0, []
while at < len(data):
    width, batch = struct.unpack_from("<ii", data, at)
    g = np.frombuffer(data, "<f4", width * batch, at + 8)
    blocks.append((width, batch, bool(np.isfinite(g).all()), bool(g.any())))
    at += 8 + 4 * width * batch
want = [(d, wl["batch_size"], True, True) for d in dims] * ((steps + 99) // 100)
ok = blocks == want
print(f"--gradient-dump: {len(blocks)} blocks" + ("" if ok else f", expected {len(want)}: {blocks[:4]} ..."))
sys.exit(0 if ok else 1)
PY

# Flags are checked whole before anything runs (exit 2, naming the flag),
# a diverging run ends (exit 1, naming the NaN gradient or the divergence)
# instead of hanging, and a --json that cannot be written fails too.
for bad in "--steps 10x" "--steps 1e3" "--dense-lr inf" "--eval-batches 4294967297" "--deadline-ms 5ms" \
           "--checkpoint-dir /absolute/dir" "--checkpoint-dir a/../b" "--connect-timeout-ms 0" "stray-argument" "--servers localhost"; do
  flag=${bad%% *}
  rc=0
  err=$("$trainer" --servers "$servers" --workload "$workload" $bad 2>&1 >/dev/null) || rc=$?
  if [ "$rc" != 2 ] || [[ "$err" != *"$flag"* ]]; then
    echo "trainer $bad: exit $rc, expected 2 naming $flag: $err"
    status=1
  fi
done
rc=0
err=$(timeout 300 "$trainer" --servers "$servers" --workload "$workload" --steps 200 --dense-lr 1e30 2>&1 >/dev/null) || rc=$?
if [ "$rc" != 1 ] || { [[ "$err" != *"diverged"* ]] && [[ "$err" != *" is nan"* ]]; }; then
  echo "trainer --dense-lr 1e30: exit $rc, expected 1 naming the NaN or the divergence: $err"
  status=1
fi
rc=0
err=$("$trainer" --servers "$servers" --workload "$workload" --steps 20 --json /nonexistent/x.json 2>&1 >/dev/null) || rc=$?
if [ "$rc" != 1 ] || [[ "$err" != *"--json"* ]]; then
  echo "trainer --json /nonexistent/x.json: exit $rc, expected 1 naming --json: $err"
  status=1
fi
# Checkpoints without a directory, from servers without --checkpoint-dir:
# refused before the first step, not at the first save.
rc=0
err=$("$trainer" --servers "$servers" --workload "$workload" --steps 30 --checkpoint-every-steps 10 2>&1 >/dev/null) ||
  rc=$?
if [ "$rc" != 1 ] || [[ "$err" != *"server 0 has no --checkpoint-dir"* ]] || [[ "$err" == *"step 1/"* ]]; then
  echo "checkpoints with nowhere to go: exit $rc, $err"
  status=1
fi
# Checkpoints every 10 steps land on the global grid (steps 9, 19, ...),
# wherever the resumed run starts: 30 steps, 3 checkpoints, below the
# servers' --checkpoint-dir (a new cluster that has one, and saves as often
# as asked).
scps_cluster_stop
SCPS_CLUSTER_DIR=$(mktemp -d)
tmp=$SCPS_CLUSTER_DIR
SCPS_CLUSTER_FLAGS=(--checkpoint-dir "$tmp/root" --checkpoint-min-interval 0)
scps_cluster_start "$server" "$workload" 2 2 64M
servers=$SCPS_CLUSTER_SERVERS
ck="$tmp/root/run"
"$trainer" --servers "$servers" --workload "$workload" --steps 30 --checkpoint-every-steps 10 \
  --checkpoint-dir run >/dev/null 2>"$tmp/ck.err" || { echo "trainer --checkpoint-every-steps 10 failed"; status=1; }
# Each save is reported as it happens.
if [ "$(grep -c "checkpoint of step [0-9]* saved: .* $ck/step-" "$tmp/ck.err")" != 3 ]; then
  echo "the trainer did not report its 3 checkpoints:"; cat "$tmp/ck.err"; status=1
fi
saved=$(ls "$ck" 2>/dev/null | sed -n 's/^step-0*\([0-9]\)/\1/p' | sort -n)
off=$(for s in $saved; do [ $(((s + 1) % 10)) = 0 ] || echo "$s"; done)
if [ "$(echo "$saved" | wc -w)" != 3 ] || [ -n "$off" ]; then
  echo "checkpoints every 10 steps: saved steps '$(echo $saved)', expected 3 on the grid (step + 1 a multiple of 10)"
  status=1
fi
exit $status
