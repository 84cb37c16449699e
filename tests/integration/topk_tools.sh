#!/usr/bin/env bash
# The TopK tools against a real cluster (2 processes x 2 SparseCores) on
# loopback: 'scps-admin topk' (every query source, text and JSON, exact
# answers against numpy on the rows 'scps-admin rows' reads, a range, the
# bins of an approximate call, bad arguments) and 'scps-loadgen --mode
# topk' (the measured recall at least the target and the expected one,
# exact runs measuring recall 1, open loop, its JSON keys, bad flags).
#   topk_tools.sh SCPS_SERVER SCPS_ADMIN SCPS_LOADGEN
set -euo pipefail
server=$1 admin=$2 loadgen=$3
. "$(dirname "$0")/../../deploy/cluster.sh"
tmp=$SCPS_CLUSTER_DIR
py=/usr/bin/python3

cat >"$tmp/workload.json" <<'JSON'
{"name": "topk-test", "batch_size": 16, "ids": {"distribution": "uniform", "seed": 5},
 "tables": [
  {"name": "a", "vocabulary_size": 6000, "embedding_dim": 16, "combiner": "sum",
   "optimizer": {"type": "sgd", "learning_rate": 0.01}, "initializer": {"type": "normal", "stddev": 0.3}},
  {"name": "b", "vocabulary_size": 500, "embedding_dim": 12, "combiner": "mean",
   "optimizer": {"type": "sgd", "learning_rate": 0.01}, "initializer": {"type": "uniform", "scale": 0.5}}],
 "features": [{"name": "fa", "table": "a", "valency": 2}, {"name": "fb", "table": "b", "valency": 1}]}
JSON
workload=$tmp/workload.json
TSAN_OPTIONS="${TSAN_OPTIONS:-}${TSAN_OPTIONS:+:}halt_on_error=0:exitcode=0" \
  scps_cluster_start "$server" "$workload" 2 2 16M
servers=$SCPS_CLUSTER_SERVERS
fail=0
topk() { "$admin" topk --servers "$servers" "$@"; }

# ---- scps-admin topk ----

# Every row of table a, and 3 queries in a file.
"$admin" rows --servers "$servers" --table a --ids 0-5999 --json >"$tmp/rows.json"
$py - "$tmp" <<'PY'
import sys, numpy as np
np.random.default_rng(7).standard_normal((3, 16)).astype("<f4").tofile(sys.argv[1] + "/q.bin")
open(sys.argv[1] + "/bad.bin", "wb").write(b"\0" * 10)
PY

# check.py ANSWER.json SCORE [FIRST COUNT]: ids and scores against float64
# brute force on the rows (a near tie, closer than float32 error, may swap).
cat >"$tmp/check.py" <<'PY'
import json, sys, numpy as np
tmp, answer, score = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3]
first = int(sys.argv[4]) if len(sys.argv) > 4 else 0
rows = np.array([r["row"] for r in json.load(open(tmp + "/rows.json"))["rows"]], dtype=np.float64)
count = int(sys.argv[5]) if len(sys.argv) > 5 else len(rows) - first
q = np.fromfile(tmp + "/q.bin", dtype="<f4").reshape(-1, 16).astype(np.float64)
r = rows[first:first + count]
if score == "dot":
    s = q @ r.T
elif score == "cosine":
    s = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (r / np.linalg.norm(r, axis=1, keepdims=True)).T
else:
    s = -((q[:, None, :] - r[None, :, :]) ** 2).sum(-1)
k, bad = answer["k"], []
if answer["bins"] != 0 or answer["expected_recall"] != 1 or answer["rows_scanned"] != count:
    bad.append("exact call reported bins %s, expected recall %s, rows scanned %s" %
               (answer["bins"], answer["expected_recall"], answer["rows_scanned"]))
for i, a in enumerate(answer["queries"]):
    order = np.argsort(-s[i], kind="stable")
    want = order[:k] + first
    got = np.array(a["ids"])
    sc = np.array(a["scores"])
    if not np.allclose(sc, s[i][got - first], rtol=1e-5, atol=1e-5):
        bad.append("query %d: scores %s, float64 %s" % (i, sc, s[i][got - first]))
    if list(sc) != sorted(sc, reverse=True):
        bad.append("query %d: scores not descending %s" % (i, sc))
    gap = s[i][order[k - 1]] - s[i][order[k]]
    if gap > 1e-4 and set(got) != set(want):
        bad.append("query %d: ids %s, brute force %s" % (i, list(got), list(want)))
