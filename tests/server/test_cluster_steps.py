"""Steps across a cluster, through Debian's stock grpcio: steps that would
poison the step held (2^63-1, a jump past --max-step-advance) are refused
and change nothing; scps-trainer against a server
holding step 2^53-1 refuses rather than overflowing."""
import os
import subprocess

import numpy as np

from scps_srvtest import Cluster, call_status, main

BATCH = 16
TABLES = [
    {"name": "a", "vocabulary_size": 400, "embedding_dim": 8, "combiner": "sum",
     "optimizer": {"type": "adagrad", "learning_rate": 0.1}, "initializer": {"type": "uniform", "scale": 0.5}},
]
FEATURES = [{"name": "fa", "table": "a", "valency": 2}]
STEP_LIMIT = 1 << 53


def tool(env, name):
    """scps-admin and scps-trainer sit beside scps-loadgen in the build."""
    return os.path.join(os.path.dirname(os.path.abspath(env.args.loadgen)), name)


def held(stub, pb):
    g = stub.GetConfig(pb.GetConfigRequest(), timeout=30)
    return g.last_step if g.HasField("last_step") else None


def push(cl, p, step):
    """An ApplyGradients with no stacks: it changes only the step held."""
    req = cl.pb.ApplyGradientsRequest(config_fingerprint=cl.fingerprint, process_index=p, step=step)
    return call_status(cl.stubs[p].ApplyGradients, req, timeout=30)


def applies(cl):
    st = cl.stubs[0].Stats(cl.pb.StatsRequest(), timeout=30)
    return next(m.calls for m in st.methods if m.method == "ApplyGradients")


def rows(cl):
    return cl.read_rows("a", list(range(TABLES[0]["vocabulary_size"])))


def test_step_poisoning(env):
    pb = env.pb
    cfg = env.write_config("poison", BATCH, TABLES, FEATURES)
    root = os.path.join(env.tmp, "poison-root")
    srv = env.server(cfg, extra=["--checkpoint-dir", root]).wait_ready()
    cl = Cluster(env, [srv])
    before = rows(cl)
    cases = [
        (2 ** 63 - 1, "INVALID_ARGUMENT", ["step 9223372036854775807", "2^53"]),
        (STEP_LIMIT, "INVALID_ARGUMENT", ["step %d" % STEP_LIMIT, "2^53"]),
        (1000001, "FAILED_PRECONDITION", ["step 1000001", "holds no step", "--max-step-advance 1000000"]),
    ]
    for step, code, needles in cases:
        got, details, _ = push(cl, 0, step)
        env.check(got == code and all(n in details for n in needles),
                  "push of step %d to a server holding none: %s %r" % (step, got, details))
        env.check(held(cl.stubs[0], pb) is None, "after the refused push of step %d the server holds no step" % step)
    got, details, _ = push(cl, 0, 1000000)
    env.check(got == "OK" and held(cl.stubs[0], pb) == 1000000, "a first step of --max-step-advance: %s %r" % (got, details))
    got, details, _ = push(cl, 0, 2000001)
    env.check(got == "FAILED_PRECONDITION" and "step 2000001" in details and "holds, 1000000" in details
              and "--max-step-advance 1000000" in details, "a jump past the advance: %s %r" % (got, details))
    got, _, _ = push(cl, 0, 5)
    env.check(got == "OK" and held(cl.stubs[0], pb) == 1000000,
              "a lower step (another trainer's) is applied and leaves the step held: %s" % got)
    req = pb.CheckpointRequest(config_fingerprint=cl.fingerprint, step=2 ** 62)
    got, details, _ = call_status(cl.stubs[0].Checkpoint, req, timeout=30)
    env.check(got == "INVALID_ARGUMENT" and "2^53" in details, "Checkpoint of step 2^62: %s %r" % (got, details))
    req = pb.CheckpointRequest(config_fingerprint=cl.fingerprint, step=3000000)
    got, details, _ = call_status(cl.stubs[0].Checkpoint, req, timeout=30)
    env.check(got == "FAILED_PRECONDITION" and "--max-step-advance" in details,
              "Checkpoint of a step past the advance: %s %r" % (got, details))
    env.check(not os.path.exists(root), "no checkpoint was written for the refused steps")
    env.check(np.array_equal(rows(cl), before), "the refused pushes left the rows as they were")
    print("   ok steps 2^63-1, 2^53 and past --max-step-advance refused; the step held unchanged", flush=True)
    srv.stop()
    # A server started with a larger advance holds 2^53 - 1: scps-trainer
    # must refuse to go on (a step past 2^53) instead of overflowing.
    demo = os.path.join(os.path.dirname(os.path.abspath(env.args.proto)), "..", "deploy", "workloads", "ctr-demo.json")
    big = env.server(demo, sc_per_process=4, extra=["--max-step-advance", str(STEP_LIMIT), "--sc-memory", "512M"])
    big.wait_ready()
    cl = Cluster(env, [big])
    got, details, _ = push(cl, 0, STEP_LIMIT - 1)
    env.check(got == "OK", "push of step 2^53-1 with --max-step-advance 2^53: %s %r" % (got, details))
    pushes = applies(cl)
    r = subprocess.run([tool(env, "scps-trainer"), "--servers", big.addr, "--workload", demo, "--steps", "3"],
                       capture_output=True, text=True, timeout=120)
    ok = env.check(r.returncode == 1 and "2^53" in r.stderr and "runtime error" not in r.stderr,
                   "scps-trainer at step 2^53-1: exit %d, %r" % (r.returncode, r.stderr[-600:]))
    if env.check(applies(cl) == pushes, "scps-trainer refused before pushing a step past 2^53") and ok:
        print("   ok scps-trainer at step 2^53-1: %s" % r.stderr.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main("test_cluster_steps", [test_step_poisoning])
