"""What bounds a server's memory and connections (deploy/SECURITY.md, "Memory
and connection limits"), under the attacks of issue 26 section 5, with a raw
HTTP/2 client (scps_h2, python3-h2) that does what no stock client does:

- 256 concurrent 44-byte Lookups, each answered with the declaration's 16 MiB,
  whose answers are never read: the server holds at most its --memory-budget
  of them, refuses the rest with RESOURCE_EXHAUSTED naming the budget, cancels
  the held ones after --transfer-timeout, and its memory falls back after.
- 60 requests announced at 200 MiB and left unfinished after 32 MiB each:
  gRPC's quota (half the budget) resets streams past it, the rest are
  cancelled after --transfer-timeout with DEADLINE_EXCEEDED.
- 2,000 idle connections, closed after --idle-timeout; connections that never
  finish their HTTP/2 handshake, after --transfer-timeout.
Throughout, a stock grpcio client's lookups succeed, and the server's VmHWM
stays under its RSS before the attack + 1.5 x the budget + OVERHEAD (not
checked in sanitizer builds, whose allocator keeps freed memory)."""
import os
import socket
import threading
import time

import numpy as np

from scps_srvtest import Cluster, attach_segment, call_status, main, u32
import scps_h2

BATCH, DIM = 32768, 128           # a pooled answer: 32768 x 128 float32 = 16 MiB
BUDGET_MB = 256
OVERHEAD_MB = 64                  # gRPC's connections, frames and allocator slack
WAIT_MS = 1000
TRANSFER_S = 4
MAX_MB = 64                       # under half the budget: gRPC's quota is BUDGET_MB / 2
LOOKUP = "/scps.v1.EmbeddingService/Lookup"
APPLY = "/scps.v1.EmbeddingService/ApplyGradients"


def config(env):
    return env.write_config("memory", BATCH, [
        {"name": "t", "vocabulary_size": 1024, "embedding_dim": DIM, "combiner": "sum",
         "optimizer": {"type": "sgd", "learning_rate": 0.1}, "initializer": {"type": "uniform", "scale": 0.1}}],
        [{"name": "f", "table": "t", "valency": 1}])


def start(env, extra=()):
    return env.server(config(env), extra=["--memory-budget", "%dM" % BUDGET_MB, "--memory-wait-ms", str(WAIT_MS),
                                          "--transfer-timeout", str(TRANSFER_S), "--max-message-mb", str(MAX_MB)]
                      + list(extra)).wait_ready()


def sanitized(env):
    """Whether the server was built with a sanitizer: its allocator keeps
    freed memory in quarantine and adds redzones, so the process's RSS says
    nothing about the budget (Stats.memory still does)."""
    with open(env.args.server, "rb") as f:
        exe = f.read()
    return b"__asan_init" in exe or b"__tsan_init" in exe


def check_rss(env, ok, what):
    if sanitized(env):
        print("   (sanitizer build: not checked) %s" % what, flush=True)
    else:
        env.check(ok, what)


