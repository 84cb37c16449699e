"""Steps across a cluster, through Debian's stock grpcio: steps that would
poison the step held (2^63-1, a jump past --max-step-advance) are refused
and change nothing; ListCheckpoints and Restore (bad requests, a damaged
part refused with nothing changed, processes with roots of their own);
a process restarted on a root of its own restores its own part;
the timer's solo saves of two processes under scps-loadgen --mode train
with 4 clients meet on common steps; SIGTERM under that load leaves both
processes on one step after a restart, and so does one of two with roots
of their own; scps-trainer against a server
holding step 2^53-1 refuses rather than overflowing."""
import os
import re
import signal
import subprocess
import time

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
    srv = env.server(cfg, extra=["--checkpoint-dir", root, "--checkpoint-min-interval", "0"]).wait_ready()
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


def list_parts(cl, p):
    req = cl.pb.ListCheckpointsRequest(config_fingerprint=cl.fingerprint, process_index=p)
    return cl.stubs[p].ListCheckpoints(req, timeout=30)


def restore(cl, p, step, verify_only=False, fingerprint=None):
    req = cl.pb.RestoreRequest(config_fingerprint=cl.fingerprint if fingerprint is None else fingerprint,
                               process_index=p, step=step, verify_only=verify_only)
    return call_status(cl.stubs[p].Restore, req, timeout=60)


def train(cl, steps):
    rng = np.random.default_rng(steps[0])
    for s in steps:
        ids = rng.integers(0, TABLES[0]["vocabulary_size"], size=(BATCH, 2))
        batch = {"fa": [[(int(i), 1.0) for i in row] for row in ids]}
        cl.apply(batch, {"fa": rng.standard_normal((BATCH, 8))}, step=s)


def save(cl, step):
    for p in range(cl.P):
        req = cl.pb.CheckpointRequest(config_fingerprint=cl.fingerprint, process_index=p, step=step)
        cl.stubs[p].Checkpoint(req, timeout=60)


