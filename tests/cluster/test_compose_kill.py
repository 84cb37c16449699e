"""A shard killed mid-training in a 3-shard cluster of containers
(deploy/compose/scps-compose), as issue 28's cluster test 2 asks:

- `docker kill` of shard-1 while scps-trainer (in a container, checkpoints
  every K steps, deadline D) trains: the trainer fails with UNAVAILABLE
  within D and does not hang;
- the container started again restores the newest checkpoint part on its
  volume (its log and GetConfig say which step), a trainer refuses the
  cluster if the other shards hold a later step, `scps-admin checkpoint restore`
  brings all three to that step, and every row and optimizer slot of every
  table then equals that checkpoint, exported offline from the three
  volumes (float32 bit patterns);
- a trainer started again resumes at the step after it and learns;
- a crash (SIGKILL of the shard's process from the host, which Docker's
  restart policy restarts, unlike docker kill) while the cluster is idle:
  the container comes back by itself, healthy, restores the step every
  shard holds, and the cluster serves exactly that checkpoint's tables with
  no `checkpoint restore`.

The servers hold the embeddings only: the trainer's dense layers are its own
and start afresh when it is started again, so the held-out loss after the
resume is held to a looser bound than test 1's."""
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

import numpy as np

from scps_stack import main

SHARD = "shard-1"
PROCESS = 1
EVERY = 200             # the trainer's --checkpoint-every-steps
DEADLINE_MS = 5000      # the trainer's --deadline-ms
LOG_MARGIN_S = 2        # a call begun just after the kill (pipelined), and the line's way out through docker's log
EXIT_MARGIN_S = 15      # compose's own start and teardown of the run container around the trainer
TOTAL_STEPS = 2000      # steps the cluster holds after the resumed run, as test 1 trains
LOSS_WITHIN_PCT = 5.0   # held-out log-loss after the resume, vs the planted model's

# Set by the tests in order: the step every shard holds a checkpoint of.
state = {}


class Trainer:
    """scps-trainer in a one-off container, with the admin token (Checkpoint
    needs the admin role), its output lines read as they come, each with the
    monotonic time it arrived."""

    def __init__(self, stack, *args):
        token = os.path.join(stack.dir, "secrets", "admin.token")
        self.p = stack.start("trainer", *args, "--checkpoint-every-steps", str(EVERY), "--deadline-ms",
                             str(DEADLINE_MS), "--token-file", "/etc/scps/admin.token",
                             volumes=["%s:/etc/scps/admin.token:ro" % token])
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def saved(self):
        """Steps whose checkpoint the trainer reported saved."""
        return [int(m.group(1)) for _, l in list(self.lines)
                for m in [re.search(r"checkpoint of step (\d+) saved", l)] if m]

    def first(self, pattern):
        """(time, line) of the first output line matching pattern, or None."""
        return next(((t, l) for t, l in list(self.lines) if re.search(pattern, l)), None)

    def wait(self, timeout):
        """The exit status, or None when it has not exited within timeout
        seconds (its docker-compose client is killed then; the container
        goes with the stack)."""
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return None
        self.reader.join(10)
        return rc

    def text(self):
        return "\n".join(l for _, l in self.lines)


def newest_part(root, process):
    """The newest step under a copied checkpoint root whose part of this
    process is complete: its manifest is written last, after its data files."""
    steps = [int(d[5:]) for d in os.listdir(root) if re.fullmatch(r"step-\d{12,18}", d)
             and os.path.exists(os.path.join(root, d, "manifest.p%d.json" % process))]
    return max(steps) if steps else None


def restored_step(stack, service):
    """The step the service's latest start restored (its JSON log line), or
    None when it started from the initializers."""
    starts = [o for o in stack.log_json(service) if o.get("msg", "").startswith(("restored step ",
                                                                                 "no complete checkpoint"))]
    return starts[-1].get("step") if starts else None


def held_steps(stack):
    return [s.get("last_step") for s in stack.admin_json("config")]


def export_checkpoint(stack, step, wanted):
    """Arrays of the checkpoint of step as scps-admin checkpoint export
    writes them offline from the shards' parts, copied from their volumes
    into one step directory: wanted lists (table, slot name or None for the
    rows)."""
    work = tempfile.mkdtemp(prefix="scps-kill-")
    try:
        name = "step-%012d" % step
        ck, out = os.path.join(work, "ck"), os.path.join(work, "out")
        os.makedirs(os.path.join(ck, name))
        os.makedirs(out)
        os.chmod(out, 0o777)  # the one-off container writes as uid 10001
        for i in range(stack.shards):
            part = os.path.join(work, "p%d" % i)
            os.makedirs(part)
            stack.copy_from("shard-%d" % i, "/var/lib/scps/" + name, part)
            for f in os.listdir(os.path.join(part, name)):
                dst = os.path.join(ck, name, f)
                shutil.move(os.path.join(part, name, f), dst)
                os.chmod(dst, 0o644)
        os.chmod(ck, 0o755)
        os.chmod(os.path.join(ck, name), 0o755)
        got = {}
        for table, slot in wanted:
            npy = "%s.%s.npy" % (table, slot or "rows")
            r = stack.run("admin", "checkpoint", "export", "/ck/" + name, "--table", table, "--out", "/out/" + npy,
                          *(["--slot", slot] if slot else []), volumes=["%s:/ck:ro" % ck, "%s:/out" % out])
            if r.returncode != 0:
                raise RuntimeError("checkpoint export %s: %s" % (npy, r.stdout))
            got[table, slot] = np.load(os.path.join(out, npy))
        return got
    finally:
        shutil.rmtree(work, ignore_errors=True)


