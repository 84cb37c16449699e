"""A rolling restart of a 3-shard cluster in containers (issue 28, cluster
test 4): each shard in turn is restarted the way an operator does
(`docker-compose restart`, or `docker stop` then `docker-compose start`:
SIGTERM, SIGKILL only after the stack's stop_grace_period) and waited for
until its healthcheck (the standard gRPC health service) passes, before the
next.

test_rolling_lookup: under scps-loadgen --mode lookup (open loop, a few
clients, a deadline longer than a restart) no lookup fails; each shard exits
0 after its drain, saves the step it holds and restores it at start. One load
generator per shard, so its maximum latency is that restart's.

test_rolling_train: under scps-loadgen --mode train (one client, so its
steps are consecutive), every push acknowledged before a shard's drain is
present after its restart: the step the shard held just before the SIGTERM
<= the step N it saved at exit == the step it restored == the step every
other shard holds, and the acknowledged pushes (the load generator's
successes, consecutive steps from the one after the cluster's) end at or
before N. Its rows and accumulators equal its exit checkpoint bit for bit:
a shard's volume holds only its own part of each step, so `scps-admin
checkpoint export --process i` (run offline in a container mounting that
volume) writes the part's rows, NaN for the ids of the other shards; the
ids it holds (id i of a table lives on SparseCore (i mod C + rotation) mod
C, C = P x S, rotation from GetConfig) must be exactly the non-NaN rows, and
`scps-admin rows` reads each of them from the restarted shard.

The load generator of each train round ends while its shard is stopped,
before the new process starts: a push sent after the restart would be
refused by the new process (FAILED_PRECONDITION: its state_id changed, so a
client never mixes two states silently) but applied by the others, and the
shards would then hold different steps, which every later client (scps-admin
rows, the next load generator) refuses by design. So no push reaches a
restarted shard from a client of the process before; the requests that
failed while the shard was down (lookups that found no server within their
deadline, before any push) are reported by status. test_push_across_restart then lets a load generator go on
across a restart and counts the pushes the new process refuses; it leaves
the shards at different steps, so it runs last."""
import datetime
import json
import os
import re
import shutil
import tempfile
import threading
import time

import numpy as np

from scps_stack import GRPC_PORT, main

LOOKUP_RATE = 100          # open-loop lookups per second over all clients
LOOKUP_CLIENTS = 4
LOOKUP_DEADLINE_MS = 30000  # longer than a shard's restart: a lookup waits for it
TRAIN_DEADLINE_MS = 2000   # a train round's lookups fail while its shard is stopped
RUN_S = 600                # every load generator's --duration: it is stopped (SIGINT) long before
SETTLE_S = 2               # load before a restart and after the healthcheck passes
GRACE_S = 60               # the stack's stop_grace_period (deploy/compose/scps-compose)
SEED_STEPS = 50            # pushes before the lookup rounds, so each shard has a step to save and restore

SAVED = re.compile(r"saved step (\d+) to (\S+) before exiting, ([0-9.]+) s after the signal")
RESTORED = re.compile(r"restored step (\d+) from (\S+?):")
CLEAN = re.compile(r"every call finished [0-9.]+ s after the signal")
STOPPED = re.compile(r"process \d+ stopped ([0-9.]+) s after the signal")


class Loadgen:
    """scps-loadgen in a one-off container for RUN_S seconds unless stopped
    sooner, its report under a host directory; its progress lines (one a
    second) are read as they come."""

    def __init__(self, stack, out, name, *args):
        self.stack = stack
        self.report = os.path.join(out, name + ".json")
        self.lines = []
        self.p = stack.start("loadgen", *args, "--duration", str(RUN_S), "--json", "/out/%s.json" % name,
                             volumes=["%s:/out" % out])
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_measuring(self, timeout=120):
        """Until the first measured second is reported."""
        t0 = time.monotonic()
        while not any("req/s" in l and "warm-up" not in l for l in self.lines):
            if self.p.poll() is not None or time.monotonic() - t0 > timeout:
                raise RuntimeError("scps-loadgen did not start measuring: %s"
                                   % "\n".join(self.lines[-20:]))
            time.sleep(0.1)

    def finish(self, timeout=120):
        """Stops it (SIGINT: it ends the run and reports) and returns its exit
        status and report (None if it wrote none)."""
        for cid in self.stack.docker("ps", "-q", "--filter", "label=com.docker.compose.project=" + self.stack.project,
                                     "--filter", "label=com.docker.compose.service=loadgen").stdout.split():
            self.stack.docker("kill", "--signal", "INT", cid, check=False)
        rc = self.p.wait(timeout=timeout)
        self.reader.join(timeout=10)
        if not os.path.exists(self.report):
            print("\n".join(self.lines[-20:]))
            return rc, None
        with open(self.report) as f:
            return rc, json.load(f)

    def running(self):
        return self.p.poll() is None


