"""scps_srvtest: what the scps-server tests share: stubs generated from
proto/scps.proto, scps-server processes on loopback, and a small client of
its own (COO partitions built from ids with numpy, independent of libscps).

Every test is a script run by ctest as
    /usr/bin/python3 test_x.py --server PATH --proto PATH --shared DIR [--loadgen PATH]
It exits 0 when every check passed. Servers are always killed on the way out
and their stderr must not contain a sanitizer report.
"""
import argparse
import fcntl
import importlib
import json
import mmap
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

import grpc
import numpy as np

# Lines a sanitizer prints when it finds something in the server.
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "WARNING: ThreadSanitizer")

# Clients must lift gRPC's default 4 MiB receive limit (proto/scps.proto, Sizes).
UNLIMITED = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]

SERVICE = "/scps.v1.EmbeddingService/"


class Env:
    """One test run: arguments, a temp dir, the stubs, a failure count and
    every server started (killed and checked for sanitizer reports at exit)."""

    def __init__(self, name):
        ap = argparse.ArgumentParser(description=name)
        ap.add_argument("--server", required=True, help="the scps-server binary")
        ap.add_argument("--proto", required=True, help="proto/scps.proto")
        ap.add_argument("--shared", required=True, help="the shared/ folder")
        ap.add_argument("--loadgen", help="the scps-loadgen binary, for tests that drive libscps")
        ap.add_argument("--admin", help="the scps-admin binary, for tests that run it")
        self.args = ap.parse_args()
        self.name = name
        self.tmp = tempfile.mkdtemp(prefix="scps-%s-" % name)
        self.servers = []
        self.checks = 0
        self.failures = []
        self.pb, self.rpc = self.stubs()
        self.grpc = grpc
        # grpcio shuts gRPC down when its last channel closes, holding the
        # GIL while it waits for the connections to go (grpc/grpc#42247):
        # every thread of this process, the one timing a server's exit
        # included, then stops for up to 10 s. One idle channel (it never
        # connects) kept for the whole run keeps gRPC up.
        self._keep_grpc_up = grpc.insecure_channel("127.0.0.1:9")

    def stubs(self, name=None):
        """Generates scps_pb2 and scps_pb2_grpc with grpc_tools.protoc, or
        those of another .proto file beside --proto (name: "health.proto")."""
        proto = os.path.abspath(self.args.proto)
        if name:
            proto = os.path.join(os.path.dirname(proto), name)
        out = os.path.join(self.tmp, "stubs")
        os.makedirs(out, exist_ok=True)
        cmd = [sys.executable, "-m", "grpc_tools.protoc", "-I", os.path.dirname(proto),
               "--python_out", out, "--grpc_python_out", out, os.path.basename(proto)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError("protoc failed: %s" % r.stderr)
        if out not in sys.path:
            sys.path.insert(0, out)
        stem = os.path.splitext(os.path.basename(proto))[0]
        return importlib.import_module(stem + "_pb2"), importlib.import_module(stem + "_pb2_grpc")

    def check(self, cond, what):
        self.checks += 1
        if not cond:
            self.failures.append(what)
            print("FAIL: %s" % what, flush=True)
        return bool(cond)

    def run(self, fn):
        """Runs one test function; an exception counts as one failure."""
        t0 = time.monotonic()
        print("-- %s" % fn.__name__, flush=True)
        try:
            fn(self)
        except Exception:
            self.failures.append("%s raised:\n%s" % (fn.__name__, traceback.format_exc()))
            print("FAIL: %s raised\n%s" % (fn.__name__, traceback.format_exc()), flush=True)
        finally:
            self.stop_all()
        print("   %s done in %.1f s" % (fn.__name__, time.monotonic() - t0), flush=True)

    def write_config(self, name, batch_size, tables, features):
        """A workload file (deploy/workloads/README.md) for --config."""
        path = os.path.join(self.tmp, name + ".json")
        doc = {"name": name, "batch_size": batch_size,
               "ids": {"distribution": "uniform", "seed": 1},
               "tables": tables, "features": features}
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
        return path

    def server(self, config, **kw):
        s = Server(self, config, **kw)
        self.servers.append(s)
        return s

    def stop_all(self):
        """Stops what is still running with SIGTERM (a clean exit 0 is
        required, so the sanitizers' exit-time checks run too), kills what
        does not stop, and checks every server's stderr."""
        for s in self.servers:
            if s.running():
                rc = s.stop()
                self.check(rc == 0, "server %s: exit status %s after SIGTERM, expected 0; stderr:\n%s"
                           % (s.label, rc, s.stderr()[-3000:]))
            s.kill()
            report = s.sanitizer_report()
            self.check(report is None, "server %s: sanitizer report in stderr:\n%s" % (s.label, report))
        self.servers = []

    def finish(self):
        shutil.rmtree(self.tmp, ignore_errors=True)
        print("%s: %d checks, %d failed" % (self.name, self.checks, len(self.failures)), flush=True)
        return 1 if self.failures else 0


class Server:
    """One scps-server process on 127.0.0.1 (port 0 and --port-file unless
    listen is given). With credentials (grpc.ChannelCredentials, e.g. TLS
    composed with a token's call credentials) its channels use them."""

    count = 0

    def __init__(self, env, config, index=0, num_processes=1, sc_per_process=2, extra=(),
                 listen="127.0.0.1:0", start=True, credentials=None):
        Server.count += 1
        self.env = env
        self.label = "#%d (process %d of %d)" % (Server.count, index, num_processes)
        self.port_file = os.path.join(env.tmp, "port-%d" % Server.count)
        self.err_path = os.path.join(env.tmp, "stderr-%d" % Server.count)
        self.out_path = os.path.join(env.tmp, "stdout-%d" % Server.count)
        self.argv = [env.args.server, "--config", config, "--listen", listen,
                     "--process-index", str(index), "--num-processes", str(num_processes),
                     "--sc-per-process", str(sc_per_process), "--port-file", self.port_file]
        self.argv += list(extra)
        self.proc = None
        self.port = None
        self.channels = []
        self.credentials = credentials
        self.environ = None  # the process's environment: None inherits this one's
        if start:
            self.start()

    def start(self):
        with open(self.err_path, "wb") as err, open(self.out_path, "wb") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=self.environ)

    def wait_ready(self, timeout=30):
        """Waits for the port file; raises with the server's stderr if the
        process exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with open(self.port_file) as f:
                    text = f.read()
                if text.endswith("\n"):
                    self.port = int(text)
                    return self
            except FileNotFoundError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("server %s exited with %d before serving:\n%s"
                                   % (self.label, self.proc.returncode, self.stderr()))
            time.sleep(0.02)
        raise RuntimeError("server %s not serving after %d s:\n%s" % (self.label, timeout, self.stderr()))

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    def channel(self):
        if self.credentials is not None:
            ch = self.env.grpc.secure_channel(self.addr, self.credentials, options=UNLIMITED)
        else:
            ch = self.env.grpc.insecure_channel(self.addr, options=UNLIMITED)
        self.channels.append(ch)
        return ch

    def stub(self):
        return self.env.rpc.EmbeddingServiceStub(self.channel())

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout):
        """The exit status, or None if still running after timeout seconds."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def run_to_exit(self, timeout=30):
        """For servers expected to exit by themselves: (status, stdout, stderr)."""
        rc = self.wait(timeout)
        return rc, self._read(self.out_path), self.stderr()

    def close_channels(self):
        for ch in self.channels:
            ch.close()
        self.channels = []

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Signals the server and waits for it: its exit status, or None
        (and the process killed) if it did not exit in time."""
        self.close_channels()
        self.proc.send_signal(sig)
        rc = self.wait(timeout)
        if rc is None:
            self.kill()
        return rc

    def kill(self):
        self.close_channels()
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def _read(self, path):
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stderr(self):
        return self._read(self.err_path)

    def sanitizer_report(self):
        text = self.stderr()
        hits = [i for i, line in enumerate(text.splitlines()) if any(m in line for m in SANITIZER_MARKERS)]
        if not hits:
            return None
        lines = text.splitlines()
        return "\n".join(lines[max(0, hits[0] - 2):hits[0] + 40])


def u32(a):
    return np.asarray(a, dtype="<u4").tobytes()


def f32(a):
    return np.asarray(a, dtype="<f4").tobytes()


def gains_for(combiner, weights):
    """The combiner's gains for one sample's weights (proto Combiner)."""
    w = np.asarray(weights, dtype=np.float64)
    if combiner == "sum":
        return w
    if combiner == "mean":
        return w / w.sum()
    if combiner == "sqrtn":
        return w / np.sqrt((w * w).sum())
    raise ValueError(combiner)


COMBINERS = {1: "sum", 2: "mean", 3: "sqrtn"}


class Cluster:
    """A client's view of a running cluster, read with GetConfig from every
    process (servers in process-index order), and the data path of
    proto/scps.proto done by hand: ids to (SparseCore, local row), per
    SparseCore sorting and merging, partial activations summed."""

    def __init__(self, env, servers):
        self.env = env
        self.pb = env.pb
        self.stubs = [s.stub() for s in servers]
        self.configs = [st.GetConfig(self.pb.GetConfigRequest(), timeout=30) for st in self.stubs]
        c = self.configs[0]
        self.fingerprint = c.config_fingerprint
        self.P = c.cluster.topology.num_processes
        self.S = c.cluster.topology.sc_per_process
        self.N = self.P * self.S
        self.stacks = list(c.stacks)
        self.tables = {}
        for t in c.cluster.tables:
            self.tables[t.name] = {"spec": t, "combiner": COMBINERS[t.combiner]}
        self.features = {}
        for f in c.cluster.features:
            self.features[f.name] = {"spec": f, "table": f.table}
        for si, st in enumerate(self.stacks):
            for k, name in enumerate(st.tables):
                self.tables[name].update(stack=si, row_offset=st.row_offsets[k], rotation=st.rotations[k])
            for k, name in enumerate(st.features):
                self.features[name].update(stack=si, sample_offset=st.feature_sample_offsets[k])
        # What this client sent, per process and stack name, to check Stats:
        # Lookup entries, distinct rows updated, and the FDO maxima per local
        # SparseCore as (max ids, max unique ids) over Lookups only and over
        # Lookups and ApplyGradients.
        self.sent = [{st.name: {"lookup_entries": 0, "rows": 0, "fdo_lookup": [(0, 0)] * self.S,
                                "fdo_all": [(0, 0)] * self.S} for st in self.stacks} for _ in range(self.P)]

    def place(self, table, i, rotation=None):
        """(global SparseCore, local row) of id i of table."""
        t = self.tables[table]
        r = t["rotation"] if rotation is None else rotation
        return (i % self.N + r) % self.N, i // self.N + t["row_offset"]

    def entries(self, batch, rotation_of=None):
        """batch: {feature: [[(id, weight), ...] per sample]}. Returns
        {stack: {sc: [(row, sample, gain)]}} sorted by (row, sample) with
        repeated pairs merged by summing gains (float64)."""
        per = {}
        for fname, samples in batch.items():
            f = self.features[fname]
            t = self.tables[f["table"]]
            for r, sample in enumerate(samples):
                if not sample:
                    continue
                ids = [x for x, _ in sample]
                g = gains_for(t["combiner"], [w for _, w in sample])
                for i, gain in zip(ids, g):
                    rot = None if rotation_of is None else rotation_of.get(f["table"])
                    sc, row = self.place(f["table"], i, rot)
                    key = (row, f["sample_offset"] + r)
                    d = per.setdefault(f["stack"], {}).setdefault(sc, {})
                    d[key] = d.get(key, 0.0) + gain
        return {st: {sc: sorted((k[0], k[1], v) for k, v in d.items()) for sc, d in scs.items()}
                for st, scs in per.items()}

    def source_sc(self, stack, sample):
        """The SparseCore a stack sample comes from: each feature's batch is
        split evenly over the N SparseCores (sparsecore-semantics.md 4)."""
        st = self.stacks[stack]
        k = max(i for i, off in enumerate(st.feature_sample_offsets) if off <= sample)
        b = self.features[st.features[k]]["spec"].batch_size
        return (sample - st.feature_sample_offsets[k]) * self.N // b

    def _account(self, entries, process, apply):
        for st, scs in entries.items():
            rec = self.sent[process][self.stacks[st].name]
            for k in range(self.S):
                part = scs.get(process * self.S + k, [])
                if apply:
                    rec["rows"] += len({row for row, _, _ in part})
                else:
                    rec["lookup_entries"] += len(part)
                ids, uniq = {}, {}
                for row, sample, _ in part:
                    src = self.source_sc(st, sample)
                    ids[src] = ids.get(src, 0) + 1
                    uniq.setdefault(src, set()).add(row)
                mx = (max(ids.values(), default=0), max((len(u) for u in uniq.values()), default=0))
                for key in (("fdo_all",) if apply else ("fdo_lookup", "fdo_all")):
                    old = rec[key][k]
                    rec[key] = rec[key][:k] + [(max(old[0], mx[0]), max(old[1], mx[1]))] + rec[key][k + 1:]

    def partitions(self, entries, process, stack):
        """StackPartitions of one stack for one process."""
        rows, samples, gains, offsets = [], [], [], [0]
        scs = entries.get(stack, {})
        for k in range(self.S):
            for row, sample, gain in scs.get(process * self.S + k, []):
                rows.append(row)
                samples.append(sample)
                gains.append(gain)
            offsets.append(len(rows))
        return self.pb.StackPartitions(stack=self.stacks[stack].name, sc_offsets=offsets,
                                       rows=u32(rows), samples=u32(samples), gains=f32(gains))

    def lookup_request(self, entries, process, distinct_rows=False):
        req = self.pb.LookupRequest(config_fingerprint=self.fingerprint, process_index=process)
        for st in sorted(entries):
            req.stacks.append(self.partitions(entries, process, st))
            if distinct_rows:
                req.distinct_rows.append(True)
        return req

    def pool_rows(self, entries, process, st, rows):
        """A distinct-rows answer pooled as the proto says: partition k's rows
        in order, each entry adding gain * its row to its sample."""
        info = self.stacks[st]
        out = np.zeros((info.total_sample_count, info.dim))
        at = 0
        for k in range(self.S):
            part = entries.get(st, {}).get(process * self.S + k, [])
            last = None
            for row, sample, gain in part:
                if row != last:
                    if last is not None:
                        at += 1
                    last = row
                out[sample] += gain * rows[at]
            if last is not None:
                at += 1
        self.env.check(at == rows.shape[0], "distinct rows: %d sent, %d read" % (rows.shape[0], at))
        return out

    def lookup_raw(self, batch, rotation_of=None, processes=None, distinct_rows=False):
        """Per stack index, the summed [total_sample_count x dim] float64
        activations of every process; with distinct_rows the servers answer
        with rows and this pools them."""
        entries = self.entries(batch, rotation_of)
        acts = {}
        for p in (range(self.P) if processes is None else processes):
            resp = self.stubs[p].Lookup(self.lookup_request(entries, p, distinct_rows), timeout=60)
            self._account(entries, p, apply=False)
            self.env.check(len(resp.stacks) == len(entries), "Lookup answers every stack asked")
            for sa, st in zip(resp.stacks, sorted(entries)):
                info = self.stacks[st]
                self.env.check(sa.stack == info.name, "Lookup answers in request order: %s" % sa.stack)
                if distinct_rows:
                    self.env.check(not sa.activations, "distinct rows asked: no pooled activations")
                    rows = np.frombuffer(sa.rows, dtype="<f4").astype(np.float64).reshape(-1, info.dim)
                    a = self.pool_rows(entries, p, st, rows)
                else:
                    self.env.check(not sa.rows, "pooled activations asked: no rows")
                    a = np.frombuffer(sa.activations, dtype="<f4").astype(np.float64)
                    a = a.reshape(info.total_sample_count, info.dim)
                acts[st] = acts[st] + a if st in acts else a
        return acts

    def feature_rows(self, acts, fname):
        """A feature's [batch_size x embedding_dim] block cut out of the stack
        activations."""
        f = self.features[fname]
        t = self.tables[f["table"]]["spec"]
        off, b = f["sample_offset"], f["spec"].batch_size
        return acts[f["stack"]][off:off + b, :t.embedding_dim]

    def lookup(self, batch, **kw):
        acts = self.lookup_raw(batch, **kw)
        return {fname: self.feature_rows(acts, fname) for fname in batch}

    def read_rows(self, table, ids, **kw):
        """Rows of table for ids, looked up as one id per sample with gain 1
        through the table's first feature: [len(ids) x embedding_dim]."""
        fname = next(n for n, f in self.features.items() if f["table"] == table)
        b = self.features[fname]["spec"].batch_size
        out = []
        for k in range(0, len(ids), b):
            chunk = ids[k:k + b]
            got = self.lookup({fname: [[(i, 1.0)] for i in chunk]}, **kw)[fname]
            out.append(got[:len(chunk)])
        return np.concatenate(out)

    def apply(self, batch, grads, step=0, learning_rate=None):
        """grads: {feature: [batch_size x embedding_dim]}; other features and
        padding columns get zero gradients. Returns rows_updated per process."""
        entries = self.entries(batch)
        gbuf = {}
        for st in entries:
            info = self.stacks[st]
            gbuf[st] = np.zeros((info.total_sample_count, info.dim), dtype=np.float32)
        for fname, g in grads.items():
            f = self.features[fname]
            dim = self.tables[f["table"]]["spec"].embedding_dim
            off = f["sample_offset"]
            g = np.asarray(g, dtype=np.float32)
            gbuf[f["stack"]][off:off + g.shape[0], :dim] = g
        out = []
        for p in range(self.P):
            req = self.pb.ApplyGradientsRequest(config_fingerprint=self.fingerprint, process_index=p, step=step)
            if learning_rate is not None:
                req.learning_rate = learning_rate
            for st in sorted(entries):
                req.stacks.append(self.pb.StackGradients(partitions=self.partitions(entries, p, st),
                                                         gradients=f32(gbuf[st])))
            out.append(self.stubs[p].ApplyGradients(req, timeout=60).rows_updated)
            self._account(entries, p, apply=True)
        return out