def served(stack, table, vocab):
    """Every row and optimizer slot of a table as the cluster serves them
    now: {(table, None): rows, (table, slot): that slot}."""
    r = stack.admin("rows", "--table", table, "--ids", "0-%d" % (vocab - 1), "--servers", stack.servers, "--json",
                    "--deadline-ms", "60000")
    if r.returncode != 0:
        raise RuntimeError("scps-admin rows %s exited %d: %s" % (table, r.returncode, r.stdout[-2000:]))
    doc, _ = json.JSONDecoder().raw_decode(r.stdout, r.stdout.index('{"table"'))
    rows = sorted(doc["rows"], key=lambda x: x["id"])
    if [x["id"] for x in rows] != list(range(vocab)):
        raise RuntimeError("scps-admin rows %s: not every id came back" % table)
    return {(table, k): np.array([x[k or "row"] for x in rows], dtype=np.float32) for k in [None] + doc["slots"]}


def check_tables(stack, step):
    """Every row and optimizer slot the cluster serves equals the checkpoint
    of step, bit for bit (float32 patterns); the number of rows compared."""
    have = {}
    for t in stack.admin_json("config")[0]["cluster"]["tables"]:
        have.update(served(stack, t["name"], t["vocabulary_size"]))
    want = export_checkpoint(stack, step, sorted(have, key=lambda k: (k[0], k[1] or "")))
    n = 0
    for key in sorted(have, key=lambda k: (k[0], k[1] or "")):
        a, b = have[key], want[key]
        same = a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))
        stack.check(same, "%s %s: the %d served equal step %d's checkpoint bit for bit%s"
                    % (key[0], key[1] or "rows", len(a), step, "" if same else " (shapes %s, %s; %s rows differ)"
                       % (a.shape, b.shape, int(np.sum(np.any(a != b, axis=1))) if a.shape == b.shape else "?")))
        n += len(a) if key[1] is None else 0
    return n


