#!/usr/bin/env bash
# CPU time per networked batch against its floor, in one run (issue 30):
#   tests/bench/cpu.sh [--workload FILE] [--sc S] [--batches K] [--wire-format F]
#                      [--mode lookup|train] [--rounds R] [--build DIR] [--json OUT]
#                      [--shared-memory both|all|auto|view|off]
# R rounds (default 3), each: one scps-server process x S SparseCores
# (default 2) on loopback, K batches (default 100) one at a time through
# scps-bench-client --server-pid, with answers through shared memory and
# over loopback TCP (--shared-memory both, the default: one after the
# other on the same server, the order alternating by round; all: also
# view, scps_client_lookup_view through shared memory; auto, view or off:
# one of them), the server stopped, then the engine's
# gather of the same batches in-process (scps-bench-engine --topology 1xS
# --threads S --distinct 4: the client replays the first 4 batches of seed
# 1). Prints, for the round whose ratio is the median, the CPU time per
# batch of the client and the server process (all threads, each thread name
# apart), the floor (the gather's CPU time summed over its threads plus one
# memcpy of the answer's bytes on each side) and their ratio; then every
# round's. CPU time, not wall time: the two sides share the host's cores.
# The floor's gather is float32's whatever the wire format (the engine
# bench has no bfloat16 gather), so bfloat16 ratios are information only.
# Default workload shared/workloads/dlrm8.json, wire format float32, build
# build-bench/ (Release, -march=native), built here.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
shared=${SCPS_SHARED_DIR:-$(dirname "$repo")/shared}
. "$repo/tests/bench/lib.sh"
workload=$shared/workloads/dlrm8.json
sc=2 batches=100 rounds=3 wire=float32 mode=lookup own_build="" json="" shm=both
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=${2:?--rounds needs a number}; shift 2 ;;
    --json) json=${2:?--json needs a file}; shift 2 ;;
    --shared-memory) shm=${2:?--shared-memory needs both, auto or off}; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) scps_bench_option "$@" || { echo "cpu.sh: unknown option '$1' (try --help)" >&2; exit 2; }; shift 2 ;;
  esac
done
case "$sc" in ''|*[!0-9]*|0) echo "cpu.sh: --sc '$sc' is not a positive integer" >&2; exit 2 ;; esac
case "$batches" in ''|*[!0-9]*|0) echo "cpu.sh: --batches '$batches' is not a positive integer" >&2; exit 2 ;; esac
case "$rounds" in ''|*[!0-9]*|0) echo "cpu.sh: --rounds '$rounds' is not a positive integer" >&2; exit 2 ;; esac
case "$mode" in lookup|train) ;; *) echo "cpu.sh: --mode '$mode' is not lookup or train" >&2; exit 2 ;; esac
case "$shm" in both) shms=(auto off) ;; all) shms=(view auto off) ;; auto|view|off) shms=("$shm") ;;
  *) echo "cpu.sh: --shared-memory '$shm' is not both, all, auto, view or off" >&2; exit 2 ;; esac
[ -f "$workload" ] || { echo "cpu.sh: workload '$workload' not found" >&2; exit 2; }

if [ -n "$own_build" ]; then
  build=$own_build
else
  scps_bench_build scps-server scps-bench-client scps-bench-engine
fi
out=$(mktemp -d)
. "$repo/deploy/cluster.sh"
SCPS_CLUSTER_FLAGS=("${SCPS_BENCH_SERVER_FLAGS[@]}")
echo "cpu.sh: $(basename "$workload"), 1 server process x $sc SparseCores, $wire, $mode, $rounds rounds of $batches batches" >&2
for ((r = 0; r < rounds; r++)); do
  [ "$r" = 0 ] || SCPS_CLUSTER_DIR=$(mktemp -d) # scps_cluster_stop removed the last one
  scps_cluster_start "$build/server/scps-server" "$workload" 1 "$sc" 8G
  order=("${shms[@]}")
  [ $((r % 2)) = 0 ] || order=($(printf '%s\n' "${shms[@]}" | tac))
  for m in "${order[@]}"; do
    "$build/tests/bench/scps-bench-client" --servers "$SCPS_CLUSTER_SERVERS" --workload "$workload" --mode "$mode" \
      --batches "$batches" --wire-format "$wire" --shared-memory "${m/view/auto}" \
      $([ "$m" = view ] && echo --view) --server-pid "${scps_cluster_pids[0]}" >"$out/client-$m$r.json"
  done
  # One workload's tables in memory at a time: the server goes before the engine.
  scps_cluster_stop
  "$build/tests/bench/scps-bench-engine" --workload "$workload" --topology "1x$sc" --threads "$sc" \
    --batches "$batches" --distinct 4 >"$out/engine$r.json"
