"""Every invalid request gets the status proto/scps.proto promises and a
message naming the field and the offending value, and changes nothing: a
Lookup afterwards returns exactly the bytes it returned before. Also garbage
and truncated protobufs, a request over --max-message-mb, unknown methods,
and requests and responses over gRPC's default 4 MiB that must work."""
import math
import os
import struct

import numpy as np

from scps_srvtest import SERVICE, Cluster, attach_segment, call_status, f32, main, u32

BATCH = 8
TABLES = [
    {"name": "a", "vocabulary_size": 500, "embedding_dim": 8, "combiner": "sum",
     "optimizer": {"type": "sgd", "learning_rate": 0.5}, "initializer": {"type": "uniform", "scale": 0.5}},
    {"name": "b", "vocabulary_size": 100, "embedding_dim": 12, "combiner": "mean",
     "optimizer": {"type": "sgd", "learning_rate": 0.5}, "initializer": {"type": "uniform", "scale": 0.5}},
]
FEATURES = [{"name": "fa", "table": "a", "valency": 2}, {"name": "fb", "table": "b", "valency": [1, 3]}]
MAX_MB = 1

# Rows per SparseCore of each stack on 1 x 2 (vocabulary padded to 8 N = 16).
ROWS_PER_SC = {"a": 256, "b": 56}


def base_batch():
    return {"fa": [[(i, 1.0), (i + 101, 1.0)] for i in range(BATCH)],
            "fb": [[(i, 1.0), (99 - i, 1.0)] for i in range(BATCH)]}


def hex12(b):
    return b[:6].hex()


class Validation:
    def __init__(self, env, srv, stacks=("a", "b")):
        self.env = env
        self.pb = env.pb
        self.cl = Cluster(env, [srv])
        self.stub = self.cl.stubs[0]
        self.channel = srv.channel()
        entries = self.cl.entries(base_batch())
        self.lookup = self.cl.lookup_request(entries, 0)
        names = [s.stack for s in self.lookup.stacks]
        env.check(names == list(stacks), "stacks of the base request %s" % names)
        for s in self.lookup.stacks:
            env.check(s.sc_offsets[1] > 1 and s.sc_offsets[2] - s.sc_offsets[1] > 1,
                      "base request: stack %s has entries on both SparseCores (%s)" % (s.stack, list(s.sc_offsets)))
        rng = np.random.default_rng(3)
        self.apply = self.pb.ApplyGradientsRequest(config_fingerprint=self.cl.fingerprint, process_index=0, step=1)
        for part in self.lookup.stacks:
            info = next(s for s in self.cl.stacks if s.name == part.stack)
            g = rng.standard_normal((info.total_sample_count, info.dim)).astype(np.float32)
            self.apply.stacks.append(self.pb.StackGradients(partitions=part, gradients=f32(g)))
        self.before = self.stub.Lookup(self.lookup, timeout=30).SerializeToString()
        self.rejected = {"Lookup": 0, "ApplyGradients": 0, "GetConfig": 0, "Health": 0}

    def unchanged(self, what):
        after = self.stub.Lookup(self.lookup, timeout=30).SerializeToString()
        self.env.check(after == self.before, "%s: tables unchanged (Lookup returns the same bytes)" % what)

    def expect(self, what, method, req, code, needles):
        """Sends req (a message, or raw bytes) and checks status and message."""
        if isinstance(req, (bytes, bytearray)):
            fn = self.channel.unary_unary(SERVICE + method,
                                          request_serializer=None, response_deserializer=None)
        else:
            fn = getattr(self.stub, method)
        got, details, _ = call_status(fn, req, timeout=30)
        ok = self.env.check(got == code, "%s: status %s, expected %s (%s)" % (what, got, code, details))
        for n in needles:
            ok &= self.env.check(n in details, "%s: message %r names %r" % (what, details, n))
        if ok:
            print("   ok %-45s %s: %s" % (what, got, details), flush=True)
        # Requests over the size limit are refused by gRPC before any handler.
        if got != "OK" and "larger than max" not in details and method in self.rejected:
            self.rejected[method] += 1
        self.unchanged(what)

    def lookup_with(self, fn):
        r = self.pb.LookupRequest()
        r.CopyFrom(self.lookup)
        fn(r)
        return r

    def apply_with(self, fn):
        r = self.pb.ApplyGradientsRequest()
        r.CopyFrom(self.apply)
        fn(r)
        return r


def arrays(part):
    return (np.frombuffer(part.rows, "<u4").copy(), np.frombuffer(part.samples, "<u4").copy(),
            np.frombuffer(part.gains, "<f4").copy())


def set_arrays(part, rows, samples, gains):
    part.rows, part.samples, part.gains = u32(rows), u32(samples), f32(gains)


def set_last(field, value):
    """Mutates the last entry (SparseCore 1, largest row) of a partition."""
    def fn(part):
        r, s, g = arrays(part)
        {"row": r, "sample": s, "gain": g}[field][-1] = value
        set_arrays(part, r, s, g)
    return fn


def swap_first_two(part):
    r, s, g = arrays(part)
    r[[0, 1]], s[[0, 1]], g[[0, 1]] = r[[1, 0]], s[[1, 0]], g[[1, 0]]
    set_arrays(part, r, s, g)


def repeat_first(part):
    r, s, g = arrays(part)
    set_arrays(part, np.insert(r, 1, r[0]), np.insert(s, 1, s[0]), np.insert(g, 1, g[0]))
    offs = list(part.sc_offsets)
    del part.sc_offsets[:]
    part.sc_offsets.extend([offs[0]] + [o + 1 for o in offs[1:]])


def offsets_past_the_entries(part):
    """Keeps SparseCore 0's entries (sorted, no repeats) and claims one more
    for it: a server that builds SparseCore 0's view before checking the
    offsets reads past the rows buffer."""
    r, s, g = arrays(part)
    n0 = part.sc_offsets[1]
    set_arrays(part, r[:n0], s[:n0], g[:n0])
    del part.sc_offsets[:]
    part.sc_offsets.extend([0, n0 + 1, n0])


def set_offsets(fn):
    def mutate(part):
        offs = fn(list(part.sc_offsets))
        del part.sc_offsets[:]
        part.sc_offsets.extend(offs)
    return mutate


def pairs(entries_gains):
    """gain_exceptions bytes: (uint32 entry, float32 gain) pairs."""
    return b"".join(struct.pack("<If", e, g) for e, g in entries_gains)


def exceptions_of(part):
    """The partition's gains as gain_exceptions (the form libscps sends
    when it is smaller): the entries whose gain is not 1.0."""
    g = np.frombuffer(part.gains, "<f4")
    part.gain_exceptions = pairs((int(e), float(g[e])) for e in np.flatnonzero(g != 1.0))
    part.gains = b""


def gains_as(make):
    """Replaces gains by the gain_exceptions make(entry count) returns."""
    def fn(part):
        n = len(part.rows) // 4
        part.gains = b""
        part.gain_exceptions = make(n)
    return fn


def partition_cases(stack, rows_per_sc):
    """(what, mutation of a StackPartitions, needles in the message)."""
    return [
        ("unknown stack", lambda p: setattr(p, "stack", "nope"), [".stack", "'nope'"]),
        ("empty stack name", lambda p: setattr(p, "stack", ""), [".stack", "unknown stack ''"]),
        ("sc_offsets too short", set_offsets(lambda o: o[:-1]), [".sc_offsets", "2 entries", "3"]),
        ("sc_offsets too long", set_offsets(lambda o: o + [o[-1]]), [".sc_offsets", "4 entries"]),
        ("sc_offsets not from 0", set_offsets(lambda o: [1] + o[1:]), [".sc_offsets", "start at 0", "got 1"]),
        ("sc_offsets short of the entries", set_offsets(lambda o: o[:-1] + [o[-1] - 1]),
         [".sc_offsets", "end at the entry count"]),
        ("sc_offsets beyond the entries", set_offsets(lambda o: o[:-1] + [o[-1] + 1]),
         [".sc_offsets", "end at the entry count"]),
        ("sc_offsets decreasing", set_offsets(lambda o: [0, o[2] + 1, o[2]]), [".sc_offsets[2]", "is below"]),
        ("sc_offsets past the entries", offsets_past_the_entries, [".sc_offsets[2]", "is below"]),
        ("rows shorter", lambda p: setattr(p, "rows", p.rows[:-4]), ["rows, samples and gains hold"]),
        ("samples longer", lambda p: setattr(p, "samples", p.samples + b"\0\0\0\0"), ["rows, samples and gains"]),
        ("gains shorter", lambda p: setattr(p, "gains", p.gains[:-4]), ["rows, samples and gains"]),
        ("entries of 6 bytes", lambda p: [setattr(p, f, getattr(p, f) + b"\0\0") for f in ("rows", "samples", "gains")],
         ["4 bytes per entry"]),
        ("row = rows_per_sc", set_last("row", rows_per_sc), ["row %d" % rows_per_sc, "SparseCore 1", "'%s'" % stack]),
        ("row = 2^32 - 1", set_last("row", 2 ** 32 - 1), ["row 4294967295"]),
        ("sample = total_sample_count", set_last("sample", BATCH), ["sample %d" % BATCH, "'%s'" % stack]),
        ("sample = 2^31", set_last("sample", 2 ** 31), ["sample 2147483648"]),
        ("NaN gain", set_last("gain", np.nan), ["gain", "nan"]),
        ("+Inf gain", set_last("gain", np.inf), ["gain inf"]),
        ("-Inf gain", set_last("gain", -np.inf), ["gain -inf"]),
        ("unsorted entries", swap_first_two, ["entry 1", "sorted by (row, sample)"]),
        ("repeated (row, sample)", repeat_first, ["entry 1", "without repeats"]),
        ("gains and gain_exceptions", lambda p: setattr(p, "gain_exceptions", pairs([(0, 2.0)])),
         ["gains (", "gain_exceptions (8 bytes)", "both set"]),
        ("gain_exceptions of 12 bytes", gains_as(lambda n: pairs([(0, 2.0)]) + bytes(4)),
         ["gain_exceptions holds 12 bytes", "multiple of 8"]),
        ("gain_exception entry = entry count", gains_as(lambda n: pairs([(0, 2.0), (n, 2.0)])),
         ["gain_exceptions pair 1", "not below the entry count"]),
        ("gain_exceptions repeating an entry", gains_as(lambda n: pairs([(1, 2.0), (1, 3.0)])),
         ["gain_exceptions pair 1", "entry 1", "must ascend"]),
        ("gain_exceptions descending", gains_as(lambda n: pairs([(2, 2.0), (0, 3.0)])),
         ["gain_exceptions pair 1", "entry 0", "must ascend"]),
        ("NaN gain_exception", gains_as(lambda n: pairs([(0, 2.0), (n - 1, float("nan"))])),
         ["gain_exceptions pair 1", "gain nan", "not finite"]),
        ("-Inf gain_exception", gains_as(lambda n: pairs([(0, -float("inf"))])),
         ["gain_exceptions pair 0", "gain -inf"]),
    ]


def by_row(sg):
    """Turns StackGradients sg (by sample, float32) into the same push by
    row: each SparseCore's distinct rows and their gradients summed in
    float32, entry by entry from zero, as the server sums them. Returns the
    per-SparseCore (rows, sums) it wrote."""
    part = sg.partitions
    rows, samples, gains = arrays(part)
    off = list(part.sc_offsets)
    dim = len(sg.gradients) // 4 // (int(samples.max()) + 1) if len(samples) else 0
    g = np.frombuffer(sg.gradients, "<f4").reshape(-1, dim) if dim else None
    out, new_off = [], [0]
    for k in range(len(off) - 1):
        r_k, s_k, w_k = rows[off[k]:off[k + 1]], samples[off[k]:off[k + 1]], gains[off[k]:off[k + 1]]
        distinct = sorted(set(int(x) for x in r_k))
        sums = np.zeros((len(distinct), g.shape[1]), dtype=np.float32)
        at = {r: i for i, r in enumerate(distinct)}
        for r, smp, w in zip(r_k, s_k, w_k):
            sums[at[int(r)]] += np.float32(w) * g[smp]
        out.append((np.array(distinct, dtype=np.uint32), sums))
        new_off.append(new_off[-1] + len(distinct))
    set_by_row(sg, out)
    return out