def test_restore_rpc(env):
    """Two processes, each with a checkpoint root of its own."""
    pb = env.pb
    cfg = env.write_config("restore", BATCH, TABLES, FEATURES)
    roots = [os.path.join(env.tmp, "own-root-%d" % p) for p in range(2)]
    srvs = [env.server(cfg, index=p, num_processes=2,
                       extra=["--checkpoint-dir", roots[p], "--checkpoint-min-interval", "0"]).wait_ready()
            for p in range(2)]
    cl = Cluster(env, srvs)
    lst = list_parts(cl, 0)
    env.check(len(lst.parts) == 0 and len(lst.skipped) == 0, "no checkpoint yet: nothing listed %s" % lst)
    train(cl, range(0, 4))
    save(cl, 3)
    at3 = rows(cl)
    train(cl, range(4, 8))
    save(cl, 7)
    at7 = rows(cl)
    for p in range(2):
        lst = list_parts(cl, p)
        env.check([x.step for x in lst.parts] == [7, 3] and not any(x.complete for x in lst.parts)
                  and all(x.bytes > 0 and x.path.startswith(roots[p]) for x in lst.parts),
                  "process %d lists its own parts of steps 7 and 3, not complete (own roots): %s" % (p, lst))
    cases = [
        ("an unknown step", 5, None, "NOT_FOUND", ["holds no part", "step-000000000005"]),
        ("step 2^53", STEP_LIMIT, None, "INVALID_ARGUMENT", ["2^53"]),
        ("another fingerprint", 3, b"\0" * 32, "FAILED_PRECONDITION", ["fingerprint"]),
    ]
    for what, step, fp, code, needles in cases:
        got, details, _ = restore(cl, 0, step, fingerprint=fp)
        env.check(got == code and all(n in details for n in needles), "Restore of %s: %s %r" % (what, got, details))
    # One flipped byte in process 1's data file of step 3: verify and load
    # refuse it, naming the file, and nothing changes.
    step_dir = os.path.join(roots[1], "step-%012d" % 3)
    data = next(f for f in sorted(os.listdir(step_dir)) if f.endswith(".bin"))
    path = os.path.join(step_dir, data)
    with open(path, "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0x10]))
    for verify_only in (True, False):
        got, details, _ = restore(cl, 1, 3, verify_only)
        env.check(got == "DATA_LOSS" and data in details, "Restore (verify_only %s) of a flipped byte: %s %r"
                  % (verify_only, got, details))
    env.check(held(cl.stubs[1], pb) == 7 and np.array_equal(rows(cl), at7),
              "the refused Restore left process 1 at step 7 with its rows")
    with open(path, "r+b") as f:
        f.seek(100)
        f.write(b)
    # scps-admin restores both to step 3 from their own roots.
    ids = [st.GetConfig(pb.GetConfigRequest(), timeout=30).state_id for st in cl.stubs]
    env.check(all(ids), "GetConfig names each process's state: %s" % ids)
    servers = ",".join(s.addr for s in srvs)
    r = subprocess.run([tool(env, "scps-admin"), "checkpoint", "restore", "--servers", servers, "--step", "3"],
                       capture_output=True, text=True, timeout=120)
    env.check(r.returncode == 0 and "every process holds step 3" in r.stdout,
              "scps-admin checkpoint restore --step 3: exit %d\n%s%s" % (r.returncode, r.stdout, r.stderr))
    env.check(held(cl.stubs[0], pb) == 3 and held(cl.stubs[1], pb) == 3 and np.array_equal(rows(cl), at3),
              "after the restore both hold step 3 with its rows")
    now = [st.GetConfig(pb.GetConfigRequest(), timeout=30).state_id for st in cl.stubs]
    env.check(all(now) and all(a != b for a, b in zip(ids, now)), "the restore named new states: %s -> %s"
              % (ids, now))
    req = pb.ApplyGradientsRequest(config_fingerprint=cl.fingerprint, process_index=0, step=4, state_id=ids[0])
    got, details, _ = call_status(cl.stubs[0].ApplyGradients, req, timeout=30)
    env.check(got == "FAILED_PRECONDITION" and "no longer holds the state" in details and held(cl.stubs[0], pb) == 3,
              "a push naming the state before the restore: %s %r" % (got, details))
    req.state_id = now[0]
    got, details, _ = call_status(cl.stubs[0].ApplyGradients, req, timeout=30)
    env.check(got == "OK" and held(cl.stubs[0], pb) == 4, "a push naming the current state: %s %r" % (got, details))
    req.step, req.process_index, req.state_id = 4, 1, 0
    got, details, _ = call_status(cl.stubs[1].ApplyGradients, req, timeout=30)
    env.check(got == "OK", "a push naming no state (a client that does not check): %s %r" % (got, details))
    # The newest common step when the processes differ: process 0 saves 9
    # alone.
    train(cl, range(4, 10))
    req = pb.CheckpointRequest(config_fingerprint=cl.fingerprint, process_index=0, step=9)
    cl.stubs[0].Checkpoint(req, timeout=60)
    r = subprocess.run([tool(env, "scps-admin"), "checkpoint", "restore", "--servers", servers],
                       capture_output=True, text=True, timeout=120)
    env.check(r.returncode == 0 and "restoring step 7" in r.stdout and "every process holds step 7" in r.stdout,
              "scps-admin checkpoint restore (newest common: 7): exit %d\n%s%s" % (r.returncode, r.stdout, r.stderr))
    env.check(np.array_equal(rows(cl), at7), "after the restore to step 7 the rows are step 7's")
    r = subprocess.run([tool(env, "scps-admin"), "checkpoint", "restore", "--servers", servers, "--step", "9"],
                       capture_output=True, text=True, timeout=120)
    env.check(r.returncode == 1 and "process 1" in r.stderr and "no checkpoint part" in r.stderr,
              "--step 9, which process 1 lacks: exit %d\n%s%s" % (r.returncode, r.stdout, r.stderr))
    parts0 = [x.step for x in list_parts(cl, 0).parts]
    env.check(parts0 == [9, 7, 3], "retention keeps 3 parts in a root of process 0's own (as 3 complete "
              "checkpoints in a shared one): %s" % parts0)
    # A crash and a restart of each process: it restores the newest part in
    # its own root (process 0: 9, process 1: 7); the cluster then holds two
    # steps until scps-admin brings it to one.
    for p, want in ((1, 7), (0, 9)):
        srvs[p].kill()
        srvs[p] = env.server(cfg, index=p, num_processes=2,
                             extra=["--checkpoint-dir", roots[p], "--checkpoint-min-interval", "0"]).wait_ready()
        log = srvs[p].stderr()
        env.check(held(srvs[p].stub(), pb) == want and ("restored step %d from %s/step-%012d" % (want, roots[p], want))
                  in log, "process %d after a crash restores its own newest part, step %d: held %s\n%s"
                  % (p, want, held(srvs[p].stub(), pb), log[-600:]))
    cl = Cluster(env, srvs)
    servers = ",".join(s.addr for s in srvs)
    r = subprocess.run([tool(env, "scps-admin"), "checkpoint", "restore", "--servers", servers],
                       capture_output=True, text=True, timeout=120)
    env.check(r.returncode == 0 and "every process holds step 7" in r.stdout and np.array_equal(rows(cl), at7),
              "scps-admin checkpoint restore brings the restarted processes to step 7 with its rows: exit %d\n%s%s"
              % (r.returncode, r.stdout, r.stderr))
    print("   ok ListCheckpoints, Restore and scps-admin checkpoint restore with roots of their own", flush=True)


def loadgen(env, cfg, servers, duration):
    argv = [env.args.loadgen, "--workload", cfg, "--servers", ",".join(s.addr for s in servers), "--mode", "train",
            "--concurrency", "4", "--duration", str(duration), "--warmup", "0", "--quiet", "--deadline-ms", "3000"]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def complete_steps(env, root):
    r = subprocess.run([tool(env, "scps-admin"), "checkpoint", "list", root], capture_output=True, text=True,
                       timeout=60)
    return [int(m.group(1)) for m in re.finditer(r"^(\d+)\s+complete", r.stdout, re.M)], r.stdout


def test_timer_converges(env):
    cfg = env.write_config("timer", BATCH, TABLES, FEATURES)
    root = os.path.join(env.tmp, "timer-root")
    srvs = [env.server(cfg, index=p, num_processes=2,
                       extra=["--checkpoint-dir", root, "--checkpoint-min-interval", "0", "--checkpoint-every", "1",
                              "--checkpoint-grid", "20", "--checkpoint-keep", "20"]).wait_ready() for p in range(2)]
    lg = loadgen(env, cfg, srvs, 7)
    out, err = lg.communicate(timeout=120)
    env.check(lg.returncode == 0, "scps-loadgen --mode train: exit %d %s" % (lg.returncode, err[-500:]))
    # Before any SIGTERM (whose saves would be complete anyway).
    steps, listing = complete_steps(env, root)
    solo = [len(re.findall("saved alone", s.stderr())) for s in srvs]
    env.check(len(steps) >= 2 and all(s % 20 == 0 for s in steps),
              "complete checkpoints of the timer's saves under 4 concurrent clients, on the grid of 20: %s\n%s"
              % (steps, listing))
    if env.check(min(solo) >= 2, "each process logs its solo saves: %s" % solo) and len(steps) >= 2:
        print("   ok solo saves of 2 processes meet: complete steps %s (%s solo saves each)" % (steps, solo),
              flush=True)


def test_sigterm_under_load(env):
    pb = env.pb
    cfg = env.write_config("stop", BATCH, TABLES, FEATURES)
    root = os.path.join(env.tmp, "stop-root")
    srvs = [env.server(cfg, index=p, num_processes=2, extra=["--checkpoint-dir", root, "--checkpoint-min-interval", "0"]).wait_ready()
            for p in range(2)]
    lg = loadgen(env, cfg, srvs, 60)
    time.sleep(3)
    for s in srvs:
        s.send_signal(signal.SIGTERM)
    codes = [s.wait(60) for s in srvs]
    lg.kill()
    lg.communicate(timeout=120)
    env.check(codes == [0, 0], "exit status after SIGTERM under train load: %s" % codes)
    saved = [re.search(r"saved step (\d+) to \S+ before exiting", s.stderr()) for s in srvs]
    env.check(all(saved), "each process logs its save at exit: %s" % [s.stderr()[-800:] for s in srvs])
    again = [env.server(cfg, index=p, num_processes=2, extra=["--checkpoint-dir", root, "--checkpoint-min-interval", "0"]).wait_ready()
             for p in range(2)]
    steps = [held(s.stub(), pb) for s in again]
    want = int(saved[0].group(1)) if saved[0] else None
    env.check(steps[0] is not None and steps[0] == steps[1] == want,
              "after the restart both processes hold the step saved at exit (%s): %s" % (want, steps))
    print("   ok SIGTERM under 4 training clients: both saved and restored step %s" % steps[0], flush=True)


def test_sigterm_own_roots(env):
    """Processes with checkpoint roots of their own (containers' volumes):
    SIGTERM of one under training load saves its part; started again, it
    restores that part, at the step the other holds, and training resumes."""
    pb = env.pb
    cfg = env.write_config("own", BATCH, TABLES, FEATURES)
    roots = [os.path.join(env.tmp, "sigterm-own-%d" % p) for p in range(2)]

    def start(p):
        return env.server(cfg, index=p, num_processes=2,
                          extra=["--checkpoint-dir", roots[p], "--checkpoint-min-interval", "0"]).wait_ready()

    srvs = [start(p) for p in range(2)]
    lg = loadgen(env, cfg, srvs, 60)
    time.sleep(3)
    srvs[1].send_signal(signal.SIGTERM)
    code = srvs[1].wait(60)
    # Ended before the restart: a push after it would reach process 0 only.
    lg.kill()
    lg.communicate(timeout=120)
    saved = re.search(r"saved step (\d+) to \S+ before exiting", srvs[1].stderr())
    env.check(code == 0 and saved, "process 1 exits 0 and saves its part: %s" % srvs[1].stderr()[-800:])
    again = start(1)
    want = int(saved.group(1)) if saved else None
    steps = [held(srvs[0].stub(), pb), held(again.stub(), pb)]
    env.check(steps == [want, want], "after the restart both processes hold the step process 1 saved (%s): %s"
              % (want, steps))
    env.check(re.search(r"restored step %s from \S*sigterm-own-1/step-" % want, again.stderr()) is not None,
              "process 1 restores its part from its own root: %s" % again.stderr()[-600:])
    lg = loadgen(env, cfg, [srvs[0], again], 2)
    out, err = lg.communicate(timeout=120)
    env.check(lg.returncode == 0, "training resumes on both: exit %d %s" % (lg.returncode, err[-400:]))
    print("   ok SIGTERM of one of two processes with roots of their own: it restored its part of step %s"
          % want, flush=True)


if __name__ == "__main__":
    main("test_cluster_steps", [test_step_poisoning, test_restore_rpc, test_timer_converges, test_sigterm_under_load,
                                test_sigterm_own_roots])
