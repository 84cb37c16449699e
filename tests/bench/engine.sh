#!/usr/bin/env bash
# Engine benchmark against the gather-limit anchor, built and run together:
#   tests/bench/engine.sh [--workload FILE] [--threads 2] [--batches K]
# Builds scps-bench-engine (Release, -march=native) and
# shared/anchors/gather_limit.c in build-bench/, runs both with the same
# thread count on the same workload, prints one table and writes the figures
# to build-bench/bench-engine.json. shared/ is the repo's sibling folder
# unless SCPS_SHARED_DIR is set.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
shared=${SCPS_SHARED_DIR:-$(dirname "$repo")/shared}
workload=$shared/workloads/dlrm8.json
threads=2
batches=20

usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --workload) workload=${2:?--workload needs a file}; shift 2 ;;
    --threads) threads=${2:?--threads needs a number}; shift 2 ;;
    --batches) batches=${2:?--batches needs a number}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "engine.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
done
case "$threads" in ''|*[!0-9]*|0) echo "engine.sh: --threads '$threads' is not a positive integer" >&2; exit 2 ;; esac
case "$batches" in ''|*[!0-9]*|0) echo "engine.sh: --batches '$batches' is not a positive integer" >&2; exit 2 ;; esac
[ -f "$workload" ] || { echo "engine.sh: workload '$workload' not found" >&2; exit 2; }
[ -f "$shared/anchors/gather_limit.c" ] || { echo "engine.sh: no anchors/gather_limit.c under '$shared' (set SCPS_SHARED_DIR)" >&2; exit 2; }

. "$repo/tests/bench/lib.sh"
echo "engine.sh: building in $build" >&2
scps_bench_build scps-bench-engine
bench=$build/tests/bench/scps-bench-engine
# The command from the anchor's header, output into build-bench/.
cc -O3 -march=native -fopenmp -o "$build/gather_limit" "$shared/anchors/gather_limit.c" -lm

# The engine binary reads the workload with the real loader and prints the
# matching anchor options (a trailing '# ...' flags an approximation).
anchor_line=$("$bench" --workload "$workload" --anchor-args)
read -r -a anchor_args <<<"${anchor_line%%#*}"
note=""
[ "$anchor_line" = "${anchor_line%%#*}" ] || note=" (${anchor_line#*# })"

field() { sed -n "s/.*\"$2\": *\"\{0,1\}\([^,\"}]*\).*/\1/p" <<<"$1"; }
# On shared cores one preempted OpenMP thread stalls a whole anchor run, so
# the anchor runs three times and the fastest counts: the ratios below can
# only be understated by it, never flattered.
anchor_runs=3
echo "engine.sh: anchor gather_limit ${anchor_args[*]}, $threads threads, best of $anchor_runs runs$note" >&2
anchor_json="" anchor_ids=0 anchor_all=""
for _ in $(seq "$anchor_runs"); do
  line=$(OMP_NUM_THREADS=$threads "$build/gather_limit" "${anchor_args[@]}")
  ids=$(field "$line" ids_per_s)
  [ -n "$ids" ] || { echo "engine.sh: anchor printed no ids_per_s: $line" >&2; exit 1; }
  anchor_all="$anchor_all${anchor_all:+, }$ids"
  if [ "$ids" -gt "$anchor_ids" ]; then anchor_json=$line anchor_ids=$ids; fi
done

echo "engine.sh: engine on $(basename "$workload"), $threads threads, $batches batches" >&2
engine_out=$("$bench" --workload "$workload" --threads "$threads" --batches "$batches" \
  --anchor-ids-per-s "$anchor_ids")
lookup=$(grep '"phase": "lookup"' <<<"$engine_out")
update=$(grep '"phase": "update"' <<<"$engine_out")
prep=$(grep '"phase": "prep"' <<<"$engine_out")

{
  printf '{"workload": "%s", "threads": %s, "batches": %s,\n' "$(basename "$workload")" "$threads" "$batches"
  printf ' "anchor": %s,\n' "$anchor_json"
  printf ' "anchor_ids_per_s_all_runs": [%s],\n' "$anchor_all"
  printf ' "engine": [%s,\n  %s,\n  %s]}\n' "$lookup" "$update" "$prep"
} >"$build/bench-engine.json"

row() { # label ids/s ms ratio
  printf '%-28s %14.0f %10.3f %8s\n' "$1" "$2" "$3" "$4"
}
echo
printf '%-28s %14s %10s %8s\n' "$(basename "$workload"), $threads threads" "ids/s" "ms/batch" "ratio"
row "anchor (gather limit)" "$anchor_ids" "$(field "$anchor_json" ms_per_batch)" "1.000"
row "engine lookup" "$(field "$lookup" ids_per_s)" "$(field "$lookup" ms_median)" \
  "$(field "$lookup" ratio_to_anchor)"
row "engine update ($(field "$update" optimizer))" "$(field "$update" ids_per_s)" \
  "$(field "$update" ms_median)" "$(field "$update" ratio_to_anchor)"
row "preprocessing (info)" "$(field "$prep" ids_per_s)" "$(field "$prep" ms_median)" \
  "$(field "$prep" ratio_to_anchor)"
echo "targets: lookup >= 0.5, update >= 0.25 of the anchor; figures in $build/bench-engine.json"
