#!/usr/bin/env bash
# scps-loadgen against a real server on loopback, briefly: closed loop in
# every mode, open loop at a rate any machine sustains, --requests, the JSON
# report's consistency, --plot; a server killed mid-run counted as
# UNAVAILABLE without a hang, servers down at the start, missing gnuplot and
# bad flags (exit 2 with a message).
#   loadgen.sh SCPS_SERVER SCPS_LOADGEN
set -euo pipefail
server=$1 loadgen=$2
. "$(dirname "$0")/../../deploy/cluster.sh"
tmp=$SCPS_CLUSTER_DIR
py=/usr/bin/python3

cat >"$tmp/workload.json" <<'JSON'
{"name": "loadgen-test", "batch_size": 32, "ids": {"distribution": "zipf", "exponent": 1.2, "seed": 3},
 "tables": [
  {"name": "a", "vocabulary_size": 5000, "embedding_dim": 16, "combiner": "sum",
   "optimizer": {"type": "adagrad", "learning_rate": 0.01, "initial_accumulator": 0.1},
   "initializer": {"type": "uniform", "scale": 0.05}},
  {"name": "b", "vocabulary_size": 3000, "embedding_dim": 8, "combiner": "mean",
   "optimizer": {"type": "sgd", "learning_rate": 0.01}, "initializer": {"type": "uniform", "scale": 0.05}}],
 "features": [{"name": "fa", "table": "a", "valency": [0, 6]},
              {"name": "fb", "table": "b", "valency": 3, "weighted": true}]}
JSON
workload=$tmp/workload.json

# Under ThreadSanitizer the server logs its own reports rather than halting
# (as scps_it does); the load generator halts on any.
TSAN_OPTIONS="${TSAN_OPTIONS:-}${TSAN_OPTIONS:+:}halt_on_error=0:exitcode=0" \
  scps_cluster_start "$server" "$workload" 1 2 16M
servers=$SCPS_CLUSTER_SERVERS
fail=0
run() { "$loadgen" --workload "$workload" --servers "$servers" --quiet --warmup 0.2 "$@"; }

# check.py JSON [key=value ...]: the report's invariants, plus expectations.
cat >"$tmp/check.py" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
want = dict(a.split("=", 1) for a in sys.argv[2:])
bad = []
def need(cond, what):
    if not cond: bad.append(what)
for k in ("workload", "mode", "concurrency", "rate_target", "duration_s", "requests", "ok", "errors",
          "requests_per_s", "samples_per_s", "ids_per_s", "mb_per_s_sent", "mb_per_s_received", "latency_ms", "timeline"):
    need(k in r, f"key {k} missing")
if bad: print(sys.argv[1], bad); sys.exit(1)
errs = sum(r["errors"].values())
need(r["requests"] == r["ok"] + errs, f"requests {r['requests']} != ok {r['ok']} + errors {errs}")
d = r["duration_s"]
need(d > 0, "duration_s > 0")
need(abs(r["requests_per_s"] * d - r["requests"]) <= 1e-3 * r["requests"] + 0.01, "requests_per_s * duration != requests")
need(abs(r["samples_per_s"] * d - 32 * r["ok"]) <= 1e-3 * 32 * r["ok"] + 0.01, "samples_per_s != 32 * ok / duration")
need(r["ids_per_s"] > 0 if r["ok"] else r["ids_per_s"] == 0, "ids_per_s")
lat = r["latency_ms"]
q = [lat["p50"], lat["p90"], lat["p99"], lat["p99.9"], lat["max"]]
need(r["ok"] == 0 or (q == sorted(q) and q[0] > 0), f"latency percentiles out of order: {q}")
need(r["ok"] == 0 or q[0] <= lat["mean"] * 10, "mean")
for t in r["timeline"]:
    need(set(t) == {"t", "requests_per_s", "ok", "errors", "p50", "p99"} and t["p50"] <= t["p99"],
         f"timeline entry {t}")
# The timeline leaves out a last interval shorter than a quarter second.
need(sum(t["ok"] for t in r["timeline"]) <= r["ok"] and sum(t["errors"] for t in r["timeline"]) <= errs,
     "the timeline's ok and errors add up to more than the totals")
el = r["error_latency_ms"]
need(el["p50"] <= el["p99"] <= el["max"] and (errs > 0 or el["max"] == 0), f"error_latency_ms {el}")
if want.get("clean") == "1":
    need(r["ok"] > 0 and r["errors"] == {}, f"ok {r['ok']}, errors {r['errors']}")
    need(r["mb_per_s_sent"] > 0 and r["mb_per_s_received"] > 0, "traffic counted")
    need(r["bytes_sent"] > 0 and r["bytes_received"] > 0, "bytes counted")
