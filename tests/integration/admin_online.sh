#!/usr/bin/env bash
# scps-admin's commands against a real 2-process cluster: health, stats and
# config of every server, a checkpoint save of the step the servers hold,
# a server that is not there (exit 1, saying so) and bad flags (exit 2).
#   admin_online.sh SCPS_SERVER SCPS_TRAINER SCPS_ADMIN WORKLOAD
set -uo pipefail
server=$1 trainer=$2 admin=$3 workload=$4
. "$(dirname "$0")/../../deploy/cluster.sh"
ck="$SCPS_CLUSTER_DIR/ck"
SCPS_CLUSTER_FLAGS=(--checkpoint-dir "$ck")
scps_cluster_start "$server" "$workload" 2 2 64M || exit 1
servers=$SCPS_CLUSTER_SERVERS
status=0
fail() { echo "FAILED: $*"; status=1; }

"$trainer" --servers "$servers" --workload "$workload" --steps 20 --eval-batches 5 >/dev/null 2>&1 || fail "trainer run"

out=$("$admin" health --servers "$servers") || fail "health exited $?: $out"
[ "$(grep -c ': SERVING, process [01], up' <<<"$out")" = 2 ] || fail "health: $out"

out=$("$admin" stats --servers "$servers") || fail "stats exited $?: $out"
for want in "process 0, up" "process 1, up" "SparseCore 3:" "stack users: " "ids looked up" \
            "most ids in a partition" "Lookup: 25 calls" "ApplyGradients: 20 calls" "checkpoints: 0 saved" \
            "memory budget: "; do
  grep -q "$want" <<<"$out" || fail "stats lacks '$want': $out"
done

out=$("$admin" config --servers "${servers##*,}") || fail "config exited $?: $out"
for want in "process 1 of 2, 2 SparseCores" "holds step 19" "checkpoints to $ck" "stack users: dim 16" \
            "tables users; features user"; do
  grep -q "$want" <<<"$out" || fail "config lacks '$want': $out"
done

out=$("$admin" checkpoint save --servers "$servers") || fail "checkpoint save exited $?: $out"
grep -q "checkpoint of step 19 saved: .* $ck/step-000000000019" <<<"$out" || fail "checkpoint save: $out"
"$admin" checkpoint verify "$ck/step-000000000019" >/dev/null || fail "the saved checkpoint does not verify"
out=$("$admin" stats --servers "$servers")
[ "$(grep -c 'checkpoints: 1 saved, 0 failed; last step 19' <<<"$out")" = 2 ] || fail "stats after the save: $out"

# Within --checkpoint-min-interval (10 s by default) the save just made is
# answered again, and a save elsewhere is refused, saying when to retry.
out=$("$admin" checkpoint save --servers "$servers") || fail "a repeated save exited $?: $out"
grep -q "checkpoint of step 19 saved: .* $ck/step-000000000019" <<<"$out" || fail "repeated save: $out"
rc=0
out=$("$admin" checkpoint save --servers "$servers" --dir elsewhere 2>&1) || rc=$?
[ "$rc" = 1 ] && grep -q "RESOURCE_EXHAUSTED.*--checkpoint-min-interval" <<<"$out" && [ ! -e "$ck/elsewhere/step-000000000019" ] ||
  fail "a second save within the interval exited $rc: $out"

# A step above the one the servers hold would label their state wrongly.
rc=0
out=$("$admin" checkpoint save --servers "$servers" --step 25 2>&1) || rc=$?
[ "$rc" = 1 ] && grep -q "servers hold step 19" <<<"$out" || fail "save of a step ahead exited $rc: $out"

# A port nobody listens on: exit 1, saying so, the live server still shown.
rc=0
out=$("$admin" health --servers "${servers%%,*},127.0.0.1:1" --deadline-ms 500) || rc=$?
[ "$rc" = 1 ] && grep -q "127.0.0.1:1: Health: DEADLINE_EXCEEDED.*no connection" <<<"$out" &&
  grep -q "SERVING, process 0" <<<"$out" || fail "health with a dead server exited $rc: $out"

for bad in "health" "health --servers" "health --servers 127.0.0.1" "stats --servers $servers --step 3" \
           "config --servers $servers extra" "checkpoint save --servers $servers --step -1" \
           "health --servers $servers --deadline-ms 0" "checkpoint save --servers $servers --dir /absolute" \
           "health --servers [::1]"; do
  rc=0
  "$admin" $bad >/dev/null 2>&1 || rc=$?
  [ "$rc" = 2 ] || fail "'scps-admin $bad' exited $rc, not 2"
done
[ "$status" = 0 ] && echo "admin_online: ok"
exit "$status"