def status_of(pid):
    """VmRSS and VmHWM of a process, MiB."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024.0
    return out


def empty_lookup(cl):
    """The 44-byte Lookup of the issue: no ids, answered with every sample's
    (zero) activations, 16 MiB."""
    return cl.pb.LookupRequest(config_fingerprint=cl.fingerprint, process_index=0, stacks=[
        cl.pb.StackPartitions(stack=cl.stacks[0].name, sc_offsets=[0] * (cl.S + 1))])


class Normal:
    """A stock grpcio client looking up a few ids as distinct rows (a small
    answer) in a loop until stopped; counts its outcomes."""

    def __init__(self, env, srv, cl):
        self.stub = srv.stub()
        entries = cl.entries({"f": [[(i, 1.0)] for i in range(8)] + [[] for _ in range(BATCH - 8)]})
        self.req = cl.lookup_request(entries, 0, distinct_rows=True)
        self.ok, self.bad = 0, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop)
        self.thread.start()

    def loop(self):
        while not self.stop.is_set():
            got, details, _ = call_status(self.stub.Lookup, self.req, timeout=30)
            if got == "OK":
                self.ok += 1
            else:
                self.bad.append((got, details))
            time.sleep(0.02)

    def finish(self):
        self.stop.set()
        self.thread.join()
        return self.ok, self.bad


def watch_memory(pid, stop, peak):
    while not stop.is_set():
        try:
            peak.append(status_of(pid)["VmRSS"])
        except (OSError, KeyError):  # the server has gone
            return
        time.sleep(0.05)


def memory_stats(srv, pb):
    return srv.stub().Stats(pb.StatsRequest(), timeout=30).memory


def pump_until_ended(calls, seconds):
    """Reads what the server sends on the calls' connections until every
    call has ended (its status, or its connection closed) or seconds pass."""
    conns = {id(c): c for c, _ in calls}.values()
    end = time.monotonic() + seconds
    while time.monotonic() < end and any(c.status(sid) is None and not c.closed for c, sid in calls):
        for c in conns:
            if not c.closed:
                c.pump(0.02)


def wait_rss(pid, below, seconds):
    end = time.monotonic() + seconds
    rss = status_of(pid)["VmRSS"]
    while rss > below and time.monotonic() < end:
        time.sleep(0.2)
        rss = status_of(pid)["VmRSS"]
    return rss


def test_lookup_flood(env):
    srv = start(env)
    cl = Cluster(env, [srv])
    pb = cl.pb
    pid = srv.proc.pid
    base = status_of(pid)["VmRSS"]
    bound = base + 1.5 * BUDGET_MB + OVERHEAD_MB
    req = empty_lookup(cl).SerializeToString()
    env.check(len(req) < 64, "the attack's Lookup is %d bytes" % len(req))
    normal = Normal(env, srv, cl)
    stop, rss = threading.Event(), []
    watcher = threading.Thread(target=watch_memory, args=(pid, stop, rss))
    watcher.start()
    conns = [scps_h2.Conn("127.0.0.1", srv.port) for _ in range(4)]
    calls = [(c, c.unary(LOOKUP, req)) for c in conns for _ in range(64)]
    # Every call ends: refused after --memory-wait-ms, or held and cancelled
    # after --transfer-timeout (its answer never read).
    pump_until_ended(calls, WAIT_MS / 1000.0 + TRANSFER_S + 20)
    stop.set()
    watcher.join()
    ok, bad = normal.finish()
    got = [c.status(sid) for c, sid in calls]
    refused = [g for g in got if g and g[0] == 8]
    held = [g for g in got if g and g[0] == 4]
    env.check(all(g is not None for g in got), "every attack call ended: %d did not" % got.count(None))
    env.check(len(refused) + len(held) == len(calls),
              "attack calls: %d refused, %d cancelled, others %s" % (len(refused), len(held),
                                                                   [g for g in got if g not in refused + held][:3]))
    # The budget holds 15 answers of 16.1 MiB at most.
    env.check(0 < len(held) <= BUDGET_MB // 16, "%d answers held at once" % len(held))
    env.check(all("memory budget of 256.0 MiB (--memory-budget)" in m and "needs 16.1 MiB" in m and "in use" in m
                  for _, m in refused), "refusals name the budget, the need and the use: %s" % refused[:1])
    env.check(all("answer not taken by the client within %d s (--transfer-timeout)" % TRANSFER_S in m
                  for _, m in held), "cancellations say why: %s" % held[:1])
    hwm = status_of(pid)["VmHWM"]
    print("   256 Lookups: %d refused, %d held then cancelled; VmRSS %.0f MiB before, VmHWM %.0f; stock client %d OK"
          % (len(refused), len(held), base, hwm, ok), flush=True)
    check_rss(env, hwm <= bound, "VmHWM %.0f MiB during the attack, bound %.0f (RSS before %.0f + 1.5 x %d + %d)"
              % (hwm, bound, base, BUDGET_MB, OVERHEAD_MB))
    env.check(ok > 0 and not bad, "a stock client's lookups during the attack: %d OK, failed %s" % (ok, bad[:3]))
    for c in conns:
        c.close()
    mem = memory_stats(srv, pb)
    env.check(mem.budget_bytes == BUDGET_MB << 20 and mem.calls_refused >= len(refused) and
              mem.answers_timed_out == len(held) and mem.calls_waited >= len(refused),
              "Stats.memory: %s" % str(mem).replace("\n", ", "))
    env.check(mem.peak_bytes <= (BUDGET_MB + 4) << 20, "peak in use %d bytes" % mem.peak_bytes)
    # After the spike: the server is idle, and its memory goes back.
    after = wait_rss(pid, base + OVERHEAD_MB, 0 if sanitized(env) else 15)
    print("   VmRSS %.0f MiB after the attack" % after, flush=True)
    check_rss(env, after <= base + OVERHEAD_MB, "VmRSS %.0f MiB after the attack, %.0f before" % (after, base))
    end = time.monotonic() + 15
    while memory_stats(srv, pb).trims < 1 and time.monotonic() < end:
        time.sleep(0.2)
    env.check(memory_stats(srv, pb).trims >= 1, "memory was trimmed once the server was idle")
    got, details, _ = call_status(srv.stub().Lookup, empty_lookup(cl), timeout=30)
    env.check(got == "OK", "a whole Lookup after the attack: %s %s" % (got, details))


def test_too_large(env):
    """A call needing more than the whole budget is refused at once."""
    srv = env.server(config(env), extra=["--memory-budget", "8M", "--memory-wait-ms", "60000", "--max-message-mb",
                                         str(MAX_MB)]).wait_ready()
    cl = Cluster(env, [srv])
    t0 = time.monotonic()
    got, details, _ = call_status(srv.stub().Lookup, empty_lookup(cl), timeout=30)
    env.check(got == "RESOURCE_EXHAUSTED" and "more than the server's whole memory budget of 8.0 MiB" in details
              and time.monotonic() - t0 < 30, "Lookup of a 16 MiB answer, budget 8M: %s %s" % (got, details))
    grads = np.zeros((BATCH, DIM), dtype="<f4").tobytes()
    req = cl.pb.ApplyGradientsRequest(config_fingerprint=cl.fingerprint, process_index=0, step=0, stacks=[
        cl.pb.StackGradients(partitions=cl.pb.StackPartitions(stack=cl.stacks[0].name, sc_offsets=[0] * (cl.S + 1)),
                             gradients=grads)])
    got, details, _ = call_status(srv.stub().ApplyGradients, req, timeout=30)
    env.check(got == "RESOURCE_EXHAUSTED" and "whole memory budget" in details and "--memory-budget" in details,
              "ApplyGradients of 16 MiB, budget 8M: %s %s" % (got, details))
    # A request lying in shared memory (request_placement) is charged as on
    # the connection, or sent back there: a 6 MiB one needs 12 MiB of 8.
    side, seg, handle = attach_segment(env, cl.configs[0].shm_socket, 8 << 20)
    try:
        envelope = cl.pb.LookupRequest()
        envelope.request_placement.segment, envelope.request_placement.length = handle, 6 << 20
        got, details, _ = call_status(srv.stub().Lookup, envelope, timeout=30)
        env.check(got == "FAILED_PRECONDITION" and "no room in the memory budget" in details
                  and "send it on the connection" in details,
                  "a placed 6 MiB request, budget 8M: %s %s" % (got, details))
    finally:
        seg.close()
        side.close()
    rows = cl.lookup({"f": [[(1, 1.0)]] + [[] for _ in range(BATCH - 1)]}, distinct_rows=True)
    env.check(rows["f"].shape == (BATCH, DIM), "small answers still served")


def test_unfinished_requests(env):
    srv = start(env)
    cl = Cluster(env, [srv])
    pb = cl.pb
    pid = srv.proc.pid
    base = status_of(pid)["VmRSS"]
    bound = base + 1.5 * BUDGET_MB + OVERHEAD_MB
    # First a few, under gRPC's quota: each is cancelled at the deadline.
    few = []
    for _ in range(3):
        c = scps_h2.Conn("127.0.0.1", srv.port)
        few.append((c, c.announce(APPLY, 200 << 20, 8 << 20)[0]))
    pump_until_ended(few, TRANSFER_S + 20)
    got = [c.status(sid) for c, sid in few]
    env.check(all(g and g[0] == 4 and "request message not received within %d s of its headers (--transfer-timeout)"
                  % TRANSFER_S in g[1] for g in got), "unfinished requests under the quota: %s" % got)
    env.check(memory_stats(srv, pb).requests_timed_out == 3, "Stats.memory.requests_timed_out")
    for c, _ in few:
        c.close()
    # Then the attack: 60 of them, 32 MiB each (1.9 GB if all were held).
    stop, rss = threading.Event(), []
    watcher = threading.Thread(target=watch_memory, args=(pid, stop, rss))
    watcher.start()
    conns, calls = [], []
    for _ in range(60):
        c = scps_h2.Conn("127.0.0.1", srv.port)
        conns.append(c)
        calls.append((c, c.announce(APPLY, 200 << 20, 32 << 20, budget_s=5)[0]))
        c.pump(0)
    # While what is left of them is held, a stock client is served.
    normal = Normal(env, srv, cl)
    pump_until_ended(calls, TRANSFER_S + 20)
    stop.set()
    watcher.join()
    ok, bad = normal.finish()
    got = [c.status(sid) or (("closed", c.goaway) if c.closed else None) for c, sid in calls]
    timed_out = [g for g in got if g and g[0] == 4]
    reset = [g for g in got if g and g[0] in ("reset", "closed")]
    env.check(len(timed_out) + len(reset) == len(calls),
              "each unfinished request cancelled at its deadline or reset by gRPC: %s" %
              [g for g in got if g not in timed_out + reset][:3])
    hwm = status_of(pid)["VmHWM"]
    print("   60 unfinished requests: %d cancelled at the deadline, %d reset or refused by gRPC; VmRSS %.0f MiB "
          "before, VmHWM %.0f; stock client %d OK" % (len(timed_out), len(reset), base, hwm, ok), flush=True)
    check_rss(env, hwm <= bound, "VmHWM %.0f MiB during the attack, bound %.0f (RSS before %.0f + 1.5 x %d + %d)"
              % (hwm, bound, base, BUDGET_MB, OVERHEAD_MB))
    env.check(ok > 0 and not bad, "a stock client's lookups during the attack: %d OK, failed %s" % (ok, bad[:3]))
    for c in conns:
        c.close()
    after = wait_rss(pid, base + OVERHEAD_MB, 0 if sanitized(env) else 15)
    print("   VmRSS %.0f MiB after the attack" % after, flush=True)
    check_rss(env, after <= base + OVERHEAD_MB, "VmRSS %.0f MiB after the attack, %.0f before" % (after, base))
    rows = cl.lookup({"f": [[(1, 1.0)]] + [[] for _ in range(BATCH - 1)]}, distinct_rows=True)
    env.check(rows["f"].shape == (BATCH, DIM), "served after the attack")


def server_sockets(pid):
    n = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            n += os.readlink("/proc/%d/fd/%s" % (pid, fd)).startswith("socket:")
        except OSError:
            pass
    return n


def wait_sockets(pid, most, seconds):
    end = time.monotonic() + seconds
    n = server_sockets(pid)
    while n > most and time.monotonic() < end:
        time.sleep(0.2)
        n = server_sockets(pid)
    return n


def test_idle_connections(env):
    idle_s = 8
    srv = start(env, ["--idle-timeout", str(idle_s)])
    pid = srv.proc.pid
    baseline = server_sockets(pid)  # the listener
    # 2,000 connections that finish the HTTP/2 handshake and then idle, and
    # a few that never send a byte.
    conns = [scps_h2.Conn("127.0.0.1", srv.port) for _ in range(2000)]
    silent = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(5)]
    deadline = time.monotonic() + idle_s * 3 / 4
    opened = server_sockets(pid)
    while opened < baseline + 2000 and time.monotonic() < deadline:
        time.sleep(0.1)
        opened = server_sockets(pid)
    env.check(opened >= baseline + 2000, "the server accepted the connections: %d sockets" % opened)
    left = wait_sockets(pid, baseline, idle_s + TRANSFER_S + 20)
    env.check(left <= baseline, "%d sockets left after the idle and transfer timeouts (%d before)" % (left, baseline))
    for c in conns:
        c.pump(0)
    env.check(all(c.closed for c in conns), "the clients saw their connections closed: %d open"
              % sum(not c.closed for c in conns))
    for c in conns:
        c.close()
    for s in silent:
        s.close()
    # A stock client idle past the limit reconnects.
    stub = srv.stub()
    for k in range(2):
        got, details, _ = call_status(stub.Health, env.pb.HealthRequest(), timeout=30)
        env.check(got == "OK", "Health on a channel%s: %s %s" % (" idle past --idle-timeout" if k else "", got, details))
        if not k:
            time.sleep(idle_s + 1)


if __name__ == "__main__":
    main("test_memory_limits", [test_lookup_flood, test_too_large, test_unfinished_requests, test_idle_connections])