if bad:
    print("\n".join(bad)); sys.exit(1)
PY
for score in dot cosine l2; do
  topk --table a --k 7 --score "$score" --queries "$tmp/q.bin" --json >"$tmp/$score.json"
  $py "$tmp/check.py" "$tmp" "$tmp/$score.json" "$score" || { echo "topk --score $score: wrong answer"; fail=1; }
done
topk --table a --k 5 --range 1000:300 --queries "$tmp/q.bin" --json >"$tmp/range.json"
$py "$tmp/check.py" "$tmp" "$tmp/range.json" dot 1000 300 || { echo "topk --range 1000:300: wrong answer"; fail=1; }
# bfloat16 queries: the file's values rounded, so not compared; the shape.
topk --table a --k 3 --queries "$tmp/q.bin" --query-format bfloat16 --json >"$tmp/bf16.json"
$py -c 'import json, sys; a = json.load(open(sys.argv[1])); sys.exit(not (a["query_format"] == "bfloat16" and len(a["queries"]) == 3 and all(len(q["ids"]) == 3 for q in a["queries"])))' \
  "$tmp/bf16.json" || { echo "bfloat16 queries: $(cat "$tmp/bf16.json")"; fail=1; }

# --query-id: the row itself ranks first by cosine and by distance; text.
out=$(topk --table a --k 4 --score cosine --query-id 4321)
grep -q '^table a: 1 query, k 4, score cosine, recall target 1$' <<<"$out" &&
  grep -Eq '^ +1 +4321 ' <<<"$out" && grep -q '^bins 0 (exact), rows scanned 6000 per query, expected recall 1$' <<<"$out" ||
  { echo "topk --query-id 4321 --score cosine:"; echo "$out"; fail=1; }
out=$(topk --table a --k 2 --score l2 --query-id 17)
grep -Eq '^ +1 +17 ' <<<"$out" || { echo "topk --query-id 17 --score l2:"; echo "$out"; fail=1; }
# --query: one query of embedding_dim values.
out=$(topk --table b --k 3 --query 1,0,0,0,0,0,0,0,0,0,0,0)
[ "$(grep -c '^ \+[0-9]\+ \+[0-9]\+ ' <<<"$out")" -eq 3 ] || { echo "topk --query: $out"; fail=1; }
# Approximate: bins, an expected recall at least the target.
topk --table a --k 10 --recall 0.9 --queries "$tmp/q.bin" --json >"$tmp/approx.json"
$py -c 'import json, sys; a = json.load(open(sys.argv[1])); sys.exit(not (a["bins"] > 0 and a["expected_recall"] >= 0.9 and a["rows_scanned"] == 6000))' \
  "$tmp/approx.json" || { echo "topk --recall 0.9: $(head -c 400 "$tmp/approx.json")"; fail=1; }

# Bad arguments: exit 2, naming the flag and value (or the field libscps
# names: k above the rows searched, a range outside the vocabulary).
bad_admin() {
  local expect=$1 rc=0 out
  shift
  out=$("$admin" topk "$@" 2>&1) || rc=$?
  if [ "$rc" -ne 2 ] || ! grep -qF -- "$expect" <<<"$out"; then
    echo "scps-admin topk $*: exit $rc, '$(head -1 <<<"$out")' (expected exit 2 naming '$expect')"; fail=1
  fi
}
a=(--servers "$servers" --table a)
bad_admin "--k '0'" "${a[@]}" --query-id 1 --k 0
bad_admin "k 6001 not in [1, 6000]" "${a[@]}" --query-id 1 --k 6001
bad_admin "k 11 not in [1, 10]" "${a[@]}" --query-id 1 --k 11 --range 0:10
bad_admin "--score 'euclid'" "${a[@]}" --query-id 1 --score euclid
bad_admin "--recall '1.5'" "${a[@]}" --query-id 1 --recall 1.5
bad_admin "--recall '0'" "${a[@]}" --query-id 1 --recall 0
bad_admin "--range '5'" "${a[@]}" --query-id 1 --range 5
bad_admin "first_id 5990, count 20" "${a[@]}" --query-id 1 --range 5990:20
bad_admin "--query-format 'fp8'" "${a[@]}" --query-id 1 --query-format fp8
bad_admin "query_format 'e4m3' needs an embedding_dim that is a multiple of 8" --servers "$servers" --table b \
  --query-id 1 --query-format e4m3