def set_by_row(sg, per_sc):
    part = sg.partitions
    part.ClearField("samples")
    part.ClearField("gains")
    part.ClearField("gain_exceptions")
    del part.sc_offsets[:]
    part.sc_offsets.extend(np.cumsum([0] + [len(r) for r, _ in per_sc]).tolist())
    part.rows = u32(np.concatenate([r for r, _ in per_sc]))
    sg.ClearField("gradients")
    sg.row_gradients = f32(np.concatenate([s for _, s in per_sc]))


def row_cases(rows_per_sc, dim):
    """(what, mutate(sg, per_sc), needles) for pushes by row."""
    def edit(fn):
        def mutate(sg, per_sc):
            fn(per_sc)
            set_by_row(sg, per_sc)
        return mutate

    def set_row(k, i, value):
        def fn(per_sc):
            per_sc[k][0][i] = value
        return fn

    def swap(per_sc):
        r = per_sc[1][0]
        r[0], r[1] = r[1], r[0]

    def repeat(per_sc):
        per_sc[1][0][1] = per_sc[1][0][0]

    def bad_sum(value):
        def fn(per_sc):
            per_sc[1][1][-1, dim - 1] = value
        return fn

    def grads(sg, fn):
        sg.row_gradients = fn(sg.row_gradients)

    return [
        ("row past rows_per_sc", edit(set_row(1, -1, rows_per_sc)), ["row %d not in [0, %d)" % (rows_per_sc, rows_per_sc)]),
        ("rows not ascending", edit(swap), ["strictly ascending", "SparseCore 1 row entry 1"]),
        ("row repeated", edit(repeat), ["strictly ascending"]),
        ("nan row gradient", edit(bad_sum(np.nan)), ["row_gradients", "of local SparseCore 1",
                                                     "column %d" % (dim - 1), "nan"]),
        ("inf row gradient", edit(bad_sum(np.inf)), ["row_gradients", "inf"]),
        ("row_gradients short", lambda sg, p: (set_by_row(sg, p), grads(sg, lambda b: b[:-4])),
         ["row_gradients", "x %d bytes (dim %d in float32)" % (4 * dim, dim)]),
        ("samples with row_gradients", lambda sg, p: (set_by_row(sg, p), setattr(sg.partitions, "samples", u32([0]))),
         ["by row", "must be empty", "hold 4, 0, 0 and 0"]),
        ("gradients and row_gradients", lambda sg, p: (set_by_row(sg, p), setattr(sg, "gradients", f32([0.0] * 4)),
                                                       setattr(sg.partitions, "samples", b"")),
         ["both set"]),
        ("sc_offsets past the rows", lambda sg, p: (set_by_row(sg, p), sg.partitions.sc_offsets.__setitem__(2, 999)),
         ["sc_offsets", "row count"]),
    ]


