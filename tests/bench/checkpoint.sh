#!/usr/bin/env bash
# Checkpoint save and restore throughput of one scps-server process, next to
# a plain sequential write + fsync and read of the same bytes in the same run:
#   tests/bench/checkpoint.sh [--workload FILE] [--lookups K] [--rounds R] [--dir DIR]
#                             [--snapshot-max BYTES]
# Builds (Release, -march=native) in build-bench/, starts one process (2
# SparseCores) with --checkpoint-dir DIR/ck (default build-bench/ckpt-bench),
# pushes one step, times K lookups idle and a first Checkpoint RPC (printed
# apart: it also pays for page cache memory the VM has not touched since
# boot), then R rounds (default 4) of a Checkpoint RPC and a plain write of
# as many bytes (16 MiB write() calls, one fsync), the save first in even
# rounds and second in odd ones (the second of a pair meets the disk still
# flushing the first and the page cache it gave back), then one more Checkpoint
# with lookups back to back (lookup latency during a save, and that save's
# GB/s), K pushes idle and one more Checkpoint with pushes back to back (push
# latency during a save; --snapshot-max 0 makes the server hold them for the
# whole save, as before it copied its state first). Then R rounds of a plain
# read of that file (16 MiB read() calls into one buffer) and a restart of
# the process timing its restore at start, in the same alternating order.
# Figures are medians over the rounds; ratios, and
# build-bench/bench-checkpoint.json. Page cache: the restore and the plain
# read both read files written just before and never evicted, so neither
# touches the disk. Last, scps-bench-checkpoint saves and loads the same
# tables in-process R times, each save and load followed by a plain write
# and read of as many bytes (medians).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
shared=${SCPS_SHARED_DIR:-$(dirname "$repo")/shared}
workload=$shared/workloads/dlrm8.json
lookups=20
rounds=4
. "$repo/tests/bench/lib.sh"
dir=$build/ckpt-bench
snapshot_max=auto
while [ $# -gt 0 ]; do
  case "$1" in
    --workload) workload=${2:?--workload needs a file}; shift 2 ;;
    --lookups) lookups=${2:?--lookups needs a number}; shift 2 ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift 2 ;;
    --dir) dir=${2:?--dir needs a directory}; shift 2 ;;
    --snapshot-max) snapshot_max=${2:?--snapshot-max needs bytes, 0 or auto}; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "checkpoint.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
done
[ -f "$workload" ] || { echo "checkpoint.sh: workload '$workload' not found" >&2; exit 2; }

scps_bench_build scps-server scps-bench-client scps-bench-checkpoint

rm -rf "$dir"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
. "$repo/deploy/cluster.sh"
SCPS_CLUSTER_FLAGS=(--checkpoint-dir "$dir/ck" --checkpoint-keep 1 --checkpoint-min-interval 0
                    --checkpoint-snapshot-max "$snapshot_max" "${SCPS_BENCH_SERVER_FLAGS[@]}")
scps_cluster_start "$build/server/scps-server" "$workload" 1 2 8G
echo "checkpoint.sh: $(basename "$workload"), 1 server process x 2 SparseCores, checkpoints in $dir" >&2
"$build/tests/bench/scps-bench-client" --servers "$SCPS_CLUSTER_SERVERS" --workload "$workload" --mode checkpoint \
  --batches "$lookups" --rounds "$rounds" --plain-file "$dir/plain.bin" >"$dir/save.json"

# The restore at start: the same process restarted on the same root, each
# time after a plain read of as many bytes.
results=$dir/results
mkdir -p "$results"
cp "$dir/save.json" "$results/"
scps_cluster_stop
: >"$results/restore.log"
: >"$results/read.log"
plain_read() {
  /usr/bin/python3 - "$dir/plain.bin" >>"$results/read.log" <<'PY'
import sys, time
buf = bytearray(16 << 20)
t0 = time.perf_counter()
n = 0
with open(sys.argv[1], "rb", buffering=0) as f:
    while True:
        k = f.readinto(buf)
        if not k:
            break
        n += k
print(n, time.perf_counter() - t0)
PY
}
restore() {
  mkdir -p "$SCPS_CLUSTER_DIR"
  scps_cluster_start "$build/server/scps-server" "$workload" 1 2 8G
  grep 'restored step' "$SCPS_CLUSTER_DIR/server0.log" >>"$results/restore.log"
  scps_cluster_stop
}
for ((r = 0; r < rounds; r++)); do
  if ((r % 2 == 0)); then restore; plain_read; else plain_read; restore; fi
