#!/usr/bin/env bash
# scps-admin's commands against a real 2-process cluster: health, stats and
# config of every server, a checkpoint save of the step the servers hold,
# rows (ReadRows) against that checkpoint's files, stats, config and health
# as JSON, every command's --help, the trainer's --policy,
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

# --json: the same answers, one object per server in an array.
"$admin" stats --servers "$servers" --json >"$SCPS_CLUSTER_DIR/stats.json" || fail "stats --json exited $?"
"$admin" config --servers "${servers##*,}" --json >"$SCPS_CLUSTER_DIR/config.json" || fail "config --json exited $?"
/usr/bin/python3 - "$SCPS_CLUSTER_DIR" "$servers" "$ck" <<'PY' || fail "stats/config --json"
import json, sys
d, servers, ck = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
stats = json.load(open(d + "/stats.json"))
assert [s["server"] for s in stats] == servers, stats
assert [s["process_index"] for s in stats] == [0, 1], stats
for s in stats:
    assert len(s["sparse_cores"]) == 2 and s["sparse_cores"][0]["memory_capacity_bytes"] > 0, s["sparse_cores"]
    users = [st for st in s["stacks"] if st["stack"] == "users"]
    assert users and users[0]["ids_looked_up"] > 0, s["stacks"]
    calls = {m["method"]: m["calls"] for m in s["methods"]}
    assert calls.get("Lookup") == 25 and calls.get("ApplyGradients") == 20, calls
    assert s["checkpoints"]["saves"] == 0 and "memory" in s, s
config = json.load(open(d + "/config.json"))
assert len(config) == 1 and config[0]["server"] == servers[1], config
c = config[0]
assert c["process_index"] == 1 and c["last_step"] == 19 and c["checkpoint_dir"] == ck, c
assert c["cluster"]["topology"]["num_processes"] == 2 and c["cluster"]["topology"]["sc_per_process"] == 2, c
users = [st for st in c["stacks"] if st["name"] == "users"]
assert users and users[0]["dim"] == 16 and users[0]["features"] == ["user"], c["stacks"]
assert len(c["config_fingerprint"]) == 64 and int(c["config_fingerprint"], 16) >= 0, c["config_fingerprint"]
PY

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
# rows: ids' rows and slots as the servers hold them, bit for bit the
# checkpoint of the step they hold (written by another path: the files).
ids="0-3,3999,17,2"
"$admin" rows --servers "$servers" --table users --ids "$ids" --json >"$SCPS_CLUSTER_DIR/rows.json" ||
  fail "rows exited $?"
"$admin" checkpoint export "$ck/step-000000000019" --table users --out "$SCPS_CLUSTER_DIR/users.npy" >/dev/null &&
  "$admin" checkpoint export "$ck/step-000000000019" --table users --slot accumulator \
    --out "$SCPS_CLUSTER_DIR/acc.npy" >/dev/null || fail "checkpoint export"
/usr/bin/python3 - "$SCPS_CLUSTER_DIR" <<'PY' || fail "rows --json against the checkpoint"
import json, sys
import numpy as np
d = sys.argv[1]
r = json.load(open(d + "/rows.json"))
rows, acc = np.load(d + "/users.npy"), np.load(d + "/acc.npy")
ids = [0, 1, 2, 3, 3999, 17, 2]
assert r["table"] == "users" and r["embedding_dim"] == 16 and r["slots"] == ["accumulator"], r
assert [x["id"] for x in r["rows"]] == ids, [x["id"] for x in r["rows"]]
for x in r["rows"]:
    assert np.array_equal(np.float32(x["row"]), rows[x["id"]]), x["id"]
    assert np.array_equal(np.float32(x["accumulator"]), acc[x["id"]]), x["id"]
assert any(not np.all(acc[i] == acc[0]) for i in ids), "no id was trained"
PY
out=$("$admin" rows --servers "$servers" --table categories --ids 5) || fail "rows exited $?: $out"
grep -q "table categories: embedding_dim 8, optimizer adagrad" <<<"$out" && grep -q "^  id 5: row .*; accumulator " <<<"$out" ||
  fail "rows: $out"