def test_docker_kill(stack):
    t = Trainer(stack, "--steps", "1000000")
    # Mid-training: past the trainer's first save, between two saves.
    deadline = time.monotonic() + 120
    while not t.saved() and t.p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    saved = t.saved()
    if not stack.check(saved and t.p.poll() is None, "the trainer is training and saved step %s" % saved):
        print(t.text()[-2000:])
        t.wait(30)
        return
    cid = stack.container(SHARD)  # looked up first: compose takes a while
    time.sleep(0.5)
    killed = time.monotonic()
    stack.docker("kill", cid)
    rc = t.wait(DEADLINE_MS / 1000 + 60)
    exited = time.monotonic() - killed
    err = t.first(r"scps-trainer: .*(UNAVAILABLE|DEADLINE_EXCEEDED|unavailable|timed out)")
    print("   trainer: %s" % (err[1] if err else t.text()[-1500:]))
    stack.check(rc not in (None, 0), "the trainer exits non-zero (%s), it does not hang" % rc)
    stack.check(err is not None and "UNAVAILABLE" in err[1], "the trainer's error names UNAVAILABLE")
    if err:
        stack.check(err[0] - killed <= DEADLINE_MS / 1000 + LOG_MARGIN_S,
                    "the trainer reports the error %.2f s after docker kill, within its %.1f s deadline (+%d s)"
                    % (err[0] - killed, DEADLINE_MS / 1000, LOG_MARGIN_S))
    stack.check(rc is not None and exited <= DEADLINE_MS / 1000 + EXIT_MARGIN_S,
                "the trainer's container exits %.2f s after docker kill (deadline %.1f s + %d s for compose)"
                % (exited, DEADLINE_MS / 1000, EXIT_MARGIN_S))
    # The newest complete part on the stopped shard's volume.
    vol = tempfile.mkdtemp(prefix="scps-kill-vol-")
    try:
        stack.copy_from(SHARD, "/var/lib/scps", vol)
        want = newest_part(os.path.join(vol, "scps"), PROCESS)
    finally:
        shutil.rmtree(vol, ignore_errors=True)
    stack.check(want is not None and want >= max(saved),
                "%s's volume holds its part of step %s, at or after the trainer's last reported save %d"
                % (SHARD, want, max(saved)))
    stack.check(stack.health(SHARD) == "exited" and stack.inspect(SHARD, "{{.RestartCount}}") == "0",
                "docker kill stopped %s for good (%s): the restart policy leaves it stopped"
                % (SHARD, stack.health(SHARD)))

    t0 = time.monotonic()
    stack.compose("start", SHARD)
    stack.wait_healthy(SHARD)
    healthy = time.monotonic() - t0
    print("   ok %s started again (docker-compose start), healthy in %.2f s" % (SHARD, healthy), flush=True)
    got = restored_step(stack, SHARD)
    stack.check(got == want, "%s's log: restored step %s from its volume (newest part: %s)" % (SHARD, got, want))
    steps = held_steps(stack)
    stack.check(steps[PROCESS] == want, "GetConfig: %s holds step %s (all: %s)" % (SHARD, steps[PROCESS], steps))

    if len(set(steps)) > 1:
        r = stack.run("trainer", "--steps", "10", timeout=120)
        stack.check(r.returncode != 0 and "different steps" in r.stdout,
                    "a trainer refuses the cluster while its shards hold %s: exit %d" % (steps, r.returncode))
    r = stack.admin("checkpoint", "restore", "--servers", stack.servers, timeout=300)
    print(r.stdout.strip())
    stack.check(r.returncode == 0 and "restoring step %d" % want in r.stdout
                and "every process holds step %d" % want in r.stdout,
                "scps-admin checkpoint restore brings every shard to step %s: exit %d" % (want, r.returncode))
    steps = held_steps(stack)
    stack.check(steps == [want] * stack.shards, "every shard holds step %s: %s" % (want, steps))
    n = check_tables(stack, want)
    print("   ok figures: trainer error %.2f s and exit %.2f s after docker kill (deadline %.1f s); %s healthy "
          "%.2f s after docker-compose start; restored step %d; %d rows (and their optimizer slots) compared"
          % (err[0] - killed if err else -1, exited, DEADLINE_MS / 1000, SHARD, healthy, want, n), flush=True)

    # Training resumes at the step after; it ends on a save (a multiple of
    # EVERY steps from one), so every shard then holds a checkpoint of its
    # last step.
    first = want + 1
    n_steps = max(EVERY, -(-(TOTAL_STEPS - first) // EVERY) * EVERY)
    t = Trainer(stack, "--steps", str(n_steps))
    rc = t.wait(900)
    out = t.text()
    print(out[-700:])
    m = re.search(r"the servers hold step (\d+); resuming at step (\d+)", out)
    stack.check(m is not None and int(m.group(2)) == first,
                "the trainer resumes at step %d: %s" % (first, m.group(0) if m else None))
    stack.check(rc == 0, "the resumed trainer exits 0 (%s)" % rc)
    m = re.search(r"held-out log-loss ([0-9.]+) vs planted ([0-9.]+) \(([-+][0-9.]+)%\)", out)
    stack.check(m is not None and float(m.group(3)) <= LOSS_WITHIN_PCT,
                "after the resume, held-out log-loss %s vs planted %s (%s%%; within %.0f%%)"
                % (m.group(1), m.group(2), m.group(3), LOSS_WITHIN_PCT) if m else "the trainer reports its loss")
    last = first + n_steps - 1
    steps = held_steps(stack)
    stack.check(steps == [last] * stack.shards and last in t.saved(),
                "every shard holds step %d, saved by the trainer: %s" % (last, steps))
    state["step"] = last


def test_crash_restart(stack):
    step = state.get("step")
    if not stack.check(step is not None, "test_docker_kill left every shard on a saved step"):
        return
    before = int(stack.inspect(SHARD, "{{.RestartCount}}"))
    t0 = time.monotonic()
    stack.crash(SHARD)
    # The restart policy acts at once; "healthy" only after the restart.
    deadline = t0 + 180
    while time.monotonic() < deadline and int(stack.inspect(SHARD, "{{.RestartCount}}")) == before:
        time.sleep(0.1)
    count = int(stack.inspect(SHARD, "{{.RestartCount}}"))
    stack.check(count == before + 1, "the restart policy restarted %s after SIGKILL (RestartCount %d -> %d)"
                % (SHARD, before, count))
    stack.wait_healthy(SHARD)
    healthy = time.monotonic() - t0
    got = restored_step(stack, SHARD)
    stack.check(got == step, "%s's log: restored step %s from its volume" % (SHARD, got))
    steps = held_steps(stack)
    stack.check(steps == [step] * stack.shards, "every shard holds step %d, no restore needed: %s" % (step, steps))
    n = check_tables(stack, step)
    print("   ok figures: %s healthy %.2f s after SIGKILL; restored step %d; %d rows (and their optimizer slots) "
          "compared" % (SHARD, healthy, step, n), flush=True)


if __name__ == "__main__":
    # Saves only where the trainer asks (the servers' timer would add its
    # own steps), and as often as every EVERY steps.
    main("compose_kill", [test_docker_kill, test_crash_restart],
         server_env={"SCPS_CHECKPOINT_MIN_INTERVAL": "0", "SCPS_CHECKPOINT_EVERY": "86400"})