bad_admin "--query '1,2': 2 values; table 'a' has embedding_dim 16" "${a[@]}" --query 1,2
bad_admin "--query '1,x'" "${a[@]}" --query 1,x
bad_admin "value 2 ('1e39') is not a float32 (out of range)" "${a[@]}" --query 0,1e39
bad_admin "queries[0][1] = nan" "${a[@]}" --query 0,nan,0,0,0,0,0,0,0,0,0,0,0,0,0,0
bad_admin "--queries '$tmp/bad.bin': 10 bytes" "${a[@]}" --queries "$tmp/bad.bin"
bad_admin "--queries '$tmp/none.bin'" "${a[@]}" --queries "$tmp/none.bin"
bad_admin "--query-id 6000" "${a[@]}" --query-id 6000
bad_admin "give one of --query, --query-id and --queries" "${a[@]}"
bad_admin "give one of --query, --query-id and --queries" "${a[@]}" --query-id 1 --queries "$tmp/q.bin"
bad_admin "--table is required" --servers "$servers" --query-id 1
bad_admin "--servers: address 'x' has no port" --servers x --table a --query-id 1
rc=0
out=$(topk --table nope --query-id 1 2>&1) || rc=$?
[ "$rc" -eq 1 ] && grep -qF -- "--table 'nope'" <<<"$out" || { echo "unknown table: exit $rc, $out"; fail=1; }
help=$("$admin" topk --help)
for f in servers table query query-id queries k score recall range query-format json deadline-ms token-file; do
  grep -q -- "--$f " <<<"$help" || { echo "scps-admin topk --help does not document --$f"; fail=1; }
done
"$admin" --help | grep -q '^  topk ' || { echo "scps-admin --help does not list topk"; fail=1; }

# ---- scps-loadgen --mode topk ----

lg() { "$loadgen" --servers "$servers" --quiet --warmup 0.2 --mode topk --table a "$@"; }
# lgcheck.py JSON TARGET [exact|rate=R]: the report's consistency and recall.
cat >"$tmp/lgcheck.py" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
target = float(sys.argv[2])
opts = sys.argv[3:]
bad = []
def need(cond, what):
    if not cond: bad.append(what)
for k in ("mode", "requests", "ok", "errors", "requests_per_s", "latency_ms", "timeline", "table", "k", "score",
          "recall_target", "queries_per_call", "queries", "calls_per_s", "queries_per_s", "recall_measured",
          "recall_queries", "recall_expected", "bins", "rows_scanned"):
    need(k in r, "key %s missing" % k)
if bad: print(sys.argv[1], bad); sys.exit(1)
need(r["mode"] == "topk" and r["errors"] == {} and r["ok"] > 0 and r["requests"] == r["ok"], "requests %s ok %s errors %s" % (r["requests"], r["ok"], r["errors"]))
need(r["queries"] == r["ok"] * r["queries_per_call"], "queries %s != ok x queries_per_call" % r["queries"])
need(r["queries_per_s"] > 0 and abs(r["queries_per_s"] - r["calls_per_s"] * r["queries_per_call"]) <= 1e-3 * r["queries_per_s"] + 0.01, "queries_per_s %s, calls_per_s %s" % (r["queries_per_s"], r["calls_per_s"]))
need(r["calls_per_s"] == r["requests_per_s"], "calls_per_s != requests_per_s")
need(r["recall_target"] == target, "recall_target %s" % r["recall_target"])
need(r["recall_queries"] > 0 and r["recall_queries"] % r["queries_per_call"] == 0, "recall_queries %s" % r["recall_queries"])
need(r["recall_measured"] >= target, "measured recall %s below the target %s" % (r["recall_measured"], target))
need(r["recall_expected"] >= target, "expected recall %s below the target %s" % (r["recall_expected"], target))
need(r["rows_scanned"] == 6000, "rows_scanned %s" % r["rows_scanned"])
lat = r["latency_ms"]
need(0 < lat["p50"] <= lat["p99"] <= lat["max"], "latency %s" % lat)
if "exact" in opts:
    need(r["bins"] == 0 and r["recall_measured"] == 1 and r["recall_expected"] == 1, "exact: bins %s, recall %s, expected %s" % (r["bins"], r["recall_measured"], r["recall_expected"]))