def main(name, tests):
    env = Env(name)
    try:
        for t in tests:
            env.run(t)
    finally:
        env.stop_all()
    sys.exit(env.finish())


def call_status(fn, *a, **kw):
    """(status code name, details, response) of one call."""
    try:
        return "OK", "", fn(*a, **kw)
    except grpc.RpcError as e:
        return e.code().name, e.details() or "", None


def attach_segment(env, path, size):
    """A sealed memfd of size bytes attached over the side channel at path:
    (the socket, kept open so the segment stays, its mapping, the handle)."""
    side = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    side.connect(path)
    fd = os.memfd_create("test_validation", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    socket.send_fds(side, [env.pb.ShmRequest(attach_bytes=size).SerializeToString()], [fd])
    resp = env.pb.ShmResponse.FromString(side.recv(4096))
    env.check(resp.code == 0 and len(resp.segment) == 16, "attach %d bytes: code %d %s" % (size, resp.code,
                                                                                           resp.message))
    seg = mmap.mmap(fd, size)
    os.close(fd)
    return side, seg, resp.segment


def make_pki(env):
    """Certificates and keys for TLS (tests/make_test_pki.sh), made once per
    run in the run's temp dir: {"ca": path of ca.pem, "server_key": ...}."""
    d = os.path.join(env.tmp, "pki")
    if not os.path.isdir(d):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "make_test_pki.sh")
        subprocess.run([script, d], check=True, capture_output=True, timeout=60)
    out = {}
    for name in ("ca", "other-ca", "server", "client", "stranger"):
        out[name.replace("-", "_")] = os.path.join(d, name + ".pem")
        out[name.replace("-", "_") + "_key"] = os.path.join(d, name + ".key")
    return out


def write_secret(env, name, text, mode=0o600):
    """A file only its owner reads (a token file), in the run's temp dir."""
    path = os.path.join(env.tmp, name)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path
