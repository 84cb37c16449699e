"""scps-server --metrics-listen: a real server's /metrics, fetched over
HTTP with urllib and read with Debian's prometheus_client parser, before
and after scps-loadgen's Lookups and pushes: every family typed, counters
monotone, requests and latency histograms counting exactly the calls
made, memory gauges equal to Stats; 404 and 405 for anything but GET
/metrics; a bad --metrics-listen refused."""
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from scps_srvtest import main

TABLES = [
    {"name": "small", "vocabulary_size": 64, "embedding_dim": 8, "combiner": "sum",
     "optimizer": {"type": "sgd", "learning_rate": 0.1}, "initializer": {"type": "uniform", "scale": 0.1}},
    {"name": "wide", "vocabulary_size": 500, "embedding_dim": 16, "combiner": "mean",
     "optimizer": {"type": "adagrad", "learning_rate": 0.1, "initial_accumulator": 0.1},
     "initializer": {"type": "uniform", "scale": 0.1}},
]
FEATURES = [{"name": "a", "table": "small", "valency": 1}, {"name": "b", "table": "wide", "valency": 4}]

LOOKUPS = 23
PUSHES = 7


def metrics_port(srv, timeout=10):
    """The port the server logged for its metrics endpoint."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        m = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", srv.stderr())
        if m:
            return int(m.group(1))
        time.sleep(0.05)
    raise RuntimeError("no metrics port in the server's stderr:\n" + srv.stderr())


def fetch(port, path="/metrics", method="GET"):
    """(status, content type, body) of one HTTP request."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()


def scrape(env, port):
    """{family name: family} and {(sample name, sorted labels): value}."""
    status, ctype, body = fetch(port)
    env.check(status == 200, "GET /metrics: status %d" % status)
    env.check(ctype is not None and ctype.startswith("text/plain; version=0.0.4"),
              "GET /metrics: Content-Type %r, expected text/plain; version=0.0.4" % ctype)
    families = {f.name: f for f in text_string_to_metric_families(body)}
    typed = set(re.findall(r"^# TYPE (\S+) ", body, re.M))
    for f in families.values():
        env.check(f.type != "unknown" and f.name in typed or
                  (f.type == "counter" and f.name + "_total" in typed),
                  "family %s has no TYPE line (parsed as %s)" % (f.name, f.type))
    samples = {}
    for f in families.values():
        for s in f.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return families, samples, body


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


def loadgen(env, cfg, srv, mode, n):
    report = os.path.join(env.tmp, "report-%s.json" % mode)
    argv = [env.args.loadgen, "--workload", cfg, "--servers", srv.addr, "--mode", mode,
            "--requests", str(n), "--warmup", "0", "--quiet", "--json", report]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    env.check(r.returncode == 0, "scps-loadgen --mode %s: exit %d: %s" % (mode, r.returncode, r.stderr[-600:]))
    with open(report) as f:
        rep = json.load(f)
    env.check(not rep.get("errors"), "scps-loadgen --mode %s: errors %s" % (mode, rep.get("errors")))