done
rm -rf "$dir/ck" "$dir/plain.bin"
mkdir -p "$dir/inproc"
"$build/tests/bench/scps-bench-checkpoint" --workload "$workload" --dir "$dir/inproc" --runs "$rounds" >"$results/inproc.json"
rm -rf "$dir/inproc"

/usr/bin/python3 - "$results" "$build/bench-checkpoint.json" <<'PY'
import json, re, statistics, sys
results, out = sys.argv[1:3]
save = json.load(open(f"{results}/save.json"))
restores = [(int(m.group(1)), float(m.group(2))) for m in
            re.finditer(r"restored step \d+ from \S+: (\d+) bytes in ([0-9.]+) s", open(f"{results}/restore.log").read())]
reads = [tuple(map(float, line.split())) for line in open(f"{results}/read.log")]
restore_bytes, restore_s = restores[0][0], statistics.median(s for _, s in restores)
n = save["bytes"]
read_s = statistics.median(s for _, s in reads)
gb = 1e-9
rows = {
    "save_gb_per_s": n / save["save_seconds"] * gb,
    "plain_write_fsync_gb_per_s": save["plain_write_fsync_gb_per_s"],
    "restore_gb_per_s": restore_bytes / restore_s * gb,
    "plain_read_gb_per_s": n / read_s * gb,
}
rows["save_ratio"] = rows["save_gb_per_s"] / rows["plain_write_fsync_gb_per_s"]
rows["restore_ratio"] = rows["restore_gb_per_s"] / rows["plain_read_gb_per_s"]
print(f"bytes {n} in {save['files']} files; medians of {save['rounds']} rounds, the scps side first in even rounds")
print(f"{'':34s} {'GB/s':>8s} {'ratio':>7s}")
print(f"{'plain write + fsync':34s} {rows['plain_write_fsync_gb_per_s']:8.2f} {1.0:7.2f}   rounds {save['plain_write_fsync_gb_per_s_rounds']}")
print(f"{'Checkpoint RPC save':34s} {rows['save_gb_per_s']:8.2f} {rows['save_ratio']:7.2f}   rounds {save['save_gb_per_s_rounds']}")
first = save["first_save_gb_per_s"]
print(f"{'  the first save of the process':34s} {first:8.2f} {first / rows['plain_write_fsync_gb_per_s']:7.2f}")
loaded = save["loaded_save_gb_per_s"]
print(f"{'  the same during lookups':34s} {loaded:8.2f} {loaded / rows['plain_write_fsync_gb_per_s']:7.2f}")
print(f"{'plain read (page cache)':34s} {rows['plain_read_gb_per_s']:8.2f} {1.0:7.2f}   rounds {[round(b / s * 1e-9, 2) for b, s in reads]}")
print(f"{'restore at start (page cache)':34s} {rows['restore_gb_per_s']:8.2f} {rows['restore_ratio']:7.2f}   rounds {[round(b / s * 1e-9, 2) for b, s in restores]}")
print(f"lookup ms idle: p50 {save['idle_lookup_ms_p50']:.2f} max {save['idle_lookup_ms_max']:.2f}; "
      f"during the save ({save['save_lookups']} lookups): p50 {save['save_lookup_ms_p50']:.2f} "
      f"max {save['save_lookup_ms_max']:.2f}")
print(f"push ms idle: p50 {save['idle_push_ms_p50']:.2f} max {save['idle_push_ms_max']:.2f}; "
      f"during a {save['push_save_seconds']:.2f} s save ({save['save_pushes']} pushes): "
      f"p50 {save['save_push_ms_p50']:.2f} max {save['save_push_ms_max']:.2f}")
ip = json.load(open(f"{results}/inproc.json"))
print(f"in-process, {ip['runs']} runs, each followed by the plain write / read (medians):")
print(f"{'  save':34s} {ip['save_gb_per_s']:8.2f} {ip['save_ratio']:7.2f}   (plain write + fsync {ip['plain_write_fsync_gb_per_s']:.2f})")
print(f"{'  load':34s} {ip['load_gb_per_s']:8.2f} {ip['load_ratio']:7.2f}   (plain read {ip['plain_read_gb_per_s']:.2f})")
rows["in_process"] = ip
print("target (issue 6): save and restore >= 0.7x the plain write and read")
rows.update({k: v for k, v in save.items() if k not in rows})
json.dump(rows, open(out, "w"), indent=1)
PY
rm -rf "$dir"