def exmy_cases(env, v, last):
    """FLOAT_FORMAT_EXMY and its ExmyFormat: each without the other, a
    format that is none, gradients of another format's size, and a row
    scale past float32's range (a value that is not finite). (Well formed
    eXmY traffic: test_wire_exmy.)"""
    pb = v.pb
    EXMY = pb.FLOAT_FORMAT_EXMY

    def act(x, y, fmt=EXMY, **kw):
        def fn(r):
            r.activation_format = fmt
            r.activation_exmy.CopyFrom(pb.ExmyFormat(exponent_bits=x, mantissa_bits=y, **kw))
        return fn
    v.expect("Lookup eXmY without its ExmyFormat", "Lookup",
             v.lookup_with(lambda r: setattr(r, "activation_format", EXMY)), "INVALID_ARGUMENT",
             ["activation_format 2", "ExmyFormat is missing"])
    v.expect("Lookup ExmyFormat with float32", "Lookup", v.lookup_with(act(4, 3, fmt=pb.FLOAT_FORMAT_FLOAT32)),
             "INVALID_ARGUMENT", ["activation_format 0", "FLOAT_FORMAT_EXMY"])
    for (x, y, kw), needle in (((9, 0, {}), "exponent_bits 9"), ((8, 8, {}), "mantissa_bits 8"),
                               ((4, 3, {"bias": 300}), "bias 300"), ((0, 0, {}), "mantissa_bits 0")):
        v.expect("Lookup ExmyFormat e%dm%d %s" % (x, y, kw), "Lookup", v.lookup_with(act(x, y, **kw)),
                 "INVALID_ARGUMENT", ["activation_format 2", needle, "not a format"])

    def grad(fn_bytes, row_scale=True):
        def fn(r):
            r.gradient_format = EXMY
            r.gradient_exmy.CopyFrom(pb.ExmyFormat(exponent_bits=4, mantissa_bits=3, row_scale=row_scale))
            for k, s in enumerate(r.stacks):
                s.gradients = fn_bytes(k, len(s.gradients) // 4)
        return fn
    dims = (8, 16)
    v.expect("ApplyGradients e4m3 of float32 size", "ApplyGradients",
             v.apply_with(grad(lambda k, n: bytes(4 * n), row_scale=False)), "INVALID_ARGUMENT",
             ["stacks[0].gradients", "e4m3", "x 8 bytes (dim 8", "= %d" % (BATCH * 8)])

    def scale_127(k, n):
        rows = bytearray(bytes((dims[k] + 1) * (n // dims[k])))
        if k == 1:
            rows[(dims[k] + 1) * (BATCH - 1) + dims[k]] = 127
        return bytes(rows)
    v.expect("ApplyGradients e4m3s scale 127", "ApplyGradients", v.apply_with(grad(scale_127)), "INVALID_ARGUMENT",
             ["stacks[1].gradients", "sample %d" % (BATCH - 1), "inf"])


def placed_request_cases(env, v):
    """A Lookup whose request lies in shared memory (request_placement):
    with other fields, in no segment of this process, or over the size
    limit, each refused with nothing looked up; in a segment attached here,
    answered as on the connection, unless the placed request names
    request_placement itself."""
    def envelope(segment=bytes(16), offset=0, length=64, fields=False):
        r = v.pb.LookupRequest()
        if fields:
            r.CopyFrom(v.lookup)
        r.request_placement.segment, r.request_placement.offset = segment, offset
        r.request_placement.length = length
        return r
    v.expect("Lookup placed request with other fields", "Lookup", envelope(fields=True), "INVALID_ARGUMENT",
             ["request_placement", "other fields"])
    v.expect("Lookup placed request, unknown segment", "Lookup", envelope(), "FAILED_PRECONDITION",
             ["request_placement", "no segment attached to this process", "nothing was looked up"])
    v.expect("Lookup placed request over the size limit", "Lookup", envelope(length=(MAX_MB << 20) + 1),
             "RESOURCE_EXHAUSTED", ["request_placement", str(MAX_MB << 20), "--max-message-mb"])
    cfg = v.stub.GetConfig(v.pb.GetConfigRequest(), timeout=30)
    if not env.check(cfg.shm_socket != "", "GetConfig names the side channel's socket"):
        return
    body = v.lookup.SerializeToString()
    side, seg, handle = attach_segment(env, cfg.shm_socket, 1 << 20)
    try:
        at = 4096
        seg[at:at + len(body)] = body
        got = v.stub.Lookup(envelope(handle, at, len(body)), timeout=30).SerializeToString()
        env.check(got == v.before, "Lookup whose request lies in a segment answered as on the connection")
        print("   ok %-45s %d bytes read from the segment" % ("Lookup placed request", len(body)), flush=True)
        v.expect("Lookup placed request, range past the segment", "Lookup", envelope(handle, (1 << 20) - 8, 64),
                 "FAILED_PRECONDITION", ["request_placement", "[1048568, 1048632)"])
        v.expect("Lookup placed request, garbage in the segment", "Lookup", envelope(handle, 0, 6),
                 "INVALID_ARGUMENT", ["request_placement", "the placed request"])
        nested = envelope(handle, at, len(body)).SerializeToString()
        seg[0:len(nested)] = nested
        v.expect("Lookup placed request placing itself", "Lookup", envelope(handle, 0, len(nested)),
                 "INVALID_ARGUMENT", ["request_placement", "sets request_placement itself"])
    finally:
        seg.close()
        side.close()


def test_invalid_requests(env):
    cfg = env.write_config("validation", BATCH, TABLES, FEATURES)
    srv = env.server(cfg, extra=["--max-message-mb", str(MAX_MB)]).wait_ready()
    v = Validation(env, srv)
    pb = v.pb
    fp = v.cl.fingerprint
    env.check(v.cl.configs[0].max_message_bytes == MAX_MB << 20,
              "GetConfig max_message_bytes %d" % v.cl.configs[0].max_message_bytes)

    # Lookup: every partition rule, on each stack in turn.
    for k, stack in enumerate(("a", "b")):
        for what, mutate, needles in partition_cases(stack, ROWS_PER_SC[stack]):
            needles = ["stacks[%d]" % k] + needles
            v.expect("Lookup %s (stacks[%d])" % (what, k), "Lookup",
                     v.lookup_with(lambda r: mutate(r.stacks[k])), "INVALID_ARGUMENT", needles)
    def twice(stacks):
        stacks[1].CopyFrom(stacks[0])

    v.expect("Lookup stack listed twice", "Lookup", v.lookup_with(lambda r: twice(r.stacks)),
             "INVALID_ARGUMENT", ["stacks[1]", "'a'", "listed twice"])
    # Each entry costs the server far more than its bytes: more entries than
    # it has stacks are refused while decoding.
    v.expect("Lookup more stacks than the server's", "Lookup",
             v.lookup_with(lambda r: r.stacks.append(r.stacks[0])), "INVALID_ARGUMENT",
             ["stacks", "more than 2 entries"])
    v.expect("Lookup 0.5 MB of empty stacks entries", "Lookup", b"\x1a\x00" * (1 << 18), "INVALID_ARGUMENT",
             ["more than 2 entries"])

    def drop_second(r):
        del r.stacks[1]

    # A key starting at the end of a stacks entry and ending in the request
    # around it (as protobuf itself refuses).
    v.expect("Lookup key across a stacks entry's end", "Lookup",
             v.lookup_with(drop_second).SerializeToString() + b"\x1a\x01\x80\x01\x00",
             "INVALID_ARGUMENT", ["runs past the end of its message"])
    for flags in ([True], [False, True, True]):
        v.expect("Lookup %d distinct_rows flags" % len(flags), "Lookup",
                 v.lookup_with(lambda r: r.distinct_rows.extend(flags)), "INVALID_ARGUMENT",
                 ["distinct_rows", "%d flags for 2 stacks" % len(flags)])
    v.expect("Lookup distinct_rows packed past its end", "Lookup", v.lookup.SerializeToString() + b"\x2a\x05\x01",
             "INVALID_ARGUMENT", ["scps.v1.LookupRequest"])
    # Flags one varint each (unpacked), which proto3 parsers must take too.
    raw = v.channel.unary_unary(SERVICE + "Lookup", request_serializer=None,
                                response_deserializer=pb.LookupResponse.FromString)
    resp = raw(v.lookup.SerializeToString() + b"\x28\x01\x28\x00", timeout=30)
    env.check(len(resp.stacks) == 2 and len(resp.stacks[0].rows) > 0 and not resp.stacks[0].activations
              and len(resp.stacks[1].activations) > 0 and not resp.stacks[1].rows,
              "Lookup with unpacked distinct_rows [true, false]: rows for stacks[0], activations for stacks[1]")
    # Samples as uint16 (samples_u16): the same answer; with samples too, or
    # of the wrong length, refused.
    def as_u16(part):
        part.samples_u16 = np.frombuffer(part.samples, "<u4").astype("<u2").tobytes()
        part.ClearField("samples")
    got = v.stub.Lookup(v.lookup_with(lambda r: [as_u16(p) for p in r.stacks]), timeout=30).SerializeToString()
    env.check(got == v.before, "Lookup with samples_u16 answers as with samples")
    v.expect("Lookup samples and samples_u16", "Lookup", v.lookup_with(
        lambda r: setattr(r.stacks[1], "samples_u16", bytes(len(r.stacks[1].samples) // 2))), "INVALID_ARGUMENT",
        ["stacks[1]", "samples", "samples_u16", "both set"])
    v.expect("Lookup samples_u16 short", "Lookup", v.lookup_with(
        lambda r: (as_u16(r.stacks[0]), setattr(r.stacks[0], "samples_u16", r.stacks[0].samples_u16[:-2]))),
        "INVALID_ARGUMENT", ["stacks[0]", "samples_u16 holds", "need 2 each"])
    v.expect("Lookup samples_u16 with rows of 6 bytes", "Lookup", v.lookup_with(
        lambda r: (as_u16(r.stacks[0]), setattr(r.stacks[0], "rows", r.stacks[0].rows + b"\0\0"))),
        "INVALID_ARGUMENT", ["stacks[0].rows", "bytes, not 4 bytes per entry"])
    bad = bytes([fp[0] ^ 1]) + fp[1:]
    v.expect("Lookup wrong fingerprint", "Lookup", v.lookup_with(lambda r: setattr(r, "config_fingerprint", bad)),
             "FAILED_PRECONDITION", ["config_fingerprint", hex12(bad), hex12(fp)])
    v.expect("Lookup short fingerprint", "Lookup",
             v.lookup_with(lambda r: setattr(r, "config_fingerprint", fp[:31])), "FAILED_PRECONDITION",
             ["config_fingerprint"])
    v.expect("Lookup without fingerprint", "Lookup", v.lookup_with(lambda r: r.ClearField("config_fingerprint")),
             "FAILED_PRECONDITION", ["config_fingerprint"])
    for idx in (1, -1):
        v.expect("Lookup process_index %d" % idx, "Lookup", v.lookup_with(lambda r: setattr(r, "process_index", idx)),
                 "FAILED_PRECONDITION", ["process_index %d" % idx, "process 0"])

    # ApplyGradients: the same partition rules on the second stack, so the
    # first, valid stack shows that nothing is applied before all is checked.
    for what, mutate, needles in partition_cases("b", ROWS_PER_SC["b"]):
        v.expect("ApplyGradients %s" % what, "ApplyGradients",
                 v.apply_with(lambda r: mutate(r.stacks[1].partitions)), "INVALID_ARGUMENT",
                 ["stacks[1].partitions"] + needles)
    v.expect("ApplyGradients stack listed twice", "ApplyGradients",
             v.apply_with(lambda r: twice(r.stacks)), "INVALID_ARGUMENT",
             ["stacks[1]", "'a'", "listed twice"])
    v.expect("ApplyGradients more stacks than the server's", "ApplyGradients",
             v.apply_with(lambda r: r.stacks.append(r.stacks[0])), "INVALID_ARGUMENT",
             ["stacks", "more than 2 entries"])
    v.expect("ApplyGradients partitions missing", "ApplyGradients",
             v.apply_with(lambda r: r.stacks[1].ClearField("partitions")), "INVALID_ARGUMENT",
             ["stacks[1].partitions", "missing"])
    need_b = BATCH * 16 * 4
    v.expect("ApplyGradients gradients short", "ApplyGradients",
             v.apply_with(lambda r: setattr(r.stacks[1], "gradients", r.stacks[1].gradients[:-4])),
             "INVALID_ARGUMENT", ["stacks[1].gradients", "%d bytes" % (need_b - 4), str(need_b)])
    v.expect("ApplyGradients gradients long", "ApplyGradients",
             v.apply_with(lambda r: setattr(r.stacks[1], "gradients", r.stacks[1].gradients + bytes(64))),
             "INVALID_ARGUMENT", ["stacks[1].gradients", "%d bytes" % (need_b + 64)])
    v.expect("ApplyGradients gradients empty", "ApplyGradients",
             v.apply_with(lambda r: r.stacks[1].ClearField("gradients")), "INVALID_ARGUMENT",
             ["stacks[1].partitions", "gradients field is empty", "by row", "must be empty", "hold 64, 0, 64 and 0"])
    # Gradients by sample through shared memory (StackGradients.placed_gradients):
    # a range no segment of this process holds, none named, a length that is
    # not the stacks', and placed with the bytes as well, each applying nothing.
    def placed(r, segment=bytes(16), offset=0, length=need_b, keep=False):
        if not keep:
            r.stacks[1].ClearField("gradients")
        r.stacks[1].placed_gradients = need_b
        if segment is not None:
            r.gradients_placement.segment = segment
            r.gradients_placement.offset = offset
            r.gradients_placement.length = length
    v.expect("ApplyGradients placed, unknown segment", "ApplyGradients", v.apply_with(placed), "FAILED_PRECONDITION",
             ["gradients_placement", "no segment attached to this process", "nothing was applied"])
    v.expect("ApplyGradients placed, no placement", "ApplyGradients",
             v.apply_with(lambda r: placed(r, segment=None)), "INVALID_ARGUMENT", ["gradients_placement: missing"])
    v.expect("ApplyGradients placed, length differs", "ApplyGradients",
             v.apply_with(lambda r: placed(r, length=need_b + 4)), "INVALID_ARGUMENT",
             ["gradients_placement: length differs", str(need_b)])
    v.expect("ApplyGradients placed and gradients", "ApplyGradients",
             v.apply_with(lambda r: placed(r, keep=True)), "INVALID_ARGUMENT",
             ["stacks[1]", "placed_gradients", "both set"])
    v.expect("ApplyGradients placed, too large", "ApplyGradients",
             v.apply_with(lambda r: setattr(r.stacks[1], "placed_gradients", 1 << 40)), "INVALID_ARGUMENT",
             ["placed_gradients", "more than a segment holds"])
    # A Lookup asking for a placement the process cannot honour (no such
    # segment; an offset not a multiple of 64) is answered in the response.
    for offset in (0, 8):
        def place(r, offset=offset):
            r.placement.segment, r.placement.offset, r.placement.length = bytes(16), offset, 1 << 20
        got = v.stub.Lookup(v.lookup_with(place), timeout=30).SerializeToString()
        env.check(got == v.before, "Lookup with an unknown placement (offset %d) answered in the response" % offset)
    placed_request_cases(env, v)
    # The same stack by row (StackGradients.row_gradients).
    for what, mutate, needles in row_cases(ROWS_PER_SC["b"], 16):
        v.expect("ApplyGradients by row: %s" % what, "ApplyGradients", v.apply_with(
            lambda r: mutate(r.stacks[1], by_row(r.stacks[1]))), "INVALID_ARGUMENT", ["stacks[1]"] + needles)

    def bad_grad(value, at):
        def fn(r):
            g = np.frombuffer(r.stacks[1].gradients, "<f4").copy()
            g[at] = value
            r.stacks[1].gradients = f32(g)
        return fn

    last = BATCH * 16 - 1
    for value, name in ((np.nan, "nan"), (np.inf, "inf"), (-np.inf, "-inf")):
        v.expect("ApplyGradients %s gradient" % name, "ApplyGradients", v.apply_with(bad_grad(value, last)),
                 "INVALID_ARGUMENT", ["stacks[1].gradients", "element %d" % last, "sample %d" % (BATCH - 1),
                                      "column 15", name])
    v.expect("ApplyGradients NaN in a padding column", "ApplyGradients", v.apply_with(bad_grad(np.nan, 13)),
             "INVALID_ARGUMENT", ["stacks[1].gradients", "element 13", "sample 0", "column 13"])
    v.expect("ApplyGradients all-NaN first stack", "ApplyGradients", v.apply_with(
        lambda r: setattr(r.stacks[0], "gradients", f32(np.full(BATCH * 8, np.nan)))), "INVALID_ARGUMENT",
        ["stacks[0].gradients", "element 0"])
    v.expect("Lookup activation_format 7", "Lookup", v.lookup_with(lambda r: setattr(r, "activation_format", 7)),
             "INVALID_ARGUMENT", ["activation_format 7", "unknown FloatFormat"])
    v.expect("ApplyGradients gradient_format 9", "ApplyGradients",
             v.apply_with(lambda r: setattr(r, "gradient_format", 9)), "INVALID_ARGUMENT",
             ["gradient_format 9", "unknown FloatFormat"])
    # float32-sized gradients announced as bfloat16: twice the bytes needed.
    v.expect("ApplyGradients bfloat16 of float32 size", "ApplyGradients",
             v.apply_with(lambda r: setattr(r, "gradient_format", pb.FLOAT_FORMAT_BFLOAT16)), "INVALID_ARGUMENT",
             ["stacks[0].gradients", "bfloat16", str(BATCH * 8 * 2)])

    def bf16_nan(r):
        r.gradient_format = pb.FLOAT_FORMAT_BFLOAT16
        for s in r.stacks:
            g = np.frombuffer(s.gradients, "<f4")
            h = (g.view("<u4") >> 16).astype("<u2")
            s.gradients = h.tobytes()
        h = np.frombuffer(r.stacks[1].gradients, "<u2").copy()
        h[last] = 0x7fc0
        r.stacks[1].gradients = h.tobytes()
    v.expect("ApplyGradients bfloat16 NaN", "ApplyGradients", v.apply_with(bf16_nan), "INVALID_ARGUMENT",
             ["stacks[1].gradients", "element %d" % last, "nan"])
    exmy_cases(env, v, last)

    def overflowing(bf16):
        """Every gain of stack b 4.0 and every gradient 1e38: each finite,
        gain x gradient is not."""
        def fn(r):
            part = r.stacks[1].partitions
            rows, samples, gains = arrays(part)
            set_arrays(part, rows, samples, np.full(len(gains), 4.0, dtype=np.float32))
            g = np.full(len(r.stacks[1].gradients) // 4, 1e38, dtype=np.float32)
            r.stacks[1].gradients = f32(g)
            if bf16:
                r.gradient_format = pb.FLOAT_FORMAT_BFLOAT16
                for st in r.stacks:
                    h = np.frombuffer(st.gradients, "<u4") >> 16
                    st.gradients = h.astype("<u2").tobytes()
        return fn
    for bf16 in (False, True):
        v.expect("ApplyGradients sum overflows%s" % (" (bfloat16)" if bf16 else ""), "ApplyGradients",
                 v.apply_with(overflowing(bf16)), "INVALID_ARGUMENT",
                 ["stacks[1].gradients", "local SparseCore 0", "overflows float32", "each gradient is finite"])
    v.expect("ApplyGradients step -1", "ApplyGradients", v.apply_with(lambda r: setattr(r, "step", -1)),
             "INVALID_ARGUMENT", ["step -1"])
    for lr, name in ((-0.5, "-0.5"), (float("nan"), "nan"), (float("inf"), "inf"), (-0.0 - 1e-30, "-1e-30"),
                     (3.5e38, "3.5e+38")):
        v.expect("ApplyGradients learning_rate %s" % name, "ApplyGradients",
                 v.apply_with(lambda r: setattr(r, "learning_rate", lr)), "INVALID_ARGUMENT",
                 ["learning_rate %s" % name])
    v.expect("ApplyGradients wrong fingerprint", "ApplyGradients",
             v.apply_with(lambda r: setattr(r, "config_fingerprint", bad)), "FAILED_PRECONDITION",
             ["config_fingerprint", hex12(bad)])
    v.expect("ApplyGradients process_index 3", "ApplyGradients",
             v.apply_with(lambda r: setattr(r, "process_index", 3)), "FAILED_PRECONDITION", ["process_index 3"])

    # GetConfig with an `expected` declaration.
    own = v.cl.configs[0].cluster
    ok, details, resp = call_status(v.stub.GetConfig, pb.GetConfigRequest(expected=own), timeout=30)
    env.check(ok == "OK" and resp.config_fingerprint == fp, "GetConfig with the server's own declaration: %s %s"
              % (ok, details))

    def expected_with(fn):
        c = pb.ClusterSpec()
        c.CopyFrom(own)
        fn(c)
        return pb.GetConfigRequest(expected=c)

    tb = [t.name for t in own.tables].index("b")
    fb = [f.name for f in own.features].index("fb")
    def dim_32(c):
        c.tables[tb].embedding_dim = 32
        c.features[fb].output_dim = 32

    v.expect("GetConfig other embedding_dim", "GetConfig", expected_with(dim_32), "FAILED_PRECONDITION",
             ["'b'", "embedding_dim", "32", "12"])
    v.expect("GetConfig other num_processes", "GetConfig",
             expected_with(lambda c: setattr(c.topology, "num_processes", 2)), "FAILED_PRECONDITION",
             ["num_processes", "2", "1"])
    v.expect("GetConfig other batch_size", "GetConfig",
             expected_with(lambda c: setattr(c.features[fb], "batch_size", 16)), "FAILED_PRECONDITION",
             ["'fb'", "batch_size", "16", "8"])
    v.expect("GetConfig other learning_rate", "GetConfig",
             expected_with(lambda c: setattr(c.tables[tb].optimizer, "learning_rate", 0.25)),
             "FAILED_PRECONDITION", ["'b'", "learning_rate"])
    # Fields compared for what they mean: output_dim 0 is the table's
    # embedding_dim, and what the table's optimizer (sgd), initializer
    # (uniform) and clipping (off) do not read is not compared.
    for what, fn in (
            ("output_dim 0", lambda c: setattr(c.features[fb], "output_dim", 0)),
            ("explicit output_dims", lambda c: [setattr(f, "output_dim", next(
                t.embedding_dim for t in c.tables if t.name == f.table)) for f in c.features]),
            ("sgd with adam's and ftrl's fields", lambda c: [
                setattr(c.tables[tb].optimizer, k, x) for k, x in (("beta1", 0.25), ("epsilon", 3.0),
                                                                   ("initial_accumulator", 7.0), ("l1", 2.0),
                                                                   ("multiply_linear_by_learning_rate", True))]),
            ("uniform with stddev and value", lambda c: [setattr(c.tables[tb].initializer, k, 9.0)
                                                         for k in ("stddev", "value")]),
            ("clip bounds without clip", lambda c: [setattr(c.tables[tb], k, x) for k, x in (("clip_min", 3.0),
                                                                                          ("clip_max", -1.0))])):
        got, details, resp = call_status(v.stub.GetConfig, expected_with(fn), timeout=30)
        if env.check(got == "OK" and resp.config_fingerprint == fp,
                     "GetConfig expected with %s: %s %r, expected OK with the same fingerprint" % (what, got, details)):
            print("   ok GetConfig expected with %-30s OK" % what, flush=True)
    v.expect("GetConfig other clip", "GetConfig", expected_with(lambda c: setattr(c.tables[tb], "clip", True)),
             "FAILED_PRECONDITION", ["'b'", "clip"])
    v.expect("GetConfig other uniform scale", "GetConfig",
             expected_with(lambda c: setattr(c.tables[tb].initializer, "scale", 0.25)), "FAILED_PRECONDITION",
             ["'b'", "initializer.scale", "0.25", "0.5"])
    v.expect("GetConfig invalid expected", "GetConfig",
             expected_with(lambda c: setattr(c.tables[tb], "combiner", pb.COMBINER_UNSPECIFIED)),
             "INVALID_ARGUMENT", ["expected", "combiner"])
    # Declarations no server could serve are the client's mistake, not
    # another cluster: INVALID_ARGUMENT, as the server's --config would.
    for what, fn, needles in (
            ("embedding_dim 0", lambda c: setattr(c.tables[tb], "embedding_dim", 0), ["'b'", "embedding_dim"]),
            ("vocabulary_size -1", lambda c: setattr(c.tables[tb], "vocabulary_size", -1), ["'b'", "-1"]),
            ("num_processes 0", lambda c: setattr(c.topology, "num_processes", 0), ["num_processes"]),
            ("feature of no table", lambda c: setattr(c.features[fb], "table", "zz"), ["'fb'", "zz"])):
        v.expect("GetConfig expected %s" % what, "GetConfig", expected_with(fn), "INVALID_ARGUMENT",
                 ["expected:"] + needles)
    # Decoding takes at most 16x a small request's bytes (plus 1 MiB): empty
    # TableSpecs take 80x, unknown fields as much.
    v.expect("GetConfig 0.5 MB of empty TableSpecs", "GetConfig",
             b"\x0a\x80\x80\x20" + b"\x12\x00" * (1 << 18), "RESOURCE_EXHAUSTED",
             ["GetConfig", "524292 bytes", "memory to decode"])
    v.expect("Health 0.5 MB of unknown fields", "Health", b"\x78\x00" * (1 << 18), "RESOURCE_EXHAUSTED",
             ["Health", "memory to decode"])

    # Bytes that are not the request message.
    good = v.lookup.SerializeToString()
    v.expect("Lookup garbage bytes", "Lookup", b"\xff" * 40, "INVALID_ARGUMENT",
             ["Lookup", "40 bytes", "not a valid", "LookupRequest"])
    v.expect("Lookup truncated", "Lookup", good[:-3], "INVALID_ARGUMENT", ["%d bytes" % (len(good) - 3)])
    v.expect("Lookup cut in the first stack", "Lookup", good[:60], "INVALID_ARGUMENT", ["not a valid"])
    agood = v.apply.SerializeToString()
    v.expect("ApplyGradients truncated", "ApplyGradients", agood[:-1], "INVALID_ARGUMENT",
             ["ApplyGradients", "not a valid", "ApplyGradientsRequest"])
    v.expect("GetConfig garbage bytes", "GetConfig", b"\x0a\xff\xff\xff\xff\x0f", "INVALID_ARGUMENT",
             ["GetConfig", "not a valid"])
    v.expect("Lookup empty message", "Lookup", b"", "FAILED_PRECONDITION", ["config_fingerprint"])

    # Over --max-message-mb: RESOURCE_EXHAUSTED, naming the limit.
    limit = MAX_MB << 20
    big = v.lookup_with(lambda r: setattr(r.stacks[0], "rows", bytes(limit)))
    v.expect("Lookup over the size limit", "Lookup", big, "RESOURCE_EXHAUSTED", [str(limit)])
    biga = v.apply_with(lambda r: setattr(r.stacks[0], "gradients", bytes(limit + 8)))
    v.expect("ApplyGradients over the size limit", "ApplyGradients", biga, "RESOURCE_EXHAUSTED", [str(limit)])

    # Methods the server does not serve.
    for path in (SERVICE + "Train", "/grpc.health.v1.Health/Watch"):
        fn = v.channel.unary_unary(path, request_serializer=None, response_deserializer=None)
        got, details, _ = call_status(fn, b"", timeout=30)
        env.check(got == "UNIMPLEMENTED" and path in details, "%s: %s %r, expected UNIMPLEMENTED naming it"
                  % (path, got, details))

    # The counters saw every rejection, and the server still works: a valid
    # ApplyGradients does change the tables (so the checks above could fail).
    st = v.stub.Stats(pb.StatsRequest(), timeout=30)
    for m in st.methods:
        if m.method in v.rejected:
            env.check(m.errors == v.rejected[m.method], "Stats %s errors %d, %d rejected"
                      % (m.method, m.errors, v.rejected[m.method]))
    for s in st.stacks:
        env.check(s.rows_updated == 0, "stack %s: no row updated by a rejected request" % s.stack)
    resp = v.stub.ApplyGradients(v.apply, timeout=30)
    env.check(resp.rows_updated > 0, "the valid ApplyGradients updates rows")
    after = v.stub.Lookup(v.lookup, timeout=30).SerializeToString()
    env.check(after != v.before, "a valid ApplyGradients changes what Lookup returns")


def test_gain_forms(env):
    """A request with gain_exceptions (or, every gain 1.0, neither field)
    means what the same request with every gain does: Lookup returns the
    same bytes and ApplyGradients leaves the same tables, on two servers
    started alike. Stack a's gains are all 1.0, b's (mean) are not, and
    one entry of a's is set to 2.5 in the second round."""
    cfg = env.write_config("gain_forms", BATCH, TABLES, FEATURES)
    dense_srv, sparse_srv = env.server(cfg).wait_ready(), env.server(cfg).wait_ready()
    dense, sparse = Validation(env, dense_srv), Validation(env, sparse_srv)
    for rnd in range(2):
        look, apply = dense.lookup_with(lambda r: None), dense.apply_with(lambda r: None)
        if rnd == 1:
            for part in (look.stacks[0], apply.stacks[0].partitions):
                g = np.frombuffer(part.gains, "<f4").copy()
                g[3] = 2.5
                part.gains = f32(g)
        look_x, apply_x = type(look)(), type(apply)()
        look_x.CopyFrom(look)
        apply_x.CopyFrom(apply)
        for part in list(look_x.stacks) + [s.partitions for s in apply_x.stacks]:
            exceptions_of(part)
        a = look_x.stacks[0]
        env.check(not a.gains and len(a.gain_exceptions) == 8 * rnd,
                  "round %d: stack a sends %d bytes of gain_exceptions" % (rnd, len(a.gain_exceptions)))
        env.check(len(look_x.stacks[1].gain_exceptions) == 2 * len(look.stacks[1].gains) > 0,
                  "round %d: stack b (mean of 2 ids: gains 0.5) lists every entry" % rnd)
        want = dense.stub.Lookup(look, timeout=30).SerializeToString()
        got = sparse.stub.Lookup(look_x, timeout=30).SerializeToString()
        env.check(got == want, "round %d: Lookup with gain_exceptions returns the same bytes" % rnd)
        dense.stub.ApplyGradients(apply, timeout=30)
        sparse.stub.ApplyGradients(apply_x, timeout=30)
        after_d = dense.stub.Lookup(look, timeout=30).SerializeToString()
        after_s = sparse.stub.Lookup(look, timeout=30).SerializeToString()
        env.check(after_d == after_s and after_d != want,
                  "round %d: ApplyGradients with gain_exceptions leaves the same tables" % rnd)


def test_row_gradients(env):
    """A push by row (row_gradients: each SparseCore's distinct rows and
    their summed gradients) leaves exactly the tables the same push by
    sample leaves, on two servers started alike, rows_updated alike."""
    cfg = env.write_config("row_gradients", BATCH, TABLES, FEATURES)
    a_srv, b_srv = env.server(cfg).wait_ready(), env.server(cfg).wait_ready()
    by_sample, by_row_v = Validation(env, a_srv), Validation(env, b_srv)
    env.check(by_sample.before == by_row_v.before, "both servers start with the same tables")
    for step in range(1, 4):
        apply = by_sample.apply_with(lambda r: setattr(r, "step", step))
        rows_apply = by_sample.apply_with(lambda r: setattr(r, "step", step))
        per_stack = [by_row(sg) for sg in rows_apply.stacks]
        env.check(all(len(sg.gradients) == 0 and len(sg.partitions.samples) == 0 for sg in rows_apply.stacks),
                  "step %d: the by-row request carries no samples and no per-sample gradients" % step)
        distinct = sum(len(r) for per_sc in per_stack for r, _ in per_sc)
        got_a = by_sample.stub.ApplyGradients(apply, timeout=30).rows_updated
        got_b = by_row_v.stub.ApplyGradients(rows_apply, timeout=30).rows_updated
        env.check(got_a == got_b == distinct, "step %d: rows_updated by sample %d, by row %d, distinct rows %d"
                  % (step, got_a, got_b, distinct))
        after_a = by_sample.stub.Lookup(by_sample.lookup, timeout=30).SerializeToString()
        after_b = by_row_v.stub.Lookup(by_sample.lookup, timeout=30).SerializeToString()
        env.check(after_a == after_b and after_a != by_sample.before,
                  "step %d: by row and by sample leave bit-identical tables" % step)
    def checked(v):
        return v.stub.Stats(env.pb.StatsRequest(), timeout=30).pushes_sums_checked
    env.check(checked(by_sample) == 0 and checked(by_row_v) == 0,
              "no row sums checked for ordinary gradients (%d, %d)" % (checked(by_sample), checked(by_row_v)))

    # Gradients of 1e38: no row's sum overflows, but the server's bound on
    # the sums cannot rule it out, so it sums them once to check before it
    # updates (Stats.pushes_sums_checked); the tables must still come out as
    # by row, which needs no check.
    def huge(r):
        r.step = 4
        g = np.frombuffer(r.stacks[1].gradients, "<f4")
        r.stacks[1].gradients = f32(np.where(g < 0, -1e38, 1e38).astype(np.float32))
    apply, rows_apply = by_sample.apply_with(huge), by_sample.apply_with(huge)
    for sg in rows_apply.stacks:
        by_row(sg)
    got_a = by_sample.stub.ApplyGradients(apply, timeout=30).rows_updated
    got_b = by_row_v.stub.ApplyGradients(rows_apply, timeout=30).rows_updated
    after_a = by_sample.stub.Lookup(by_sample.lookup, timeout=30).SerializeToString()
    after_b = by_row_v.stub.Lookup(by_sample.lookup, timeout=30).SerializeToString()
    env.check(got_a == got_b and after_a == after_b, "gradients of 1e38: by sample (checked sums) and by row leave "
              "bit-identical tables (rows_updated %d, %d)" % (got_a, got_b))
    env.check(checked(by_sample) == 1 and checked(by_row_v) == 0, "gradients of 1e38: row sums checked by sample "
              "once (%d), by row never (%d)" % (checked(by_sample), checked(by_row_v)))
    print("   ok pushes by row and by sample: same tables after 3 steps and one of 1e38 gradients", flush=True)


def test_large_messages(env):
    """total_sample_count x dim x 4 = 8192 x 256 x 4 = 8 MiB activations and
    gradients: over gRPC's default 4 MiB in both directions."""
    batch, dim, vocab = 8192, 256, 1000
    cfg = env.write_config("large", batch, [
        {"name": "big", "vocabulary_size": vocab, "embedding_dim": dim, "combiner": "sum",
         "optimizer": {"type": "sgd", "learning_rate": 0.5}, "initializer": {"type": "uniform", "scale": 0.5},
         "max_ids_per_partition": 2 * batch, "max_unique_ids_per_partition": vocab}],
        [{"name": "fbig", "table": "big", "valency": 2}])
    srv = env.server(cfg).wait_ready()
    cl = Cluster(env, [srv])
    ids = list(range(vocab))
    rows = cl.read_rows("big", ids)
    env.check(rows.shape == (vocab, dim) and np.unique(rows, axis=0).shape[0] == vocab,
              "rows read through an 8 MiB Lookup response")
    samples = [[(s % vocab, 1.0), ((7 * s + 3) % vocab, 0.5)] for s in range(batch)]
    got = cl.lookup({"fbig": samples})["fbig"]
    exp = np.array([rows[s % vocab] + 0.5 * rows[(7 * s + 3) % vocab] for s in range(batch)])
    env.check(np.allclose(got, exp, rtol=1e-5, atol=1e-6), "8 MiB Lookup response: every sample's combination")

    # An 8 MiB ApplyGradients request: every sample touches row s % vocab.
    rng = np.random.default_rng(5)
    g = (rng.integers(-16, 17, size=(batch, dim)) / 8.0).astype(np.float32)
    req_samples = [[(s % vocab, 1.0)] for s in range(batch)]
    upd = cl.apply({"fbig": req_samples}, {"fbig": g})
    env.check(upd == [vocab], "rows_updated %s == [%d]" % (upd, vocab))
    gsum = np.zeros((vocab, dim), dtype=np.float32)
    for s in range(batch):
        gsum[s % vocab] += g[s]
    after = cl.read_rows("big", ids)
    want = rows.astype(np.float32) - np.float32(0.5) * gsum
    env.check(np.array_equal(after.astype(np.float32), want), "8 MiB ApplyGradients request applied exactly")
    st = cl.stubs[0].Stats(env.pb.StatsRequest(), timeout=30)
    m = {x.method: x for x in st.methods}
    env.check(m["Lookup"].bytes_sent > 3 * (8 << 20), "Stats Lookup bytes_sent %d" % m["Lookup"].bytes_sent)
    env.check(m["ApplyGradients"].bytes_received > 8 << 20,
              "Stats ApplyGradients bytes_received %d" % m["ApplyGradients"].bytes_received)


def test_ftrl_rate(env):
    """FTRL divides by the learning rate: a push whose rate is 0 in float32
    (0 itself, or 1e-46) is refused when it lists an FTRL stack, and
    accepted for the others."""
    tables = [TABLES[0], dict(TABLES[1], name="f", optimizer={"type": "ftrl", "learning_rate": 0.5})]
    features = [FEATURES[0], dict(FEATURES[1], table="f")]
    srv = env.server(env.write_config("ftrl_rate", BATCH, tables, features)).wait_ready()
    v = Validation(env, srv, stacks=("a", "f"))
    for lr, name in ((0.0, "0"), (1e-46, "1e-46")):
        v.expect("ApplyGradients learning_rate %s with an ftrl stack" % name, "ApplyGradients",
                 v.apply_with(lambda r: setattr(r, "learning_rate", lr)), "INVALID_ARGUMENT",
                 ["learning_rate %s" % name, "stacks[1]", "'f'", "ftrl"])

    def sgd_only(r):
        r.learning_rate = 0.0
        del r.stacks[1]

    # An SGD step with rate 0 leaves the tables as they were: OK, unchanged.
    v.expect("ApplyGradients learning_rate 0, sgd stack only", "ApplyGradients", v.apply_with(sgd_only), "OK", [])


def test_failed_checkpoint(env):
    """A Checkpoint that cannot be written leaves the limits in force as
    they were; one that is written puts its limits in force. Directories
    are relative to --checkpoint-dir; limits are bounded."""
    root = os.path.join(env.tmp, "failed_checkpoint_root")
    os.makedirs(root)
    with open(os.path.join(root, "plainfile"), "w"):
        pass
    srv = env.server(env.write_config("failed_checkpoint", BATCH, TABLES, FEATURES),
                     extra=("--checkpoint-dir", root, "--checkpoint-min-interval", "0")).wait_ready()
    v = Validation(env, srv)
    pb = v.pb

    def limits_of_a():
        cfg = v.stub.GetConfig(pb.GetConfigRequest(), timeout=30)
        a = next(s for s in cfg.stacks if s.name == "a")
        return a.max_ids_per_partition, a.max_unique_ids_per_partition

    before = limits_of_a()
    env.check(before != (999, 998), "stack a's limits start elsewhere: %s" % (before,))
    lim = [pb.StackLimits(stack="a", max_ids_per_partition=999, max_unique_ids_per_partition=998)]
    req = pb.CheckpointRequest(config_fingerprint=v.cl.fingerprint, step=0, directory="plainfile/x", limits=lim)
    got, details, _ = call_status(v.stub.Checkpoint, req, timeout=60)
    env.check(got == "FAILED_PRECONDITION" and "plainfile" in details, "Checkpoint to plainfile/x: %s %r"
              % (got, details))
    env.check(limits_of_a() == before, "after the failed Checkpoint stack a's limits are still %s: %s"
              % (before, limits_of_a()))
    for directory, says in [(os.path.join(env.tmp, "elsewhere"), "--checkpoint-dir"), ("../up", ".."),
                            ("a//b", "empty")]:
        req.directory = directory
        got, details, _ = call_status(v.stub.Checkpoint, req, timeout=60)
        env.check(got == "INVALID_ARGUMENT" and says in details, "Checkpoint to %r: %s %r" % (directory, got, details))
    env.check(not os.path.exists(os.path.join(env.tmp, "elsewhere")), "an absolute directory was written")
    req.directory = "failed_checkpoint_ok"
    req.limits[0].max_ids_per_partition = 1
    got, details, _ = call_status(v.stub.Checkpoint, req, timeout=60)
    env.check(got == "INVALID_ARGUMENT" and "stack 'a'" in details and "max_ids_per_partition 1 outside" in details,
              "Checkpoint with a limit of 1: %s %r" % (got, details))
    req.limits[0].max_ids_per_partition = 999
    got, details, _ = call_status(v.stub.Checkpoint, req, timeout=60)
    env.check(got == "OK", "Checkpoint to a directory: %s %r" % (got, details))
    env.check(os.path.isdir(os.path.join(root, "failed_checkpoint_ok", "step-000000000000")),
              "the checkpoint is not below --checkpoint-dir")
    env.check(limits_of_a() == (999, 998), "after a saved Checkpoint stack a's limits are (999, 998): %s"
              % (limits_of_a(),))


def test_padding_rows(env):
    """Padding rows hold no id and are never addressed: id 40 of a 37-row
    table on 1 x 4 maps to SparseCore 0, local row 10, one of that table's
    padding rows there (its ids on SparseCore 0 are 0, 4, ..., 36: rows 0 to
    9). Lookup and ApplyGradients, by sample and by row, refuse it naming
    stack, SparseCore, row, table and vocabulary, and change nothing; the
    table sits first in an explicit stack, so its padding lies between two
    tables' rows, not at the end of the shard. Its last id, 36, is served."""
    tables = [{"name": "p", "vocabulary_size": 37, "embedding_dim": 8, "combiner": "sum", "stack": "s",
               "optimizer": {"type": "sgd", "learning_rate": 0.5}, "initializer": {"type": "uniform", "scale": 0.5}},
              {"name": "q", "vocabulary_size": 64, "embedding_dim": 8, "combiner": "sum", "stack": "s",
               "optimizer": {"type": "sgd", "learning_rate": 0.5}, "initializer": {"type": "uniform", "scale": 0.5}}]
    features = [{"name": "fp", "table": "p", "valency": 1}, {"name": "fq", "table": "q", "valency": 1}]
    srv = env.server(env.write_config("padding", 4, tables, features), sc_per_process=4).wait_ready()
    cl = Cluster(env, [srv])
    pb, stub = env.pb, cl.stubs[0]
    env.check(cl.place("p", 40) == (0, 10) and cl.place("p", 36) == (0, 9),
              "id 40 of p is SparseCore 0 row 10, id 36 row 9: %s %s" % (cl.place("p", 40), cl.place("p", 36)))
    good = {"fp": [[(36, 1.0)], [(1, 1.0)], [(2, 1.0)], [(3, 1.0)]], "fq": [[(i, 1.0)] for i in range(4)]}
    bad = {"fp": [[(40, 1.0)], [(1, 1.0)], [(2, 1.0)], [(3, 1.0)]], "fq": good["fq"]}
    before = stub.Lookup(cl.lookup_request(cl.entries(good), 0), timeout=30).SerializeToString()
    needles = ["stacks[0]", "stack 's'", "SparseCore 0", "local row 10", "padding", "id 40", "table 'p'",
               "vocabulary_size is 37"]
    rng = np.random.default_rng(7)
    grads = f32(rng.standard_normal((8, 8)).astype(np.float32))
    entries = cl.entries(bad)
    lookup = cl.lookup_request(entries, 0)
    apply = pb.ApplyGradientsRequest(config_fingerprint=cl.fingerprint, process_index=0, step=0)
    apply.stacks.append(pb.StackGradients(partitions=cl.partitions(entries, 0, 0), gradients=grads))
    rows_apply = pb.ApplyGradientsRequest()
    rows_apply.CopyFrom(apply)
    by_row(rows_apply.stacks[0])
    distinct = cl.lookup_request(entries, 0, distinct_rows=True)
    for what, method, req in (("Lookup", "Lookup", lookup), ("Lookup distinct rows", "Lookup", distinct),
                              ("ApplyGradients by sample", "ApplyGradients", apply),
                              ("ApplyGradients by row", "ApplyGradients", rows_apply)):
        got, details, _ = call_status(getattr(stub, method), req, timeout=30)
        ok = env.check(got == "INVALID_ARGUMENT", "%s of id 40: %s %r, expected INVALID_ARGUMENT" % (what, got, details))
        for n in needles:
            ok &= env.check(n in details, "%s of id 40: message %r names %r" % (what, details, n))
        after = stub.Lookup(cl.lookup_request(cl.entries(good), 0), timeout=30).SerializeToString()
        ok &= env.check(after == before, "%s of id 40: tables unchanged" % what)
        if ok:
            print("   ok %-35s %s: %s" % (what, got, details), flush=True)
    st = stub.Stats(pb.StatsRequest(), timeout=30)
    env.check(all(s.rows_updated == 0 for s in st.stacks), "no row updated by the refused pushes")
    # The valid neighbour (id 36, row 9) is looked up and updated.
    upd = cl.apply(good, {"fp": np.ones((4, 8), np.float32)}, step=1)
    env.check(upd == [8], "the push of ids 36, 1, 2, 3 (and q's 0-3) updates 8 rows: %s" % upd)


def drop_to_limits(cl, entries, max_ids, max_unique):
    """The proto's drop rule (StackPartitions), written from its text: per
    partition, in entry order, counting per source SparseCore, an entry of a
    row its source has not kept yet goes once max_unique rows are kept, any
    entry once max_ids are."""
    out = {}
    for st, scs in entries.items():
        for sc, part in scs.items():
            kept, kept_rows, last = {}, {}, {}
            keep = []
            for row, sample, gain in part:
                src = cl.source_sc(st, sample)
                new_row = last.get(src) != row
                if new_row and kept_rows.get(src, 0) >= max_unique:
                    continue
                if kept.get(src, 0) >= max_ids:
                    continue
                kept[src] = kept.get(src, 0) + 1
                if new_row:
                    kept_rows[src] = kept_rows.get(src, 0) + 1
                    last[src] = row
                keep.append((row, sample, gain))
            out.setdefault(st, {})[sc] = keep
    return out


def test_partition_limits(env):
    """The server enforces the limits in force (--limit-policy) on a table
    limited to 4 ids and 2 distinct ids per partition, on 1 x 2 (samples 0-3
    come from SparseCore 0, 4-7 from 1): by default a sample of 6 ids whose
    3 rows on SparseCore 0 pass the unique limit, and 4 samples of the same
    2 rows there (8 ids), are refused (INVALID_ARGUMENT naming stack,
    partition, count and limit; nothing applied); with drop, a request over
    both is answered and applied as the same request with the proto's drop
    rule applied by the client (written here from the proto's text), bit
    for bit."""
    tables = [{"name": "l", "vocabulary_size": 64, "embedding_dim": 8, "combiner": "sum",
               "optimizer": {"type": "sgd", "learning_rate": 0.5}, "initializer": {"type": "uniform", "scale": 0.5},
               "max_ids_per_partition": 4, "max_unique_ids_per_partition": 2}]
    features = [{"name": "fl", "table": "l", "valency": [0, 8]}]
    cfg = env.write_config("limits", 8, tables, features)
    refuse_srv = env.server(cfg).wait_ready()
    drop_srvs = [env.server(cfg, extra=["--limit-policy", "drop"]).wait_ready() for _ in range(2)]
    pb = env.pb
    ref, drops = Cluster(env, [refuse_srv]), [Cluster(env, [s]) for s in drop_srvs]
    env.check(ref.configs[0].limit_policy == pb.LIMIT_POLICY_REFUSE, "GetConfig limit_policy of the default: %s"
              % ref.configs[0].limit_policy)
    env.check(drops[0].configs[0].limit_policy == pb.LIMIT_POLICY_DROP, "GetConfig limit_policy with drop: %s"
              % drops[0].configs[0].limit_policy)
    six = [(10, 1.0), (11, 1.0), (11, 2.0), (12, 1.0), (13, 1.0), (14, 0.5)]
    unique_over = {"fl": [six, [], [], [], [], [], [], [(20, 1.0)]]}
    ids_over = {"fl": [[(10, 1.0), (12, 1.0)]] * 4 + [[]] * 4}
    both = {"fl": [six] + [[(10, 1.0), (12, 1.0)]] * 3 + [[], [], [], [(20, 1.0)]]}
    grads = f32(np.random.default_rng(11).standard_normal((8, 8)).astype(np.float32))
    good = {"fl": [[(i, 1.0)] for i in (10, 11, 12, 13, 14, 20, 1, 3)]}  # 2 rows per source and SparseCore
    before = ref.stubs[0].Lookup(ref.lookup_request(ref.entries(good), 0), timeout=30).SerializeToString()

    def push(cl, ent):
        req = pb.ApplyGradientsRequest(config_fingerprint=cl.fingerprint, process_index=0, step=0)
        req.stacks.append(pb.StackGradients(partitions=cl.partitions(ent, 0, 0), gradients=grads))
        return req
    for what, batch, needles in (
            ("6 ids of a sample", unique_over, ["3 unique ids", "above max_unique_ids_per_partition 2"]),
            ("4 samples of 2 rows", ids_over, ["8 ids", "above max_ids_per_partition 4"])):
        entries = ref.entries(batch)
        for method, req in (("Lookup", ref.lookup_request(entries, 0)), ("ApplyGradients", push(ref, entries))):
            got, details, _ = call_status(getattr(ref.stubs[0], method), req, timeout=30)
            ok = env.check(got == "INVALID_ARGUMENT", "%s %s: %s %r" % (method, what, got, details))
            for n in ["stacks[0]", "stack 'l'", "partition src 0 -> dst 0", "in force"] + needles:
                ok &= env.check(n in details, "%s %s: message %r names %r" % (method, what, details, n))
            after = ref.stubs[0].Lookup(ref.lookup_request(ref.entries(good), 0), timeout=30).SerializeToString()
            ok &= env.check(after == before, "%s %s: tables unchanged" % (method, what))
            if ok:
                print("   ok %-38s %s: %s" % (method + " " + what, got, details), flush=True)

    # Drop: the server's answer and update equal the client-dropped request's.
    entries = ref.entries(both)
    kept = drop_to_limits(ref, entries, 4, 2)
    n_full = sum(len(p) for sc in entries.values() for p in sc.values())
    n_kept = sum(len(p) for sc in kept.values() for p in sc.values())
    rows_kept = sum(len({r for r, _, _ in p}) for sc in kept.values() for p in sc.values())
    env.check(n_kept == 7 and n_full == 12, "the rule keeps 7 of the 12 entries: %d of %d" % (n_kept, n_full))
    full = drops[0].stubs[0].Lookup(drops[0].lookup_request(entries, 0), timeout=30).SerializeToString()
    want = drops[0].stubs[0].Lookup(drops[0].lookup_request(kept, 0), timeout=30).SerializeToString()
    env.check(full == want, "drop: the Lookup answers as the client-dropped request")
    got_a = drops[0].stubs[0].ApplyGradients(push(drops[0], entries), timeout=30).rows_updated
    got_b = drops[1].stubs[0].ApplyGradients(push(drops[1], kept), timeout=30).rows_updated
    look = drops[0].lookup_request(ref.entries(good), 0)
    after_a = drops[0].stubs[0].Lookup(look, timeout=30).SerializeToString()
    after_b = drops[1].stubs[0].Lookup(look, timeout=30).SerializeToString()
    if env.check(got_a == got_b == rows_kept and after_a == after_b and after_a != before,
                 "drop: the push updates the kept rows as the client-dropped push does (%d, %d rows, %d kept)"
                 % (got_a, got_b, rows_kept)):
        print("   ok drop: %d entries answered and applied as the client-dropped %d" % (n_full, n_kept), flush=True)

def test_read_rows(env):
    """ReadRows on a 2 x 2 cluster, with a stock client: the same range sent
    to both processes reads every id once (each answers those it holds,
    ascending), rows equal what Lookup returns for them bit for bit, slots
    are named as OptimizerType names them and hold their initial values,
    then the values of one push computed here in float64 from the
    declaration; explicit ids in any order and repeated; every invalid
    request refused with the status the proto lists, naming the field."""
    tables = [{"name": "g", "vocabulary_size": 61, "embedding_dim": 12, "combiner": "sum",
               "optimizer": {"type": "adagrad", "learning_rate": 0.25, "initial_accumulator": 0.5},
               "initializer": {"type": "uniform", "scale": 0.5}},
              {"name": "m", "vocabulary_size": 40, "embedding_dim": 8, "combiner": "sum",
               "optimizer": {"type": "adam", "learning_rate": 0.125}, "initializer": {"type": "normal", "stddev": 0.25}},
              {"name": "s", "vocabulary_size": 30, "embedding_dim": 8, "combiner": "sum",
               "optimizer": {"type": "sgd", "learning_rate": 0.5}, "initializer": {"type": "constant", "value": 0.75}}]
    features = [{"name": "f" + t["name"], "table": t["name"], "valency": 1} for t in tables]
    cfg = env.write_config("read_rows", 8, tables, features)
    srvs = [env.server(cfg, index=p, num_processes=2, extra=["--max-message-mb", "1"]).wait_ready() for p in range(2)]
    cl = Cluster(env, srvs)
    pb = env.pb

    def read(p, table, **kw):
        return cl.stubs[p].ReadRows(pb.ReadRowsRequest(config_fingerprint=cl.fingerprint, process_index=p,
                                                       table=table, **kw), timeout=30)

    def values(b, dim):
        return np.frombuffer(b, "<f4").reshape(-1, dim)
    slot_names = {"g": ["accumulator"], "m": ["momentum", "velocity"], "s": []}
    state = {}
    for t in tables:
        name, vocab, dim = t["name"], t["vocabulary_size"], t["embedding_dim"]
        got = {}
        for p in range(2):
            r = read(p, name, first_id=0, count=vocab)
            ids = list(r.ids)
            env.check(ids == sorted(ids) and all(cl.place(name, i)[0] // cl.S == p for i in ids),
                      "table %s, process %d: the range's ids it holds, ascending" % (name, p))
            env.check(r.embedding_dim == dim and [x.name for x in r.slots] == slot_names[name],
                      "table %s: embedding_dim %d, slots %s" % (name, r.embedding_dim, [x.name for x in r.slots]))
            rows = values(r.rows, dim)
            for k, i in enumerate(ids):
                got[i] = (rows[k], [values(x.values, dim)[k] for x in r.slots])
        env.check(sorted(got) == list(range(vocab)), "table %s: the range read every id once" % name)
        looked = cl.read_rows(name, list(range(vocab))).astype(np.float32)
        env.check(all(np.array_equal(got[i][0], looked[i]) for i in range(vocab)),
                  "table %s: rows equal Lookup's bit for bit" % name)
        init = {"g": [0.5], "m": [0.0, 0.0], "s": []}[name]
        env.check(all(np.all(got[i][1][k] == np.float32(v)) for i in range(vocab) for k, v in enumerate(init)),
                  "table %s: slots start at %s" % (name, init))
        state[name] = got
    print("   ok ReadRows of every id: rows equal Lookup's, slots named and initial", flush=True)

    # One push on table g (adagrad): the new rows and accumulators against
    # float64 from the declaration (a = a0 + g^2, w -= lr g / sqrt(a)).
    batch = {"fg": [[(i, 1.0)] for i in (3, 4, 60, 7, 8, 9, 10, 11)]}
    grad = np.random.default_rng(13).standard_normal((8, 12)).astype(np.float32)
    cl.apply(batch, {"fg": grad}, step=0)
    ids = [60, 3, 3, 11]
    for p in range(2):
        mine = [i for i in ids if cl.place("g", i)[0] // cl.S == p]
        r = read(p, "g", ids=mine)
        env.check(list(r.ids) == mine, "explicit ids answered in request order, repeats kept: %s" % list(r.ids))
        rows, acc = values(r.rows, 12), values(r.slots[0].values, 12)
        for k, i in enumerate(mine):
            gi = grad[[3, 4, 60, 7, 8, 9, 10, 11].index(i)].astype(np.float64)
            a = 0.5 + gi * gi
            w = state["g"][i][0].astype(np.float64) - 0.25 * gi / np.sqrt(a)
            env.check(np.allclose(acc[k], a, rtol=1e-6, atol=0) and np.allclose(rows[k], w, rtol=1e-5, atol=1e-7),
                      "id %d after the push: accumulator and row against float64 (max errors %g, %g)"
                      % (i, np.abs(acc[k] - a).max(), np.abs(rows[k] - w).max()))
    print("   ok ReadRows after a push: rows and accumulators as float64 computes them", flush=True)

    other = next(i for i in range(61) if cl.place("g", i)[0] // cl.S == 1)
    for what, req, code, needles in (
            ("unknown table", dict(table="zz", ids=[0]), "INVALID_ARGUMENT", ["table", "'zz'"]),
            ("id = vocabulary_size", dict(table="g", ids=[61]), "INVALID_ARGUMENT", ["ids[0] = 61", "[0, 61)", "'g'"]),
            ("id -1", dict(table="g", ids=[-1]), "INVALID_ARGUMENT", ["ids[0] = -1"]),
            ("id of process 1", dict(table="g", ids=[other]), "INVALID_ARGUMENT",
             ["ids[0] = %d" % other, "lives on process 1", "SparseCore %d" % cl.place("g", other)[0]]),
            ("ids and a range", dict(table="g", ids=[0], first_id=0, count=3), "INVALID_ARGUMENT", ["both given"]),
            ("range past the vocabulary", dict(table="g", first_id=50, count=12), "INVALID_ARGUMENT",
             ["first_id 50, count 12", "[0, 61)"]),
            ("negative count", dict(table="g", first_id=0, count=-1), "INVALID_ARGUMENT", ["count -1"]),
            ("wrong fingerprint", dict(table="g", ids=[0], config_fingerprint=b"x" * 32), "FAILED_PRECONDITION",
             ["config_fingerprint"])):
        fields = dict(config_fingerprint=cl.fingerprint, process_index=0)
        fields.update(req)
        got, details, _ = call_status(cl.stubs[0].ReadRows, pb.ReadRowsRequest(**fields), timeout=30)
        ok = env.check(got == code, "ReadRows %s: %s %r, expected %s" % (what, got, details, code))
        for n in needles:
            ok &= env.check(n in details, "ReadRows %s: message %r names %r" % (what, details, n))
        if ok:
            print("   ok ReadRows %-28s %s: %s" % (what, got, details), flush=True)
    st = cl.stubs[0].Stats(pb.StatsRequest(), timeout=30)
    m = next((x for x in st.methods if x.method == "ReadRows"), None)
    env.check(m is not None and m.calls >= 12 and m.errors == 8, "Stats counts ReadRows: %s" % m)


def test_read_rows_limit(env):
    """A ReadRows answer past --max-message-mb is refused with
    RESOURCE_EXHAUSTED naming its bytes and the limit, one under it served;
    libscps reads in pieces under it (scps-admin rows, admin_online)."""
    tables = [{"name": "w", "vocabulary_size": 4000, "embedding_dim": 256, "combiner": "sum",
               "optimizer": {"type": "adam", "learning_rate": 0.125}, "initializer": {"type": "zeros"}}]
    cfg = env.write_config("read_rows_limit", 8, tables, [{"name": "fw", "table": "w", "valency": 1}])
    srv = env.server(cfg, sc_per_process=1, extra=["--max-message-mb", "1"]).wait_ready()
    cl = Cluster(env, [srv])
    pb = env.pb
    req = pb.ReadRowsRequest(config_fingerprint=cl.fingerprint, process_index=0, table="w", first_id=0, count=400)
    got, details, _ = call_status(cl.stubs[0].ReadRows, req, timeout=30)
    env.check(got == "RESOURCE_EXHAUSTED" and "400 ids x (1 + 2 slots) x embedding_dim 256" in details
              and str(1 << 20) in details, "ReadRows of 400 x 3 KiB: %s %r" % (got, details))
    req.count = 300
    got, details, resp = call_status(cl.stubs[0].ReadRows, req, timeout=30)
    env.check(got == "OK" and len(resp.ids) == 300, "ReadRows of 300 x 3 KiB: %s %r" % (got, details))


M64 = (1 << 64) - 1


def spec_mix(x):
    """mix() of the proto's InitializerSpec comment."""
    x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & M64
    x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & M64
    return x ^ (x >> 31)


def spec_value(kind, param, seed, i, c):
    """Element (i, c) of a table as the proto's InitializerSpec comment
    specifies it, from that text alone (Python's math is C's libm), with
    the draw truncated_normal ended on."""
    def U(k):
        b = spec_mix(spec_mix(spec_mix((seed + 0x9e3779b97f4a7c15) & M64) ^ ((i * 0xd1b54a32d192ed03) & M64))
                     ^ ((c << 32) | k))
        return ((b >> 11) + 0.5) / 2.0 ** 53

    def Z(d):
        return math.sqrt(-2 * math.log(U(2 * d))) * math.cos(6.283185307179586 * U(2 * d + 1))
    if kind == "zeros":
        return np.float32(0.0), 0
    if kind == "constant":
        return np.float32(param), 0
    if kind == "uniform":
        return np.float32(param * (2 * U(0) - 1)), 0
    if kind == "normal":
        return np.float32(param * Z(0)), 0
    d = 0
    while abs(Z(d)) > 2:
        d += 1
    return np.float32(param * Z(d)), d


def test_initializer_spec(env):
    """Rows of every initializer read with ReadRows from a 2 x 2 cluster
    equal, bit for bit, the values the proto's InitializerSpec comment
    specifies, computed here from that text alone (spec_value), for seeded
    and unseeded tables (the seed then the FNV-1a hash of the name), with
    some truncated_normal draws redrawn."""
    kinds = [("zeros", None, 0), ("constant", 0.1, 0), ("uniform", 0.5, 12345), ("normal", 0.25, 7),
             ("truncated_normal", 2.0, 0), ("uniform", 3.0, 0)]
    tables = []
    for k, (kind, param, seed) in enumerate(kinds):
        init = {"type": kind}
        if param is not None:
            init[{"constant": "value", "uniform": "scale"}.get(kind, "stddev")] = param
        if seed:
            init["seed"] = seed
        tables.append({"name": "init_%d_%s" % (k, kind), "vocabulary_size": 5000 + 7 * k, "embedding_dim": 13,
                       "combiner": "sum", "optimizer": {"type": "sgd", "learning_rate": 0.1}, "initializer": init})
    features = [{"name": "f%d" % k, "table": t["name"], "valency": 1} for k, t in enumerate(tables)]
    cfg = env.write_config("initializers", 8, tables, features)
    srvs = [env.server(cfg, index=p, num_processes=2).wait_ready() for p in range(2)]
    cl = Cluster(env, srvs)
    pb = env.pb
    redrawn = 0
    for t, (kind, param, seed) in zip(tables, kinds):
        name, vocab = t["name"], t["vocabulary_size"]
        if not seed:
            seed = 0xcbf29ce484222325
            for byte in name.encode():
                seed = ((seed ^ byte) * 0x100000001b3) & M64
        ids = [0, 1, 2, 3, 999, vocab - 2, vocab - 1] + [17 * j + 5 for j in range(20)]
        bad = 0
        for p in range(2):
            mine = [i for i in ids if cl.place(name, i)[0] // cl.S == p]
            r = cl.stubs[p].ReadRows(pb.ReadRowsRequest(config_fingerprint=cl.fingerprint, process_index=p,
                                                        table=name, ids=mine), timeout=30)
            rows = np.frombuffer(r.rows, "<f4").reshape(-1, 13)
            for k, i in enumerate(mine):
                for c in range(13):
                    want, d = spec_value(kind, param, seed, i, c)
                    redrawn += d > 0
                    bad += rows[k, c].tobytes() != want.tobytes()
        if env.check(bad == 0, "%s: %d of %d values differ from the proto's specification" % (name, bad, 13 * len(ids))):
            print("   ok %-24s %d ids x 13 columns as the proto specifies" % (name, len(ids)), flush=True)
    env.check(redrawn > 0, "some truncated_normal values were redrawn (%d)" % redrawn)


def test_nonfinite_updates(env):
    """An ApplyGradients that would make a row or slot non-finite changes
    nothing and is refused (INVALID_ARGUMENT naming stack, row, table, id
    and the value): the issue's three pushes with learning_rate 3.4e38 on an
    Adagrad table, by sample and by row, where the first leaves finite
    values (checked against float64) and the next would reach -Inf; on SGD
    the first already would. Ordinary pushes are proven finite without the
    check (Stats pushes_updates_checked stays 0); after the huge one, a
    normal push is checked and applied."""
    tables = [{"name": "h", "vocabulary_size": 64, "embedding_dim": 8, "combiner": "sum",
               "optimizer": {"type": "adagrad", "learning_rate": 0.1, "initial_accumulator": 0.1},
               "initializer": {"type": "uniform", "scale": 0.5}},
              {"name": "s", "vocabulary_size": 64, "embedding_dim": 16, "combiner": "sum",
               "optimizer": {"type": "sgd", "learning_rate": 0.1}, "initializer": {"type": "uniform", "scale": 0.5}}]
    features = [{"name": "fh", "table": "h", "valency": 1}, {"name": "fs", "table": "s", "valency": 1}]
    cfg = env.write_config("nonfinite", 4, tables, features)
    srv = env.server(cfg).wait_ready()
    cl = Cluster(env, [srv])
    pb = env.pb
    ids = [1, 2, 5, 6]

    def rows(table, dim):
        r = cl.stubs[0].ReadRows(pb.ReadRowsRequest(config_fingerprint=cl.fingerprint, process_index=0, table=table,
                                                    ids=ids), timeout=30)
        return (np.frombuffer(r.rows, "<f4").reshape(-1, dim).copy(),
                [np.frombuffer(x.values, "<f4").reshape(-1, dim).copy() for x in r.slots])

    def checked():
        return cl.stubs[0].Stats(pb.StatsRequest(), timeout=30).pushes_updates_checked

    def push_h(lr, grad, step, by_row_form=False):
        entries = cl.entries({"fh": [[(i, 1.0)] for i in ids]})
        req = pb.ApplyGradientsRequest(config_fingerprint=cl.fingerprint, process_index=0, step=step,
                                       learning_rate=lr)
        req.stacks.append(pb.StackGradients(partitions=cl.partitions(entries, 0, 0),
                                            gradients=f32(np.full((4, 8), grad, np.float32))))
        if by_row_form:
            by_row(req.stacks[0])
        return call_status(cl.stubs[0].ApplyGradients, req, timeout=30)

    got, details, _ = push_h(0.01, 0.5, 0)
    env.check(got == "OK" and checked() == 0, "an ordinary push: %s %r, proven finite (%d checked)"
              % (got, details, checked()))
    w0, (a0,) = rows("h", 8)
    got, details, _ = push_h(3.4e38, 1.0, 1)
    w1, (a1,) = rows("h", 8)
    want_a = a0.astype(np.float64) + 1.0
    want_w = w0.astype(np.float64) - 3.4e38 / np.sqrt(want_a)
    env.check(got == "OK" and np.all(np.isfinite(w1)) and np.allclose(a1, want_a, rtol=1e-6)
              and np.allclose(w1, want_w, rtol=1e-6), "push 1 of learning_rate 3.4e38: %s %r; rows %s" %
              (got, details, w1[0]))
    env.check(checked() == 1, "push 1 was checked before it was applied (%d)" % checked())
    for n, form in ((2, False), (3, False), (3, True)):
        got, details, _ = push_h(3.4e38, 1.0, n, form)
        what = "push %d of learning_rate 3.4e38%s" % (n, " by row" if form else "")
        ok = env.check(got == "INVALID_ARGUMENT", "%s: %s %r" % (what, got, details))
        for needle in ("stacks[0]", "stack 'h'", "table 'h' id ", "not finite", "row column", "becomes -inf",
                       "nothing was applied"):
            ok &= env.check(needle in details, "%s: message %r names %r" % (what, details, needle))
        w2, (a2,) = rows("h", 8)
        ok &= env.check(np.array_equal(w2, w1) and np.array_equal(a2, a1), "%s: rows and accumulators unchanged" % what)
        if ok:
            print("   ok %-38s %s: %s" % (what, got, details), flush=True)
    got, details, _ = push_h(0.01, 0.5, 4)
    w3, (a3,) = rows("h", 8)
    env.check(got == "OK" and np.all(np.isfinite(w3)) and np.allclose(a3, a1.astype(np.float64) + 0.25, rtol=1e-6),
              "a normal push after the huge one is applied (accumulators + 0.25): %s %r" % (got, details))
    env.check(checked() == 5, "it was checked, the huge rows being beyond the proof (%d checked)" % checked())

    # SGD: w - 3.4e38 * 2 overflows at once.
    s0, _ = rows("s", 16)
    entries = cl.entries({"fs": [[(i, 1.0)] for i in ids]})
    req = pb.ApplyGradientsRequest(config_fingerprint=cl.fingerprint, process_index=0, step=5, learning_rate=3.4e38)
    req.stacks.append(pb.StackGradients(partitions=cl.partitions(entries, 0, 1),
                                        gradients=f32(np.full((4, 16), 2.0, np.float32))))
    got, details, _ = call_status(cl.stubs[0].ApplyGradients, req, timeout=30)
    env.check(got == "INVALID_ARGUMENT" and "stack 's'" in details and "becomes -inf" in details,
              "sgd push of 3.4e38 x 2: %s %r" % (got, details))
    env.check(np.array_equal(rows("s", 16)[0], s0), "sgd rows unchanged by the refused push")


def test_exmy_nan(env):
    """A pooled activation that sums to NaN (rows of 3e38 with gains 2 and
    -2: inf + -inf) comes back NaN in float32, and in eXmY, which has no
    code for it, as FAILED_PRECONDITION naming the stack."""
    tables = [{"name": "big", "vocabulary_size": 16, "embedding_dim": 8, "combiner": "sum",
               "optimizer": {"type": "sgd", "learning_rate": 0.1},
               "initializer": {"type": "constant", "value": 3e38}}]
    features = [{"name": "fb", "table": "big", "valency": 2, "weighted": True}]
    cfg = env.write_config("exmy-nan", 4, tables, features)
    srv = env.server(cfg).wait_ready()
    cl = Cluster(env, [srv])
    pb = env.pb
    entries = cl.entries({"fb": [[(1, 2.0), (2, -2.0)], [(3, 1.0), (4, 1.0)], [], [(5, 1.0), (5, 1.0)]]})

    def lookup(fmt):
        req = pb.LookupRequest(config_fingerprint=cl.fingerprint, process_index=0,
                               stacks=[cl.partitions(entries, 0, 0)])
        if fmt:
            req.activation_format = pb.FLOAT_FORMAT_EXMY
            req.activation_exmy.CopyFrom(pb.ExmyFormat(exponent_bits=4, mantissa_bits=3))
        return call_status(cl.stubs[0].Lookup, req, timeout=30)
    got, details, resp = lookup(False)
    acts = np.frombuffer(resp.stacks[0].activations, "<f4") if resp else np.zeros(0)
    env.check(got == "OK" and acts.size == 32 and np.isnan(acts[:8]).all() and np.isinf(acts[8:16]).all(),
              "float32: %s %r, sample 0 NaN and sample 1 inf: %s" % (got, details, acts[:16]))
    got, details, _ = lookup(True)
    ok = env.check(got == "FAILED_PRECONDITION" and "stack 'big'" in details and "NaN activation" in details
                   and "e4m3" in details, "e4m3: %s %r" % (got, details))
    if ok:
        print("   ok eXmY NaN activation: %s: %s" % (got, details), flush=True)


def bf16(values):
    """float32 values as bfloat16 bytes (truncated: the test's values are exact)."""
    return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()


def test_topk(env):
    """TopK through the stubs generated from scps.proto: a valid call, then
    every invalid one refused with the status the proto promises, naming the
    field and value, tables unchanged."""
    cfg = env.write_config("topk", BATCH, TABLES, FEATURES)
    srv = env.server(cfg, extra=["--max-message-mb", str(MAX_MB)]).wait_ready()
    v = Validation(env, srv)
    pb = v.pb
    env.check(hasattr(v.stub, "TopK") and hasattr(pb, "TopKRequest"), "the generated stubs have TopK")
    q = np.random.default_rng(21).standard_normal((2, 8)).astype(np.float32)

    def topk(**kw):
        args = dict(config_fingerprint=v.cl.fingerprint, process_index=0, table="a", num_queries=2,
                    queries=f32(q), k=5, recall_target=1.0)
        args.update(kw)
        return pb.TopKRequest(**args)
    got, details, r = call_status(v.stub.TopK, topk(), timeout=30)
    ok = env.check(got == "OK" and r.num_queries == 2 and r.candidates == 5 and len(r.ids) == 10 and
                   len(r.scores) == 40 and r.bins == 0 and r.rows_scanned == 500,
                   "a valid TopK: %s %r %s" % (got, details, r))
    if ok:
        print("   ok TopK of 2 queries, k 5: ids %s" % list(r.ids[:5]), flush=True)
    nan = q.copy()
    nan[1, 3] = np.nan
    nan_bf16 = q.copy()
    nan_bf16[0, 2] = np.nan
    exmy = pb.ExmyFormat(exponent_bits=4, mantissa_bits=3)
    invalid = "INVALID_ARGUMENT"
    for what, req, code, needles in (
            ("unknown table", topk(table="zz"), invalid, ["table", "'zz'"]),
            ("queries 4 bytes short", topk(queries=f32(q)[:-4]), invalid,
             ["queries: 60 bytes", "num_queries 2", "embedding_dim 8", "64 in all"]),
            ("queries for 3 queries, num_queries 2", topk(queries=f32(np.zeros((3, 8)))), invalid,
             ["queries: 96 bytes", "num_queries 2"]),
            ("num_queries 0", topk(num_queries=0, queries=b""), invalid, ["num_queries: 0"]),
            ("k 0", topk(k=0), invalid, ["k: 0 not in [1, 500]"]),
            ("k above the rows", topk(k=501), invalid, ["k: 501 not in [1, 500]", "'a'"]),
            ("k above the range's rows", topk(k=6, first_id=10, count=5), invalid, ["k: 6 not in [1, 5]"]),
            ("NaN in a float32 query", topk(queries=f32(nan)), invalid, ["queries[1][3] = nan", "finite"]),
            ("NaN in a bfloat16 query", topk(queries=bf16(nan_bf16), query_format=pb.FLOAT_FORMAT_BFLOAT16), invalid,
             ["queries[0][2] = nan", "finite"]),
            ("recall_target 0", topk(recall_target=0.0), invalid, ["recall_target: 0 not in (0, 1]"]),
            ("recall_target -0.1", topk(recall_target=-0.1), invalid, ["recall_target: -0.1 not in (0, 1]"]),
            ("recall_target 1.5", topk(recall_target=1.5), invalid, ["recall_target: 1.5 not in (0, 1]"]),
            ("recall_target NaN", topk(recall_target=math.nan), invalid, ["recall_target: nan not in (0, 1]"]),
            ("range past the vocabulary", topk(first_id=490, count=20), invalid,
             ["first_id 490, count 20", "[0, 500)", "'a'"]),
            ("first_id -1", topk(first_id=-1, count=5), invalid, ["first_id -1, count 5"]),
            ("count -3", topk(first_id=0, count=-3), invalid, ["first_id 0, count -3"]),
            ("first_id past the end", topk(first_id=500, count=1), invalid, ["first_id 500, count 1"]),
            ("first_id with count 0", topk(first_id=5), invalid, ["first_id 5 with count 0"]),
            ("score 7", topk(score=7), invalid, ["score: 7"]),
            ("eXmY queries on embedding_dim 12", topk(table="b", queries=bytes(2 * 13),
                                                      query_format=pb.FLOAT_FORMAT_EXMY, query_exmy=exmy), invalid,
             ["query_format", "multiple of 8", "'b'", "12"]),
            ("eXmY without its ExmyFormat", topk(query_format=pb.FLOAT_FORMAT_EXMY), invalid, ["query_format"]),
            ("ExmyFormat with float32", topk(query_exmy=exmy), invalid, ["query_format"]),
            ("another cluster's fingerprint", topk(config_fingerprint=b"\x01" * 32), "FAILED_PRECONDITION",
             ["config_fingerprint"]),
            ("answer over the message limit", topk(num_queries=200, queries=f32(np.ones((200, 8))), k=500),
             "RESOURCE_EXHAUSTED", ["num_queries 200 x 500 candidates (k 500)", "bytes of answer", str(MAX_MB << 20),
                                    "max_message_bytes"]),
    ):
        v.expect("TopK " + what, "TopK", req, code, needles)


if __name__ == "__main__":
    main("test_validation", [test_invalid_requests, test_gain_forms, test_row_gradients, test_large_messages,
                             test_ftrl_rate, test_failed_checkpoint, test_padding_rows,
                             test_partition_limits, test_read_rows, test_read_rows_limit,
                             test_initializer_spec, test_nonfinite_updates, test_exmy_nan, test_topk])