def test_metrics(env):
    cfg = env.write_config("metrics", 32, TABLES, FEATURES)
    srv = env.server(cfg, extra=["--metrics-listen", "127.0.0.1:0"]).wait_ready()
    port = metrics_port(srv)
    fam0, s0, _ = scrape(env, port)
    env.check(value(s0, "scps_build_info", version=re.search(r"scps-server (\S+)", subprocess.run(
        [env.args.server, "--version"], capture_output=True, text=True).stdout).group(1)) == 1,
        "scps_build_info{version=<scps-server --version>} is not 1")
    env.check(value(s0, "scps_requests_total", method="Lookup", code="OK") == 0,
              "Lookup OK before any lookup: %s" % value(s0, "scps_requests_total", method="Lookup", code="OK"))

    loadgen(env, cfg, srv, "lookup", LOOKUPS)
    loadgen(env, cfg, srv, "train", PUSHES)  # one Lookup and one ApplyGradients each
    stats = srv.stub().Stats(env.pb.StatsRequest(), timeout=10)
    fam1, s1, body = scrape(env, port)

    # Counters never go down between two scrapes.
    down = [(k, s0[k], v) for k, v in s1.items() if k in s0 and fam_type(fam1, k[0]) in ("counter", "histogram")
            and v < s0[k]]
    env.check(not down, "counters that went down between two scrapes: %s" % down[:5])
    env.check(len(fam1) >= 25, "only %d families: %s" % (len(fam1), sorted(fam1)))

    lookups = LOOKUPS + PUSHES
    got = value(s1, "scps_requests_total", method="Lookup", code="OK")
    env.check(got == lookups, "scps_requests_total{method=Lookup,code=OK} %s, expected %d" % (got, lookups))
    got = value(s1, "scps_requests_total", method="ApplyGradients", code="OK")
    env.check(got == PUSHES, "scps_requests_total{method=ApplyGradients,code=OK} %s, expected %d" % (got, PUSHES))
    env.check(value(s1, "scps_pushes_applied_total") == PUSHES,
              "scps_pushes_applied_total %s, expected %d" % (value(s1, "scps_pushes_applied_total"), PUSHES))
    # scps-loadgen's first step is 0 on a server that holds none (-1).
    env.check(value(s0, "scps_step") == -1 and value(s1, "scps_step") == PUSHES - 1,
              "scps_step %s before and %s after %d pushes from step 0" %
              (value(s0, "scps_step"), value(s1, "scps_step"), PUSHES))

    # The Lookup latency histogram: cumulative buckets ending at +Inf, _count
    # equal to +Inf and to the number of lookups, a positive _sum.
    buckets = sorted(((float(dict(k[1])["le"]), v) for k, v in s1.items()
                      if k[0] == "scps_request_duration_seconds_bucket" and dict(k[1])["method"] == "Lookup"))
    env.check(len(buckets) >= 10 and buckets[-1][0] == float("inf"), "Lookup buckets: %s" % buckets)
    env.check(all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), "Lookup buckets not cumulative: %s" % buckets)
    count = value(s1, "scps_request_duration_seconds_count", method="Lookup")
    env.check(count == lookups and buckets[-1][1] == lookups,
              "Lookup histogram: _count %s, +Inf %s, expected %d" % (count, buckets[-1][1], lookups))
    env.check(value(s1, "scps_request_duration_seconds_sum", method="Lookup") > 0, "Lookup _sum not positive")
    env.check(fam1["scps_request_duration_seconds"].type == "histogram", "scps_request_duration_seconds not a histogram")

    # Bytes and the stacks' counters match Stats (no call ran between).
    by_method = {m.method: m for m in stats.methods}
    for m in ("Lookup", "ApplyGradients"):
        for name, field in (("scps_received_bytes_total", "bytes_received"), ("scps_sent_bytes_total", "bytes_sent")):
            got = value(s1, name, method=m)
            want = getattr(by_method[m], field)
            env.check(got == want and want > 0, "%s{method=%s} %s, Stats says %s" % (name, m, got, want))
    for st in stats.stacks:
        got = value(s1, "scps_stack_ids_looked_up_total", stack=st.stack)
        env.check(got == st.ids_looked_up and got > 0, "ids looked up of %s: %s, Stats %s" %
                  (st.stack, got, st.ids_looked_up))
        got = value(s1, "scps_stack_partition_ids_limit", stack=st.stack)
        env.check(got == st.max_ids_limit, "ids limit of %s: %s, Stats %s" % (st.stack, got, st.max_ids_limit))
        env.check(value(s1, "scps_stack_ids_dropped_total", stack=st.stack) == 0, "ids dropped of %s" % st.stack)
    for sc in stats.sparse_cores:
        lab = str(sc.sparse_core)
        for name, want in (("scps_sparsecore_memory_used_bytes", sc.memory_used_bytes),
                           ("scps_sparsecore_memory_capacity_bytes", sc.memory_capacity_bytes)):
            got = value(s1, name, sparse_core=lab)
            env.check(got == want and want > 0, "%s{sparse_core=%s} %s, Stats %s" % (name, lab, got, want))
    env.check(value(s1, "scps_memory_budget_bytes") == stats.memory.budget_bytes > 0,
              "scps_memory_budget_bytes %s, Stats %s" % (value(s1, "scps_memory_budget_bytes"),
                                                        stats.memory.budget_bytes))
    # scps-loadgen ran on this host: its lookups and pushes by sample came
    # through shared memory; it has exited, which detached its segments.
    env.check(0 < value(s1, "scps_shm_calls_total") <= lookups + PUSHES and value(s1, "scps_shm_segments") == 0 and
              value(s1, "scps_shm_mapped_bytes") == 0,
              "shared memory: %s calls, %s segments, %s bytes" % (value(s1, "scps_shm_calls_total"),
                                                                 value(s1, "scps_shm_segments"),
                                                                 value(s1, "scps_shm_mapped_bytes")))
    stages = {dict(k[1])["stage"] for k in s1 if k[0] == "scps_stage_queue_depth"}
    env.check({"sc0", "sc1", "tc"} <= stages, "stage queue depths for %s" % sorted(stages))

    # Anything but GET /metrics.
    for path, method, want in (("/", "GET", 404), ("/metricsx", "GET", 404), ("/metrics/", "GET", 404),
                               ("/metrics", "POST", 405), ("/metrics", "DELETE", 405)):
        status, _, _ = fetch(port, path, method)
        env.check(status == want, "%s %s: status %d, expected %d" % (method, path, status, want))
    print("   ok %d families; %d lookups, %d pushes counted; 404/405 elsewhere" % (len(fam1), lookups, PUSHES),
          flush=True)


def fam_type(families, sample_name):
    for suffix in ("", "_total", "_bucket", "_count", "_sum", "_created"):
        if suffix and sample_name.endswith(suffix):
            base = sample_name[:-len(suffix)]
            if base in families:
                return families[base].type
    return families[sample_name].type if sample_name in families else None


def test_metrics_listen_errors(env):
    cfg = env.write_config("metrics-bad", 32, TABLES, FEATURES)
    for bad in ("127.0.0.1:99999", "127.0.0.1:", "host:port", ""):
        r = subprocess.run([env.args.server, "--config", cfg, "--metrics-listen", bad], capture_output=True,
                           text=True, timeout=30)
        env.check(r.returncode == 2 and "--metrics-listen" in r.stderr,
                  "--metrics-listen %r: exit %d, stderr %r" % (bad, r.returncode, r.stderr[-300:]))
    # A port already taken: the server refuses to start, naming the flag.
    first = env.server(cfg, extra=["--metrics-listen", "0"]).wait_ready()
    taken = metrics_port(first)
    srv = env.server(cfg, extra=["--metrics-listen", "127.0.0.1:%d" % taken])
    rc = srv.wait(30)
    env.check(rc == 1 and "--metrics-listen" in srv.stderr(),
              "metrics port in use: exit %s, stderr %r" % (rc, srv.stderr()[-300:]))


if __name__ == "__main__":
    main("test_metrics", [test_metrics, test_metrics_listen_errors])