def log_messages(stack, cid):
    """The messages of every JSON log line of a container, all its runs,
    oldest first."""
    r = stack.docker("logs", cid)
    out = []
    for line in r.stdout.splitlines():
        try:
            out.append(json.loads(line).get("msg", ""))
        except ValueError:
            pass
    return out


def state(stack, cid, fmt):
    return stack.docker("inspect", "-f", fmt, cid).stdout.strip()


def configs(stack):
    """GetConfig of every shard, in process-index order."""
    by = {c["server"]: c for c in stack.admin_json("config")}
    return [by["shard-%d:%d" % (i, GRPC_PORT)] for i in range(stack.shards)]


def step_of(cfg):
    return int(cfg["last_step"]) if "last_step" in cfg else -1


def docker_time(ts):
    """Docker's RFC 3339 UTC time (nanoseconds) as seconds since the epoch."""
    day, _, frac = ts.rstrip("Z").partition(".")
    return datetime.datetime.fromisoformat(day).replace(tzinfo=datetime.timezone.utc).timestamp() \
        + float("0." + (frac or "0"))


def restart(stack, i, while_stopped=None, before_stop=None):
    """Restarts shard i as an operator does and waits until its healthcheck
    passes: `docker-compose restart` (SIGTERM, SIGKILL only after the
    stop_grace_period, start), or with while_stopped `docker stop` (at once:
    no compose start-up between the caller's last look and the SIGTERM),
    that, then `docker-compose start`. Returns a dict: sigterm_to_exit_s (the
    process's own figure), exit_codes (Docker's die events),
    exit_to_healthy_s (from Docker's exit time), and the messages its drain
    and its new run logged. before_stop, if given, runs just before the
    SIGTERM."""
    svc = "shard-%d" % i
    cid = stack.container(svc)  # the same container across its restarts
    before = len(log_messages(stack, cid))
    since = int(time.time()) - 1
    if before_stop:
        before_stop()
    if while_stopped:
        stack.docker("stop", "--time", str(GRACE_S), cid)
        while_stopped()
        stack.compose("start", svc)
    else:
        stack.compose("restart", svc)
    t0 = time.monotonic()
    while state(stack, cid, "{{.State.Status}} {{.State.Health.Status}}") != "running healthy":
        if time.monotonic() - t0 > 180:
            raise RuntimeError("%s not healthy 180 s after its start" % svc)
        time.sleep(0.1)
    healthy = time.time()
    exited = docker_time(state(stack, cid, "{{.State.FinishedAt}}"))
    logs = log_messages(stack, cid)[before:]
    stopped = [m for m in map(STOPPED.search, logs) if m]
    died = stack.docker("events", "--since", str(since), "--until", str(int(time.time()) + 1), "--filter",
                        "container=" + cid, "--filter", "event=die", "--format",
                        "{{.Actor.Attributes.exitCode}}").stdout.split()
    return {"sigterm_to_exit_s": float(stopped[0].group(1)) if stopped else float("nan"),
            "exit_codes": died,
            "exit_to_healthy_s": healthy - exited, "logs": logs}


def check_drain_and_restore(stack, i, r):
    """Exit 0 after the drain, the step held saved, that step restored."""
    stack.check(r["exit_codes"] == ["0"], "shard-%d exits 0 after SIGTERM, once: %s" % (i, r["exit_codes"]))
    stack.check(any(CLEAN.search(m) for m in r["logs"]), "shard-%d's drain finished every call" % i)
    saved = [m for m in map(SAVED.search, r["logs"]) if m]
    restored = [m for m in map(RESTORED.search, r["logs"]) if m]
    stack.check(len(saved) == 1, "shard-%d logs one save at exit: %s" % (i, [m.group(0) for m in saved]))
    stack.check(len(restored) == 1 and saved and restored[0].group(1) == saved[0].group(1)
                and restored[0].group(2) == saved[0].group(2),
                "shard-%d restores at start the step it saved at exit: %s" % (i, [m.group(0) for m in restored]))
    return int(saved[0].group(1)) if saved else None


def errors_of(rep):
    return {k: v for k, v in (rep.get("errors") or {}).items() if v}