for bad in "--table nope --ids 1" "--table users --ids 4000"; do
  rc=0
  out=$("$admin" rows --servers "$servers" $bad 2>&1) || rc=$?
  [ "$rc" = 1 ] || fail "'scps-admin rows $bad' exited $rc, not 1: $out"
done

# A step above the one the servers hold would label their state wrongly.
rc=0
out=$("$admin" checkpoint save --servers "$servers" --step 25 2>&1) || rc=$?
[ "$rc" = 1 ] && grep -q "servers hold step 19" <<<"$out" || fail "save of a step ahead exited $rc: $out"

# A port nobody listens on: exit 1, saying so, the live server still shown.
rc=0
out=$("$admin" health --servers "${servers%%,*},127.0.0.1:1" --deadline-ms 500) || rc=$?
[ "$rc" = 1 ] && grep -q "127.0.0.1:1: Health: DEADLINE_EXCEEDED.*no connection" <<<"$out" &&
  grep -q "SERVING, process 0" <<<"$out" || fail "health with a dead server exited $rc: $out"
rc=0
out=$("$admin" health --servers "${servers%%,*},127.0.0.1:1" --deadline-ms 500 --json) || rc=$?
[ "$rc" = 1 ] && /usr/bin/python3 -c '
import json, sys
h = json.loads(sys.argv[1])
assert len(h) == 2 and h[0]["status"] == "STATUS_SERVING" and h[0]["process_index"] == 0, h
assert h[1]["server"] == "127.0.0.1:1" and "DEADLINE_EXCEEDED" in h[1]["error"], h' "$out" ||
  fail "health --json with a dead server exited $rc: $out"

# Every command's --help prints its own usage; a group's name lists its
# commands (--help: exit 0; alone or with an unknown command: exit 2).
for cmd in health stats config rows "checkpoint save" "checkpoint list" "checkpoint verify" \
           "checkpoint convert" "checkpoint export" "checkpoint restore"; do
  rc=0
  out=$("$admin" $cmd --help) || rc=$?
  [ "$rc" = 0 ] && grep -q "^usage: scps-admin $cmd" <<<"$out" || fail "'scps-admin $cmd --help' exited $rc: $out"
done
rc=0
out=$("$admin" checkpoint --help) || rc=$?
[ "$rc" = 0 ] && grep -q "^usage: scps-admin checkpoint COMMAND" <<<"$out" && grep -q "  checkpoint save " <<<"$out" &&
  grep -q "  checkpoint restore " <<<"$out" || fail "'scps-admin checkpoint --help' exited $rc: $out"
for bad in "checkpoint" "checkpoint nope"; do
  rc=0
  out=$("$admin" $bad 2>&1) || rc=$?
  [ "$rc" = 2 ] && grep -q "checkpoint list" <<<"$out" || fail "'scps-admin $bad' exited $rc: $out"
done

for bad in "health" "health --servers" "health --servers 127.0.0.1" "stats --servers $servers --step 3" \
           "config --servers $servers extra" "checkpoint save --servers $servers --step -1" \
           "health --servers $servers --deadline-ms 0" "checkpoint save --servers $servers --dir /absolute" \
           "health --servers [::1]" "rows --servers $servers --table users" "rows --servers $servers --ids 1" \
           "rows --servers $servers --table users --ids 5-1" "rows --servers $servers --table users --ids x" \
           "checkpoint save --servers $servers --json"; do
  rc=0
  "$admin" $bad >/dev/null 2>&1 || rc=$?
  [ "$rc" = 2 ] || fail "'scps-admin $bad' exited $rc, not 2"
done
# The trainer's drop policy: it trains on, counting what it dropped; a
# policy it does not know is a bad flag.
out=$("$trainer" --servers "$servers" --workload "$workload" --steps 2 --eval-batches 1 --policy drop 2>/dev/null) ||
  fail "trainer --policy drop exited $?: $out"
grep -q "ids dropped over the partition limits (--policy drop)" <<<"$out" || fail "trainer --policy drop: $out"
rc=0
out=$("$trainer" --servers "$servers" --workload "$workload" --policy lenient 2>&1) || rc=$?
[ "$rc" = 2 ] && grep -q "expected error or drop" <<<"$out" || fail "trainer --policy lenient exited $rc: $out"

[ "$status" = 0 ] && echo "admin_online: ok"
exit "$status"
