"""A 3-shard cluster in containers (deploy/compose/scps-compose, TLS and
tokens as generated): scps-trainer in a container learns as on loopback
(held-out log-loss within 2% of the planted model), and a real Prometheus
server scraped every shard: up == 1, the metric families of
deploy/OPERATING.md are there for every shard, and rate() of the shards'
Lookups matches the load generator's own rate within 10%."""
import json
import os
import re
import tempfile
import time

from scps_stack import main

METRICS = ["scps_build_info", "scps_requests_total", "scps_request_duration_seconds_bucket",
           "scps_received_bytes_total", "scps_sent_bytes_total", "scps_pushes_applied_total", "scps_step",
           "scps_stack_ids_looked_up_total", "scps_stack_ids_dropped_total", "scps_sparsecore_memory_used_bytes",
           "scps_sparsecore_memory_capacity_bytes", "scps_stage_queue_depth", "scps_checkpoint_last_age_seconds",
           "scps_checkpoint_last_duration_seconds"]
RATE = 150      # the load generator's open-loop requests per second
RUN_S = 20      # its measured seconds


def test_trainer_learns(stack):
    r = stack.run("trainer", "--steps", "2000", timeout=900)
    print(r.stdout[-600:])
    stack.check(r.returncode == 0, "scps-trainer in a container exits 0 (%d)" % r.returncode)
    m = re.search(r"held-out log-loss ([0-9.]+) vs planted ([0-9.]+) \(([-+][0-9.]+)%\)", r.stdout)
    stack.check(m is not None, "the trainer reports its held-out log-loss")
    if m:
        stack.check(float(m.group(3)) <= 2.0, "held-out log-loss %s within 2%% of the planted %s (%s%%)"
                    % (m.group(1), m.group(2), m.group(3)))
    steps = [s.get("last_step") for s in stack.admin_json("config")]
    stack.check(steps == [1999] * stack.shards, "every shard holds step 1999 after training: %s" % steps)


def test_prometheus(stack):
    # every shard scraped; Prometheus needs a scrape or two after start
    deadline = time.monotonic() + 60
    while True:
        up = {r["metric"]["instance"]: r["value"][1] for r in stack.query('up{job="scps"}')}
        if (len(up) == stack.shards and all(v == "1" for v in up.values())) or time.monotonic() > deadline:
            break
        time.sleep(1)
    stack.check(sorted(up) == ["shard-%d:9464" % i for i in range(stack.shards)] and set(up.values()) == {"1"},
                "Prometheus scrapes every shard, up == 1: %s" % up)
    for name in METRICS:
        inst = {r["metric"]["instance"] for r in stack.query(name)}
        stack.check(len(inst) == stack.shards, "%s reported by all %d shards (%d)" % (name, stack.shards, len(inst)))
    saves = {r["metric"]["instance"]: float(r["value"][1]) for r in stack.query("scps_checkpoints_total")}
    stack.check(len(saves) == stack.shards and min(saves.values()) >= 1,
                "every shard saved checkpoints while the trainer ran (its timer): %s" % saves)
    cap = stack.query("sum(scps_sparsecore_memory_capacity_bytes)")
    stack.check(cap and float(cap[0]["value"][1]) == stack.shards * 2 * 64 * 2 ** 20,
                "SparseCore capacity summed over the cluster is 3 x 2 x 64 MiB: %s" % cap)

    # the load generator's rate against Prometheus's: each request is one
    # Lookup RPC on every shard
    out = tempfile.mkdtemp(prefix="scps-lg-")
    os.chmod(out, 0o777)
    lg = stack.start("loadgen", "--mode", "lookup", "--rate", str(RATE), "--concurrency", "4", "--warmup", "3",
                     "--duration", str(RUN_S), "--quiet", "--json", "/out/lg.json", volumes=["%s:/out" % out])
    time.sleep(3 + RUN_S * 0.75)
    window = int(RUN_S * 0.5)
    rates = {r["metric"]["instance"]: float(r["value"][1]) for r in stack.query(
        'sum by (instance) (rate(scps_requests_total{method="Lookup",code="OK"}[%ds]))' % window)}
    text, _ = lg.communicate(timeout=300)
    stack.check(lg.returncode == 0, "scps-loadgen exits 0 (%s)" % lg.returncode)
    with open(os.path.join(out, "lg.json")) as f:
        rep = json.load(f)
    lg_rate = rep["requests_per_s"]
    errors = sum(rep.get("errors", {}).values()) if isinstance(rep.get("errors"), dict) else rep.get("errors")
    stack.check(not errors, "no failed lookups: %s" % rep.get("errors"))
    stack.check(len(rates) == stack.shards, "a lookup rate for every shard: %s" % rates)
    for inst, v in sorted(rates.items()):
        stack.check(abs(v - lg_rate) <= 0.1 * lg_rate,
                    "%s: Prometheus rate() of Lookups %.1f/s, the load generator's %.1f/s (%+.1f%%)"
                    % (inst, v, lg_rate, 100 * (v - lg_rate) / lg_rate))


if __name__ == "__main__":
    # The trainer has the training role, which may not call Checkpoint: the
    # servers' timer saves alone (at common grid steps) once it expires
    # with no Checkpoint from a client, so a short period makes saves
    # during the run.
    main("compose_train", [test_trainer_learns, test_prometheus],
         server_env={"SCPS_CHECKPOINT_EVERY": "2"})