def test_rolling_lookup(stack):
    r = stack.run("loadgen", "--mode", "train", "--requests", str(SEED_STEPS), "--warmup", "0", "--quiet")
    stack.check(r.returncode == 0, "%d training pushes before the restarts (exit %d)" % (SEED_STEPS, r.returncode))
    out = tempfile.mkdtemp(prefix="scps-roll-")
    os.chmod(out, 0o777)
    failed = 0
    try:
        for i in range(stack.shards):
            lg = Loadgen(stack, out, "lookup-%d" % i, "--mode", "lookup", "--rate", str(LOOKUP_RATE), "--concurrency",
                         str(LOOKUP_CLIENTS), "--deadline-ms", str(LOOKUP_DEADLINE_MS), "--warmup", "1")
            lg.wait_measuring()
            time.sleep(SETTLE_S)
            held = step_of(configs(stack)[i])
            rs = restart(stack, i)
            stack.check(lg.running(), "shard-%d's round: the load generator ran throughout its restart" % i)
            time.sleep(SETTLE_S)
            rc, rep = lg.finish()
            stack.check(rc == 0 and rep is not None, "shard-%d's round: scps-loadgen exits %s with a report" % (i, rc))
            n = check_drain_and_restore(stack, i, rs)
            stack.check(n == held, "shard-%d saved and restored the step it held, %s (%s)" % (i, held, n))
            if rep is None:
                continue
            errs = errors_of(rep)
            failed += sum(errs.values())
            stack.check(not errs, "shard-%d's restart: %d lookups, none failed %s" % (i, rep["requests"], errs or ""))
            print("   ok shard-%d: SIGTERM to exit %.2f s, exit to healthy %.2f s, "
                  "lookups %d at %.0f/s, latency max %.1f ms p99 %.1f ms, failed %d"
                  % (i, rs["sigterm_to_exit_s"], rs["exit_to_healthy_s"], rep["requests"],
                     rep["requests_per_s"], rep["latency_ms"]["max"], rep["latency_ms"]["p99"],
                     sum(errs.values())), flush=True)
        stack.check(failed == 0, "rolling restart of %d shards under lookups: %d failed" % (stack.shards, failed))
    finally:
        shutil.rmtree(out, ignore_errors=True)


def ran(stack, r, what):
    """A failed command is a failed check, with the end of its output."""
    return r.returncode == 0 or stack.check(False, "%s: exit %d %s" % (what, r.returncode, r.stdout[-400:]))


def offline_admin(stack, volume, out, *args):
    """scps-admin in a one-off container of the scps image, on no network,
    with the volume read-only at /ckpt and the host directory out at /out."""
    image = os.environ.get("SCPS_TEST_IMAGE") or "scps:latest"
    return stack.docker("run", "--rm", "--network", "none", "--entrypoint", "scps-admin", "-v", "%s:/ckpt:ro" % volume,
                        "-v", "%s:/out" % out, image, *args, check=False)


def compare_rows(stack, i, step, out):
    """Shard i's rows and accumulators as it serves them against the part of
    its exit checkpoint of step on its volume, bit for bit: the number of
    ids compared. Nothing pushes meanwhile."""
    cfg = configs(stack)[i]
    topo = cfg["cluster"]["topology"]
    S, N = int(topo["sc_per_process"]), int(topo["num_processes"]) * int(topo["sc_per_process"])
    vocab = {t["name"]: int(t["vocabulary_size"]) for t in cfg["cluster"]["tables"]}
    volume = "%s_shard-%d" % (stack.project, i)
    compared = 0
    for st in cfg["stacks"]:
        for k, table in enumerate(st["tables"]):
            rot = int(st["rotations"][k]) if st.get("rotations") else 0
            ids = [x for x in range(vocab[table]) if i * S <= (x % N + rot) % N < (i + 1) * S]
            want = {}
            for what in ("row", "accumulator"):
                npy = "%s.%s.p%d.npy" % (table, what, i)
                r = offline_admin(stack, volume, out, "checkpoint", "export", "/ckpt/step-%012d" % step, "--process",
                                  str(i), "--table", table, *(["--slot", what] if what != "row" else []),
                                  "--out", "/out/" + npy)
                if not ran(stack, r, "export of shard-%d's part of step %d, table %s %s" % (i, step, table, what)):
                    return compared
                want[what] = np.load(os.path.join(out, npy))
            held = np.flatnonzero(~np.isnan(want["row"]).any(axis=1)).tolist()
            stack.check(held == ids, "the part's %s rows are the %d ids of shard-%d's SparseCores (%d)"
                        % (table, len(ids), i, len(held)))
            r = stack.admin("rows", "--servers", stack.servers, "--table", table, "--ids", ",".join(map(str, ids)),
                            "--json")
            if not ran(stack, r, "scps-admin rows of table %s" % table):
                return compared
            got = json.loads(r.stdout[r.stdout.index("{"):])["rows"]
            same = [x["id"] for x in got] == ids and all(
                np.asarray([x[what] for x in got], dtype="<f4").tobytes() == want[what][ids].tobytes()
                for what in ("row", "accumulator"))
            stack.check(same, "shard-%d's %d %s rows and accumulators equal its exit checkpoint's, bit for bit"
                        % (i, len(ids), table))
            compared += len(ids)
    return compared