else:
    need(r["bins"] > 0, "approximate run with bins %s" % r["bins"])
for o in opts:
    if o.startswith("rate="):
        rate = float(o[5:])
        need(abs(r["requests_per_s"] - rate) <= 0.1 * rate, "open loop achieved %s calls/s of %s" % (r["requests_per_s"], rate))
if bad: print(sys.argv[1], "; ".join(bad)); sys.exit(1)
print("%s: ok (%s calls, %.0f queries/s, recall %.4f measured, %.4f expected, %d bins)" % (sys.argv[1], r["requests"], r["queries_per_s"], r["recall_measured"], r["recall_expected"], r["bins"]))
PY
lgcheck() { $py "$tmp/lgcheck.py" "$@" || fail=1; }
lg --k 10 --recall 0.95 --score dot --queries-per-call 64 --concurrency 2 --duration 1 --recall-sample 3 \
  --json "$tmp/lg-approx.json" >"$tmp/lg-approx.txt"
lgcheck "$tmp/lg-approx.json" 0.95
grep -q '^  throughput  .* calls/s, .* queries/s$' "$tmp/lg-approx.txt" && grep -q '^  recall      measured ' "$tmp/lg-approx.txt" ||
  { echo "text report:"; cat "$tmp/lg-approx.txt"; fail=1; }
# Exact: every sample agrees with itself (ties broken by id alike).
lg --k 5 --score l2 --queries-per-call 16 --requests 30 --recall-sample 2 --json "$tmp/lg-exact.json" >/dev/null
lgcheck "$tmp/lg-exact.json" 1 exact
# Open loop, cosine, bfloat16 queries, with the workload the cluster serves.
lg --workload "$workload" --k 20 --recall 0.9 --score cosine --query-format bfloat16 --queries-per-call 32 \
  --concurrency 2 --rate 20 --duration 1.5 --recall-sample 2 --json "$tmp/lg-open.json" >/dev/null
lgcheck "$tmp/lg-open.json" 0.9 rate=20

bad_lg() {
  local expect=$1 code=$2 rc=0 out
  shift 2
  out=$("$loadgen" --servers "$servers" --quiet "$@" 2>&1) || rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qF -- "$expect" <<<"$out"; then
    echo "scps-loadgen $*: exit $rc, '$out' (expected exit $code naming '$expect')"; fail=1
  fi
}
bad_lg "--table is required with --mode topk" 2 --mode topk
bad_lg "--k is for --mode topk only" 2 --workload "$workload" --mode lookup --k 5
bad_lg "--answer is not for --mode topk" 2 --mode topk --table a --answer rows
bad_lg "--recall '0'" 2 --mode topk --table a --recall 0
bad_lg "--recall '1.5'" 2 --mode topk --table a --recall 1.5
bad_lg "--score 'hamming'" 2 --mode topk --table a --score hamming
bad_lg "--queries-per-call '0'" 2 --mode topk --table a --queries-per-call 0
bad_lg "--recall-sample '-1'" 2 --mode topk --table a --recall-sample -1
bad_lg "--query-format 'e4m3/e5m2'" 2 --mode topk --table a --query-format e4m3/e5m2
bad_lg "--workload is required" 2 --mode lookup
bad_lg "--table 'zz': the servers serve no such table" 1 --mode topk --table zz
bad_lg "k 6001 not in [1, 6000]" 1 --mode topk --table a --k 6001
help=$("$loadgen" --help)
for f in table k score recall queries-per-call query-format recall-sample; do
  grep -q -- "--$f " <<<"$help" || { echo "scps-loadgen --help does not document --$f"; fail=1; }
done

[ "$fail" -eq 0 ] && echo "topk_tools.sh: all checks passed"
exit "$fail"