for k in ("mode", "concurrency", "requests", "gradients"):
    if k in want: need(str(r[k]) == want[k], f"{k} {r[k]}, expected {want[k]}")
if "rate" in want:
    rate = float(want["rate"])
    need(r["rate_target"] == rate, "rate_target")
    need(abs(r["requests_per_s"] - rate) <= 0.1 * rate, f"open loop achieved {r['requests_per_s']:.2f} req/s of {rate}")
if "duration" in want:
    need(r["duration_s"] >= float(want["duration"]) - 0.01, f"duration_s {r['duration_s']:.3f} of {want['duration']}")
if "unavailable" in want:
    need(r["ok"] > 0, "some requests answered before the kill")
    need(r["errors"].get("UNAVAILABLE", 0) > 0 and set(r["errors"]) <= {"UNAVAILABLE", "DEADLINE_EXCEEDED"},
         f"errors after the kill: {r['errors']}, expected UNAVAILABLE")
    # Failures come within the deadline (slack for a sanitizer build on a
    # busy machine), and the timeline shows the seconds they ended in.
    need(0 < el["max"] <= r["deadline_ms"] + 1000, f"failed requests' latency {el}, deadline {r['deadline_ms']} ms")
    need(any(t["errors"] for t in r["timeline"]), "no second of the timeline counts the errors")
if bad:
    print(sys.argv[1], "; ".join(bad)); sys.exit(1)
print(f"{sys.argv[1]}: ok ({r['mode']}, {r['requests']} requests, {r['requests_per_s']:.1f}/s, p50 {lat['p50']:.3f} ms, errors {r['errors']})")
PY
check() { $py "$tmp/check.py" "$@" || fail=1; }

# Closed loop in every mode.
run --mode lookup --concurrency 2 --duration 1 --json "$tmp/lookup.json" --plot "$tmp/lookup.png" >/dev/null
check "$tmp/lookup.json" clean=1 mode=lookup concurrency=2
head -c 8 "$tmp/lookup.png" | od -An -c | grep -q 'P   N   G' || { echo "--plot wrote no PNG"; fail=1; }
run --mode train --concurrency 2 --duration 1 --wire-format bfloat16 --json "$tmp/train.json" >/dev/null
check "$tmp/train.json" clean=1 mode=train
run --mode train --concurrency 1 --requests 20 --gradients row --json "$tmp/train-row.json" >/dev/null
check "$tmp/train-row.json" clean=1 mode=train gradients=row
run --mode mixed --train-fraction 0.5 --concurrency 3 --cq-threads 2 --duration 1 --json "$tmp/mixed.json" >/dev/null
check "$tmp/mixed.json" clean=1 mode=mixed concurrency=3
run --mode lookup --concurrency 2 --requests 40 --answer rows --json "$tmp/requests.json" >/dev/null
check "$tmp/requests.json" clean=1 requests=40
# Open loop at a rate far below what even a sanitizer build on a busy
# machine sustains: each client has 200 ms per request.
run --mode lookup --concurrency 4 --rate 20 --duration 2 --json "$tmp/open.json" >/dev/null
check "$tmp/open.json" clean=1 rate=20
# A low rate whose last request finishes well before the end: the rate is
# counted over the whole --duration, not up to that request.
run --mode lookup --concurrency 1 --rate 2 --duration 3 --json "$tmp/slow.json" >/dev/null
check "$tmp/slow.json" clean=1 rate=2 duration=3

# A server killed mid-run, open loop: requests fail as UNAVAILABLE within
# their deadline (one in flight at the kill may run out of it instead) and
# the run ends on time, the requests due meanwhile that the clients, each
# waiting for a failing one, never sent counted as not sent. The kill
# waits for the first progress line after the warm-up that counts answered
# requests: a fixed 0.8 s once came before the first measured answer of a
# ThreadSanitizer build on a loaded machine.
"$loadgen" --workload "$workload" --servers "$servers" --warmup 0.2 --mode lookup --concurrency 2 --rate 200 \
  --duration 4 --deadline-ms 1000 --json "$tmp/down.json" >/dev/null 2>"$tmp/down.err" &
lg=$!
answered() { grep -v 'warm-up' "$tmp/down.err" | grep -Eq ' [1-9][0-9]* req/s'; }
for _ in $(seq 300); do
  answered && break
  kill -0 "$lg" 2>/dev/null || break
  sleep 0.1