def test_rolling_train(stack):
    out = tempfile.mkdtemp(prefix="scps-roll-")
    os.chmod(out, 0o777)
    try:
        for i in range(stack.shards):
            start = [step_of(c) for c in configs(stack)]
            stack.check(len(set(start)) == 1, "shard-%d's round starts with every shard at one step: %s" % (i, start))
            lg = Loadgen(stack, out, "train-%d" % i, "--mode", "train", "--concurrency", "1", "--warmup", "0",
                         "--deadline-ms", str(TRAIN_DEADLINE_MS))
            lg.wait_measuring()
            time.sleep(SETTLE_S)
            ended = {}

            def before_stop():
                ended["held"] = step_of(configs(stack)[i])

            def while_stopped():
                ended["running"] = lg.running()
                ended.update(zip(("rc", "rep"), lg.finish()))

            rs = restart(stack, i, while_stopped=while_stopped, before_stop=before_stop)
            held = ended["held"]
            stack.check(ended["running"], "shard-%d stopped while its round's load generator was running" % i)
            rep = ended.get("rep")
            stack.check(ended.get("rc") == 0 and rep is not None,
                        "shard-%d's round: scps-loadgen exits %s with a report" % (i, ended.get("rc")))
            n = check_drain_and_restore(stack, i, rs)
            after = [step_of(c) for c in configs(stack)]
            acked = rep["ok"] if rep else None
            stack.check(n is not None and held <= n, "shard-%d held step %d before SIGTERM, saved %s" % (i, held, n))
            stack.check(after == [n] * stack.shards,
                        "every shard holds step %s after shard-%d's restart: %s" % (n, i, after))
            stack.check(acked is not None and n is not None and start[0] + acked <= n,
                        "the %s pushes acknowledged (steps %d..%s) are all in step %s"
                        % (acked, start[0] + 1, start[0] + acked if acked is not None else "?", n))
            rows = compare_rows(stack, i, n, out) if n is not None else 0
            print("   ok shard-%d: held %d before SIGTERM, saved %s, restored %s; pushes acknowledged %s; "
                  "SIGTERM to exit %.2f s, exit to healthy %.2f s; rows and accumulators compared %d; "
                  "requests failed while it was down %s"
                  % (i, held, n, after[i], acked, rs["sigterm_to_exit_s"], rs["exit_to_healthy_s"], rows,
                     errors_of(rep) if rep else "?"), flush=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_push_across_restart(stack):
    """A training client that goes on across a shard's restart: every push
    after it is refused by the new process (FAILED_PRECONDITION), none is
    acknowledged, and none acknowledged before it is lost. The other shards
    apply the refused pushes, so the cluster is left at different steps:
    this test comes last."""
    out = tempfile.mkdtemp(prefix="scps-roll-")
    os.chmod(out, 0o777)
    try:
        start = [step_of(c) for c in configs(stack)]
        lg = Loadgen(stack, out, "across", "--mode", "train", "--concurrency", "1", "--warmup", "0", "--deadline-ms",
                     str(LOOKUP_DEADLINE_MS))
        lg.wait_measuring()
        time.sleep(SETTLE_S)
        rs = restart(stack, 0)
        stack.check(lg.running(), "the load generator went on across shard-0's restart")
        time.sleep(SETTLE_S)
        rc, rep = lg.finish()
        stack.check(rc == 0 and rep is not None, "scps-loadgen exits %s with a report" % rc)
        n = check_drain_and_restore(stack, 0, rs)
        after = [step_of(c) for c in configs(stack)]
        errs = errors_of(rep) if rep else {}
        refused = errs.pop("FAILED_PRECONDITION", 0)
        acked = rep["ok"] if rep else None
        stack.check(refused > 0 and not errs, "the pushes after the restart refused by it, FAILED_PRECONDITION: %d%s"
                    % (refused, ", other errors %s" % errs if errs else ""))
        stack.check(n is not None and after[0] == n and all(a > n for a in after[1:]),
                    "shard-0 holds the step it saved (%s), the others went on with the refused pushes: %s"
                    % (n, after))
        stack.check(acked is not None and n is not None and start[0] + acked <= n,
                    "the %s pushes acknowledged (steps %d..%s) are all in step %s"
                    % (acked, start[0] + 1, start[0] + acked if acked is not None else "?", n))
        print("   ok across shard-0's restart: pushes acknowledged %s, all before it (saved step %s); pushes "
              "refused after it (FAILED_PRECONDITION) %d, not lost: never acknowledged"
              % (acked, n, refused), flush=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    # The shards save at exit whenever SIGTERM comes (no minimum interval
    # after a timer's save).
    main("compose_rolling", [test_rolling_lookup, test_rolling_train, test_push_across_restart],
         server_env={"SCPS_CHECKPOINT_MIN_INTERVAL": "0"})