done

/usr/bin/python3 - "$out" "$mode" "$json" "$rounds" "${shms[@]}" <<'PY'
import json, sys
out, mode, dest, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
shms, every, summary = sys.argv[5:], {}, []
for shm in shms:
  how = {"auto": "through shared memory", "view": "through shared memory, scps_client_lookup_view",
         "off": "over loopback TCP"}[shm]
  print(f"== answers {how} (--shared-memory {shm})")
  res = []
  for r in range(rounds):
    c = json.load(open(f"{out}/client-{shm}{r}.json"))
    eng = {e["phase"]: e for e in map(json.loads, open(f"{out}/engine{r}.json"))}
    floor = eng["lookup"]["cpu_ms_median"] + 2 * c["cpu"]["memcpy_answer_ms"]
    total = c["cpu"]["client_ms"] + c["cpu"]["servers_ms"]
    res.append({"client": c, "engine": eng, "floor_ms": floor, "total_ms": total, "ratio": total / floor})
  mid = sorted(res, key=lambda x: x["ratio"])[rounds // 2]
  c, eng, cpu = mid["client"], mid["engine"], mid["client"]["cpu"]
  gather = eng["lookup"]["cpu_ms_median"]
  copy = cpu["memcpy_answer_ms"]
  floor, total = mid["floor_ms"], mid["total_ms"]

  def threads(name, p):
      print(f"{name + ' process':36s} {p['process_ms']:9.3f}")
      for k, v in p.items():
          if isinstance(v, dict):
              print(f"  {k + ' (' + str(v['threads']) + ')':34s} {v['cpu_ms']:9.3f} {v['user_ms']:9.3f} {v['sys_ms']:9.3f}")
      print(f"  {'exited threads':34s} {p['exited_ms']:9.3f}")

  print(f"the median round of {rounds}: CPU ms per batch (means over {cpu['batches']} batches; user/sys from clock ticks, coarse)")
  print(f"{'':36s} {'cpu':>9s} {'user':>9s} {'sys':>9s}")
  threads("client", cpu["client"])
  for i, s in enumerate(cpu["servers"]):
      threads(f"server {i}", s)
  print(f"client medians per batch: prepare {cpu['client_prepare_ms_median']:.3f}, lookup "
        f"{cpu['client_lookup_ms_median']:.3f}" + (f", push {cpu['client_push_ms_median']:.3f}" if mode == "train" else "")
        + f"; server {cpu['servers_ms_median']:.3f}")
  print(f"{'client + server':36s} {total:9.3f}")
  print(f"{'floor: engine gather (' + str(eng['lookup']['threads']) + ' threads)':36s} {gather:9.3f}")
  print(f"{'floor: memcpy of the answer x 2':36s} {2 * copy:9.3f}   ({(c['received_bytes_per_batch'] + c.get('placed_bytes_per_batch', 0)) / 1e6:.2f} MB)")
  print(f"{'floor':36s} {floor:9.3f}")
  print(f"{'ratio (issue 30 target: <= 1.5)':36s} {total / floor:9.3f}")
  if mode == "train":
      upd = eng["update"]["cpu_ms_median"]
      print(f"{'train: floor + the engine update':36s} {floor + upd:9.3f}   (the gradients' copies left out)")
      print(f"{'train: ratio to that':36s} {total / (floor + upd):9.3f}")
  print(f"wall medians: step {c['ms_per_batch_median']:.3f} ms (prepare {c['prepare_ms_median']:.3f}, lookup "
        f"{c['lookup_ms_median']:.3f}" + (f", push {c['push_ms_median']:.3f}" if mode == "train" else "")
        + f"); engine gather {eng['lookup']['ms_median']:.3f} ms")
  print("every round: client + server / floor = ratio: " + "; ".join(
      f"{x['client']['cpu']['client_ms']:.2f} + {x['client']['cpu']['servers_ms']:.2f} / {x['floor_ms']:.2f} = {x['ratio']:.3f}" for x in res))
  every[shm] = res
  summary.append(f"{shm}: {total / floor:.3f}")
if len(shms) > 1:
    print("ratio of the median round (view: shared memory, no copy to the caller; auto: shared memory; "
          "off: loopback TCP): " + ", ".join(summary))
if dest:
    json.dump(every, open(dest, "w"), indent=1)
PY
rm -rf "$out"