done
answered || { echo "no request answered after the warm-up in 30 s:"; cat "$tmp/down.err"; fail=1; }
killed=$(date +%s%N)
kill -KILL "${scps_cluster_pids[0]}"
wait "${scps_cluster_pids[0]}" 2>/dev/null || true
wait "$lg" || {
  echo "scps-loadgen failed after the server was killed; its stderr, progress lines left out:"
  grep -v 'req/s' "$tmp/down.err" | tail -40
  fail=1
}
elapsed_ms=$((($(date +%s%N) - killed) / 1000000))
check "$tmp/down.json" unavailable=1
[ "$elapsed_ms" -lt 8000 ] || { echo "run with a dead server went on $elapsed_ms ms after the kill (--duration 4)"; fail=1; }
/usr/bin/python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1]))["not_sent"] > 0 else 1)' \
  "$tmp/down.json" || { echo "a dead server left nothing counted as not sent: $(cat "$tmp/down.json")"; fail=1; }

# No server at the start: exit 1, naming it, after the connect timeout.
if out=$("$loadgen" --workload "$workload" --servers "$servers" --mode lookup --quiet --connect-timeout-ms 300 2>&1); then
  echo "scps-loadgen succeeded without a server"; fail=1
elif ! grep -q "client 0: server 0 ($servers)" <<<"$out"; then
  echo "no server: unexpected message: $out"; fail=1
fi

# --plot without gnuplot fails before any load (the server is down: a run
# would wait for it first).
if out=$(PATH=/nonexistent "$loadgen" --workload "$workload" --servers "$servers" --mode lookup --plot "$tmp/x.png" 2>&1); then
  echo "--plot without gnuplot succeeded"; fail=1
elif ! grep -q "needs gnuplot" <<<"$out"; then
  echo "--plot without gnuplot: unexpected message: $out"; fail=1
fi

# Bad flags: exit 2 and a message naming the flag.
bad() {
  local expect=$1 rc=0 out
  shift
  out=$("$loadgen" "$@" 2>&1) || rc=$?
  if [ "$rc" -ne 2 ] || ! grep -q -- "$expect" <<<"$out"; then
    echo "flags '$*': exit $rc, message '$out' (expected exit 2 naming '$expect')"; fail=1
  fi
}
base=(--workload "$workload" --servers "$servers")
bad "--mode 'bogus'" "${base[@]}" --mode bogus
bad "--mode is required" "${base[@]}"
bad "--workload is required" --servers "$servers" --mode lookup
bad "--servers is required" --workload "$workload" --mode lookup
bad "--concurrency '0'" "${base[@]}" --mode lookup --concurrency 0
bad "--rate '-5'" "${base[@]}" --mode lookup --rate -5
bad "--duration '1x'" "${base[@]}" --mode lookup --duration 1x
bad "--train-fraction '1.5'" "${base[@]}" --mode mixed --train-fraction 1.5
bad "--train-fraction is for --mode mixed" "${base[@]}" --mode lookup --train-fraction 0.5
bad "give one of them" "${base[@]}" --mode lookup --duration 1 --requests 5
bad "--wire-format: wire format 'fp8'" "${base[@]}" --mode lookup --wire-format fp8
bad "--wire-format: wire format 'e9m0'" "${base[@]}" --mode lookup --wire-format e4m3/e9m0
bad "--answer 'sparse'" "${base[@]}" --mode lookup --answer sparse
bad "--gradients 'rows'" "${base[@]}" --mode train --gradients rows
bad "--deadline-ms '0'" "${base[@]}" --mode lookup --deadline-ms 0
bad "--cq-threads '17'" "${base[@]}" --mode lookup --cq-threads 17
bad "unknown option '--frobnicate'" "${base[@]}" --mode lookup --frobnicate
bad "--duration needs a value" "${base[@]}" --mode lookup --duration
bad "address 'localhost' has no port" --workload "$workload" --servers localhost --mode lookup
# --help documents every flag.
help=$("$loadgen" --help)
for f in workload servers mode train-fraction concurrency rate duration requests warmup wire-format answer gradients deadline-ms \
  connect-timeout-ms json plot quiet help; do
  grep -q -- "--$f" <<<"$help" || { echo "--help does not document --$f"; fail=1; }
done

[ "$fail" -eq 0 ] && echo "loadgen.sh: all checks passed"
exit "$fail"
