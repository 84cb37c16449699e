#!/usr/bin/env bash
# Instruction counts of a few networked batches, client and server, under
# valgrind's callgrind (deterministic, unlike timings on shared cores):
#   tests/bench/callgrind.sh [--workload FILE] [--sc S] [--batches K]
#                            [--mode lookup|train] [--wire-format F] [--build DIR] [--out DIR]
# Starts one scps-server process x S SparseCores (default 2) under callgrind
# with instrumentation off while its tables are initialized, turns it on,
# runs one client (2 batches) to warm the server, zeroes the server's
# counts, then runs scps-bench-client under callgrind for 1 + K batches
# (default 5; the client's counts are its calls of libscps and its
# preprocessing and completion-queue threads, not the generation of the
# batches). Leaves callgrind.out.server and callgrind.out.client in --out
# (default BUILD/callgrind/) and prints each side's top functions,
# inclusive, for 1 + K batches; callgrind_annotate reads them further.
# Default workload shared/workloads/dlrm8.json, float32; default build
# build-callgrind/ (Release, -march=x86-64-v3, built here): valgrind 3.19
# decodes no AVX-512, which -march=native emits on these hosts, so the
# counts are those of an AVX2 build, not of build-bench/'s.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
shared=${SCPS_SHARED_DIR:-$(dirname "$repo")/shared}
. "$repo/tests/bench/lib.sh"
workload=$shared/workloads/dlrm8.json
sc=2 batches=5 mode=lookup wire=float32 own_build="" outdir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) outdir=${2:?--out needs a folder}; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) scps_bench_option "$@" || { echo "callgrind.sh: unknown option '$1' (try --help)" >&2; exit 2; }; shift 2 ;;
  esac
done
case "$batches" in ''|*[!0-9]*|0) echo "callgrind.sh: --batches '$batches' is not a positive integer" >&2; exit 2 ;; esac
[ -f "$workload" ] || { echo "callgrind.sh: workload '$workload' not found" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind is not installed" >&2; exit 2; }

if [ -n "$own_build" ]; then
  build=$own_build
else
  build=$repo/build-callgrind
  cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSCPS_MARCH=x86-64-v3 -DSCPS_SHARED_DIR="$shared" >/dev/null
  cmake --build "$build" -j2 --target scps-server scps-bench-client >/dev/null
fi
outdir=${outdir:-$build/callgrind}
mkdir -p "$outdir"
rm -f "$outdir"/callgrind.out.*
tmp=$(mktemp -d)
server_pid=""
cleanup() {
  [ -z "$server_pid" ] || kill -TERM "$server_pid" 2>/dev/null || true
  [ -z "$server_pid" ] || wait "$server_pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

valgrind --tool=callgrind --dump-instr=no --instr-atstart=no --callgrind-out-file="$outdir/callgrind.out.server" \
  "$build/server/scps-server" --config "$workload" --listen 127.0.0.1:0 --port-file "$tmp/port" \
  --sc-per-process "$sc" --sc-memory 8G "${SCPS_BENCH_SERVER_FLAGS[@]}" 2>"$tmp/server.log" &
server_pid=$!
# Initializing a workload's tables under valgrind takes minutes.
for _ in $(seq 3000); do
  [ -s "$tmp/port" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/server.log" >&2; exit 1; }
  sleep 0.2
done
[ -s "$tmp/port" ] || { echo "callgrind.sh: the server did not start" >&2; exit 1; }
addr=127.0.0.1:$(cat "$tmp/port")
callgrind_control -i on "$server_pid" >/dev/null
client=("$build/tests/bench/scps-bench-client" --servers "$addr" --workload "$workload" --mode "$mode" --wire-format "$wire")
"${client[@]}" --batches 2 --warmup 0 >/dev/null
callgrind_control -z "$server_pid" >/dev/null
valgrind --tool=callgrind --dump-instr=no --collect-atstart=no --toggle-collect=scps_client_prepare \
  --toggle-collect=scps_client_lookup --toggle-collect=scps_client_apply_gradients --toggle-collect=cq_main \
  --toggle-collect=worker_main --callgrind-out-file="$outdir/callgrind.out.client" \
  "${client[@]}" --batches "$batches" --warmup 1 >"$outdir/client.json" 2>"$tmp/client.log" ||
  { cat "$tmp/client.log" >&2; exit 1; }
kill -TERM "$server_pid"
wait "$server_pid" || true
server_pid=""
echo "callgrind.sh: $(basename "$workload"), 1 x $sc SparseCores, $wire, $mode, $((batches + 1)) batches counted" >&2
for side in server client; do
  echo "== $side (inclusive, instructions for $((batches + 1)) batches)"
  callgrind_annotate --inclusive=yes "$outdir/callgrind.out.$side" 2>/dev/null | sed -n '1,60p' | grep -v '^$'
done
