#!/usr/bin/env bash
# Checkpoint save and restore throughput of one scps-server process, next to
# a plain sequential write + fsync and read of the same bytes in the same run:
#   tests/bench/checkpoint.sh [--workload FILE] [--lookups K] [--dir DIR]
# Builds (Release, -march=native) in build-bench/, starts one process (2
# SparseCores) with --checkpoint-dir DIR/ck (default build-bench/ckpt-bench),
# pushes one step, times K lookups idle, a Checkpoint RPC alone twice (the
# second is the save figure; the first, printed apart, also pays for page
# cache memory the VM has not touched since boot), the same Checkpoint again
# with lookups back to back (lookup latency during a save, and that save's
# GB/s), restarts the process to time
# the restore at start, writes (16 MiB write() calls, one fsync) and reads
# (16 MiB read() calls into one buffer) a plain file of the same size, prints
# the ratios and writes build-bench/bench-checkpoint.json. Page cache: the
# restore and the plain read both read files written just before and never
# evicted, so both are served from the page cache; neither touches the disk.
# Last, scps-bench-checkpoint saves and loads the same tables in-process 3
# times, each save and load followed by a plain write and read of as many
# bytes, so neither side gains from coming later (medians).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
shared=${SCPS_SHARED_DIR:-$(dirname "$repo")/shared}
workload=$shared/workloads/dlrm8.json
lookups=20
. "$repo/tests/bench/lib.sh"
dir=$build/ckpt-bench
while [ $# -gt 0 ]; do
  case "$1" in
    --workload) workload=${2:?--workload needs a file}; shift 2 ;;
    --lookups) lookups=${2:?--lookups needs a number}; shift 2 ;;
    --dir) dir=${2:?--dir needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "checkpoint.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
done
[ -f "$workload" ] || { echo "checkpoint.sh: workload '$workload' not found" >&2; exit 2; }

scps_bench_build scps-server scps-bench-client scps-bench-checkpoint

rm -rf "$dir"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
. "$repo/deploy/cluster.sh"
SCPS_CLUSTER_FLAGS=(--checkpoint-dir "$dir/ck" --checkpoint-keep 1)
scps_cluster_start "$build/server/scps-server" "$workload" 1 2 8G
echo "checkpoint.sh: $(basename "$workload"), 1 server process x 2 SparseCores, checkpoints in $dir" >&2
"$build/tests/bench/scps-bench-client" --servers "$SCPS_CLUSTER_SERVERS" --workload "$workload" --mode checkpoint \
  --batches "$lookups" >"$dir/save.json"

# The restore at start: the same process restarted on the same root.
results=$dir/results
mkdir -p "$results"
cp "$dir/save.json" "$results/"
scps_cluster_stop
mkdir -p "$SCPS_CLUSTER_DIR"
scps_cluster_start "$build/server/scps-server" "$workload" 1 2 8G
grep 'restored step' "$SCPS_CLUSTER_DIR/server0.log" >"$results/restore.log"
scps_cluster_stop
rm -rf "$dir/ck"
mkdir -p "$dir/inproc"
"$build/tests/bench/scps-bench-checkpoint" --workload "$workload" --dir "$dir/inproc" --runs 3 >"$results/inproc.json"
rm -rf "$dir/inproc"

/usr/bin/python3 - "$results" "$dir" "$build/bench-checkpoint.json" <<'PY'
import json, os, re, sys, time
results, d, out = sys.argv[1:4]
save = json.load(open(f"{results}/save.json"))
m = re.search(r"restored step \d+ from \S+: (\d+) bytes in ([0-9.]+) s", open(f"{results}/restore.log").read())
restore_bytes, restore_s = int(m.group(1)), float(m.group(2))
n = save["bytes"]
chunk = os.urandom(16 << 20)
path = f"{d}/plain.bin"
t0 = time.perf_counter()
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
left = n
while left > 0:
    left -= os.write(fd, chunk[: min(left, len(chunk))])
os.fsync(fd)
os.close(fd)
write_s = time.perf_counter() - t0
buf = bytearray(16 << 20)
t0 = time.perf_counter()
fd = os.open(path, os.O_RDONLY)
with os.fdopen(fd, "rb", buffering=0) as f:
    while f.readinto(buf):
        pass
read_s = time.perf_counter() - t0
os.unlink(path)
gb = 1e-9
rows = {
    "save_gb_per_s": n / save["save_seconds"] * gb,
    "plain_write_fsync_gb_per_s": n / write_s * gb,
    "restore_gb_per_s": restore_bytes / restore_s * gb,
    "plain_read_gb_per_s": n / read_s * gb,
}
rows["save_ratio"] = rows["save_gb_per_s"] / rows["plain_write_fsync_gb_per_s"]
rows["restore_ratio"] = rows["restore_gb_per_s"] / rows["plain_read_gb_per_s"]
print(f"bytes {n} in {save['files']} files")
print(f"{'':34s} {'GB/s':>8s} {'ratio':>7s}")
print(f"{'plain write + fsync':34s} {rows['plain_write_fsync_gb_per_s']:8.2f} {1.0:7.2f}")
print(f"{'Checkpoint RPC save':34s} {rows['save_gb_per_s']:8.2f} {rows['save_ratio']:7.2f}")
first = save["first_save_gb_per_s"]
print(f"{'  the first save of the process':34s} {first:8.2f} {first / rows['plain_write_fsync_gb_per_s']:7.2f}")
loaded = save["loaded_save_gb_per_s"]
print(f"{'  the same during lookups':34s} {loaded:8.2f} {loaded / rows['plain_write_fsync_gb_per_s']:7.2f}")
print(f"{'plain read (page cache)':34s} {rows['plain_read_gb_per_s']:8.2f} {1.0:7.2f}")
print(f"{'restore at start (page cache)':34s} {rows['restore_gb_per_s']:8.2f} {rows['restore_ratio']:7.2f}")
print(f"lookup ms idle: p50 {save['idle_lookup_ms_p50']:.2f} max {save['idle_lookup_ms_max']:.2f}; "
      f"during the save ({save['save_lookups']} lookups): p50 {save['save_lookup_ms_p50']:.2f} "
      f"max {save['save_lookup_ms_max']:.2f}")
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
