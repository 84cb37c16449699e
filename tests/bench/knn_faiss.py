#!/usr/bin/python3
"""FAISS and the machine's roofline on the vectors scps-bench-knn dumped.

  knn_faiss.py --table FILE --queries FILE --rows N --dim D [--threads T]
               [--k 10,100] [--recall 0.95] [--rounds R] [--skip hnsw,ivf,roofline]
               [--hnsw-budget-s S] [--hnsw-m M] [--hnsw-ef-construction E]
               [--ivf-train 65536] [--index-budget-s S]

Both files are raw little-endian float32, row-major: the table N x D and the
queries Q x D (Q from the file's size). With T threads (FAISS's OpenMP and
OpenBLAS, set before numpy and faiss load) it measures, printing one JSON line
each:
  * IndexFlatIP (exact inner product, BLAS): per k, the median of R timed
    searches of the whole batch (one warm-up first) and queries/s; its ids
    are the ground truth of the rest.
  * IndexIVFFlat (inner product, nlist ~ 4 sqrt(N), trained on a sample of
    --ivf-train rows) and IndexHNSWFlat (inner product, M 16,
    efConstruction 40): build time (train + add), then per k the smallest
    nprobe / efSearch whose recall@k against the flat ids reaches the
    target, and its queries/s (the median of R timed searches; fewer, 3 at
    least, where R would take over --index-budget-s, default 30). HNSW's
    build time is first estimated from builds of 32768 and 65536 rows (time
    as a power of the rows, the power fitted to those two, within [1, 2]);
    when the estimate for N rows is above --hnsw-budget-s (default 180),
    HNSW is built on the
    largest power-of-two multiple of 65536 first rows the budget allows
    instead, its recall measured against the flat index of those rows, and
    its lines say so (rows_indexed, subset_reason).
  * The roofline, each figure the fastest of its rounds: the GFLOP/s of
    numpy's float32 matmul of the same shape (the Q x D queries times the
    transpose of a block of rows, or the block times the queries'
    transpose, over the whole table, blocks of 4096 to 65536 rows, output
    reused; the best), a square sgemm for reference, and the read rate of
    the table (numpy sum and a BLAS dot with ones, T threads on slices;
    both release the GIL; the best).
--skip takes a comma list of flat, ivf, hnsw, roofline.
"""

import argparse
import json
import math
import os
import sys
import threading
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--table", required=True)
    p.add_argument("--queries", required=True)
    p.add_argument("--rows", type=int, required=True)
    p.add_argument("--dim", type=int, required=True)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--k", default="10,100")
    p.add_argument("--recall", type=float, default=0.95)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--skip", default="")
    p.add_argument("--hnsw-budget-s", type=float, default=180.0)
    p.add_argument("--index-budget-s", type=float, default=30.0)
    p.add_argument("--hnsw-m", type=int, default=16)
    p.add_argument("--hnsw-ef-construction", type=int, default=40)
    p.add_argument("--ivf-train", type=int, default=65536)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    try:
        a.k = [int(x) for x in a.k.split(",")]
    except ValueError:
        p.error(f"--k: '{a.k}' is not a comma list of integers")
    if not a.k or min(a.k) < 1 or max(a.k) > a.rows:
        p.error(f"--k: every value must be in [1, {a.rows}]")
    if not 0 < a.recall <= 1:
        p.error(f"--recall: {a.recall} is not in (0, 1]")
    for name in ("rows", "dim", "threads", "rounds", "ivf_train"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')}: {getattr(a, name)} is not a positive integer")
    a.skip = set(s for s in a.skip.split(",") if s)
    unknown = a.skip - {"hnsw", "ivf", "roofline", "flat"}
    if unknown:
        p.error(f"--skip: unknown step(s) {sorted(unknown)} (flat, ivf, hnsw, roofline)")
    return a


ARGS = parse_args()
# Thread counts are read when the libraries load.
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)

import numpy as np  # noqa: E402

# The roofline alone needs only numpy: a host without FAISS (the 16-core
# bundle's) still measures it.
if ARGS.skip >= {"flat", "ivf", "hnsw"}:
    faiss = None
else:
    import faiss  # noqa: E402

    faiss.omp_set_num_threads(ARGS.threads)


def emit(**fields):
    print(json.dumps(fields), flush=True)


def log(msg):
    print(f"knn_faiss.py: {msg}", file=sys.stderr, flush=True)


def load(path, dim, rows=None):
    size = os.path.getsize(path)
    if size % (4 * dim):
        sys.exit(f"knn_faiss.py: '{path}': {size} bytes is not a whole number of {dim}-float rows")
    n = size // (4 * dim)
    if rows is not None and n != rows:
        sys.exit(f"knn_faiss.py: '{path}': {n} rows, --rows says {rows}")
    return np.fromfile(path, dtype="<f4").reshape(n, dim)


def timed(fn, rounds, best=False, budget_s=None):
    """fn once to warm up, then the median and p90 of `rounds` timed calls (s);
    best: the fastest call and the median instead (a peak is the best seen).
    budget_s: fewer rounds (3 at least) where the warm-up says they would take
    longer, for searches of seconds each."""
    t0 = time.perf_counter()
    fn()
    warm = time.perf_counter() - t0
    if budget_s is not None and warm * rounds > budget_s:
        rounds = max(3, int(budget_s / max(warm, 1e-9)))
    t = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    t.sort()
    if best:
        return t[0], float(np.median(t))
    return float(np.median(t)), t[max(0, math.ceil(0.9 * len(t)) - 1)]


def recall_at(ids, truth):
    k = truth.shape[1]
    hit = sum(len(np.intersect1d(a, b, assume_unique=False)) for a, b in zip(ids, truth))
    return hit / (k * truth.shape[0])


def smallest_setting(set_param, search, truth, k, target, lo, hi):
    """The smallest integer setting in [lo, hi] whose recall@k reaches target,
    by doubling then bisection (recall grows with the setting). Returns
    (setting, its recall), or (None, the recall at hi)."""
    seen = {}

    def rec(v):
        if v not in seen:
            set_param(v)
            seen[v] = recall_at(search(k), truth)
        return seen[v]

    if rec(lo) >= target:
        return lo, rec(lo)
    a = lo  # fails the target
    while True:
        if a >= hi:
            return None, rec(hi)
        b = min(hi, a * 2)
        if rec(b) >= target:
            break
        a = b
    while b - a > 1:
        m = (a + b) // 2
        if rec(m) >= target:
            b = m
        else:
            a = m
    return b, rec(b)


def base(**kw):
    d = dict(bench="faiss", rows=ARGS.rows, dim=ARGS.dim, queries=int(xq.shape[0]), threads=ARGS.threads,
             omp_wait_policy=os.environ.get("OMP_WAIT_POLICY", ""))
    d.update(kw)
    return d


def tuned(name, index, param, set_param, lo, hi, build_s, truth, extra):
    """lo None: k (an HNSW search keeps at least k candidates whatever efSearch)."""
    for k in ARGS.k:
        search = lambda kk: index.search(xq, kk)[1]
        v, r = smallest_setting(set_param, search, truth[k], k, ARGS.recall, k if lo is None else lo, hi)
        if v is None:
            emit(**base(index=name, k=k, build_s=build_s, reached=False, recall=r,
                        reason=f"{param} {hi} gives recall {r:.4f} < {ARGS.recall}", **extra))
            log(f"{name} k {k}: {param} up to {hi} reaches recall {r:.4f} only")
            continue
        set_param(v)
        med, p90 = timed(lambda: index.search(xq, k), ARGS.rounds, budget_s=ARGS.index_budget_s)
        emit(**base(index=name, k=k, build_s=build_s, reached=True, param=param, value=v, recall=r,
                    median_ms=med * 1e3, p90_ms=p90 * 1e3, qps=xq.shape[0] / med, **extra))
        log(f"{name} k {k}: {param} {v}, recall {r:.4f}, {med * 1e3:.2f} ms, {xq.shape[0] / med:.0f} queries/s")


def threaded(fn, parts):
    th = [threading.Thread(target=fn, args=(p,)) for p in parts]
    for t in th:
        t.start()
    for t in th:
        t.join()


def roofline():
    q, n, d = xq.shape[0], xb.shape[0], xb.shape[1]
    flops = 2.0 * q * n * d
    best = (0.0, 0, "")
    # Both orientations of the product: queries x rows^T (Q x block out) and
    # rows x queries^T (block x Q out); the peak is the better.
    for block in (4096, 16384, 65536):
        block = min(block, n)
        for orient in ("QxB", "BxQ"):
            out = np.empty((q, block) if orient == "QxB" else (block, q), dtype=np.float32)

            def scan():
                for i in range(0, n, block):
                    blk = xb[i:i + block]
                    full = blk.shape[0] == block
                    if orient == "QxB":
                        np.matmul(xq, blk.T, out=out if full else None)
                    else:
                        np.matmul(blk, xq.T, out=out if full else None)
            fastest, _ = timed(scan, max(3, ARGS.rounds // 2), best=True)
            g = flops / fastest / 1e9
            log(f"roofline: sgemm {orient} {q} queries x {d} . {block} rows over the table: {g:.1f} GFLOP/s")
            if g > best[0]:
                best = (g, block, orient)
    m = 2048
    a = np.random.default_rng(ARGS.seed).standard_normal((m, m), dtype=np.float32)
    fastest, _ = timed(lambda: a @ a, 3, best=True)
    square = 2.0 * m ** 3 / fastest / 1e9
    log(f"roofline: square sgemm {m}: {square:.1f} GFLOP/s")

    flat = xb.reshape(-1)
    cuts = np.linspace(0, flat.shape[0], ARGS.threads + 1).astype(np.int64)
    slices = [flat[cuts[i]:cuts[i + 1]] for i in range(ARGS.threads)]
    ones = np.ones(max(s.shape[0] for s in slices), dtype=np.float32)
    nbytes = flat.nbytes
    rates = {}
    for how, fn in (("sum", lambda s: np.add.reduce(s)), ("dot", lambda s: np.dot(s, ones[:s.shape[0]]))):
        # T Python threads, one slice each: both release the GIL, so the slices
        # are read at once, as the server's T threads read their rows.
        fastest, _ = timed(lambda: threaded(fn, slices), max(3, ARGS.rounds // 2), best=True)
        rates[how] = nbytes / fastest / 1e9
        log(f"roofline: read of the table by {how}, {ARGS.threads} threads: {rates[how]:.1f} GB/s")
    emit(bench="roofline", rows=n, dim=d, queries=q, threads=ARGS.threads, sgemm_gflops=best[0], sgemm_block=best[1],
         sgemm_orientation=best[2],
         sgemm_square_gflops=square, read_gbps=max(rates.values()), read_sum_gbps=rates["sum"],
         read_dot_gbps=rates["dot"], table_bytes=nbytes)


xb = load(ARGS.table, ARGS.dim, ARGS.rows)
xq = load(ARGS.queries, ARGS.dim)
log(f"{ARGS.rows} x {ARGS.dim} table, {xq.shape[0]} queries, {ARGS.threads} threads, "
    f"faiss {faiss.__version__ if faiss else 'not loaded'}")

truth = {}
if faiss:
    t0 = time.perf_counter()
    flat = faiss.IndexFlatIP(ARGS.dim)
    flat.add(xb)
    flat_build = time.perf_counter() - t0
    indexes = not {"ivf", "hnsw"} <= ARGS.skip
    for k in ARGS.k:
        if indexes:
            truth[k] = flat.search(xq, k)[1]
        if "flat" not in ARGS.skip:
            med, p90 = timed(lambda: flat.search(xq, k), ARGS.rounds)
            emit(**base(index="flat", k=k, build_s=flat_build, reached=True, recall=1.0, median_ms=med * 1e3,
                        p90_ms=p90 * 1e3, qps=xq.shape[0] / med))
            log(f"flat k {k}: {med * 1e3:.2f} ms, {xq.shape[0] / med:.0f} queries/s")
    del flat

if "ivf" not in ARGS.skip:
    nlist = max(1, min(ARGS.rows // 39, int(round(4 * math.sqrt(ARGS.rows)))))
    sample = np.random.default_rng(ARGS.seed).choice(ARGS.rows, size=min(ARGS.rows, ARGS.ivf_train), replace=False)
    t0 = time.perf_counter()
    quantizer = faiss.IndexFlatIP(ARGS.dim)
    ivf = faiss.IndexIVFFlat(quantizer, ARGS.dim, nlist, faiss.METRIC_INNER_PRODUCT)
    ivf.train(np.ascontiguousarray(xb[np.sort(sample)]))
    ivf.add(xb)
    ivf_build = time.perf_counter() - t0
    log(f"ivf: nlist {nlist}, trained on {len(sample)} rows, built in {ivf_build:.1f} s")

    def set_nprobe(v):
        ivf.nprobe = v
    tuned("ivf", ivf, "nprobe", set_nprobe, 1, nlist, ivf_build, truth,
          dict(nlist=nlist, train_rows=int(len(sample))))
    del ivf, quantizer

if "hnsw" not in ARGS.skip:
    m, efc = ARGS.hnsw_m, ARGS.hnsw_ef_construction

    def hnsw_build(rows):
        t0 = time.perf_counter()
        h = faiss.IndexHNSWFlat(ARGS.dim, m, faiss.METRIC_INNER_PRODUCT)
        h.hnsw.efConstruction = efc
        h.add(xb[:rows])
        return h, time.perf_counter() - t0

    probe = min(ARGS.rows, 65536)
    half_s = hnsw_build(probe // 2)[1] if probe >= 2048 else None
    h, probe_s = hnsw_build(probe)
    # A row's insertion costs more as the graph grows (depth, cache misses):
    # the growth exponent from the two probes, kept within [1, 2].
    growth = 1.0 if half_s is None else min(2.0, max(1.0, math.log(probe_s / max(half_s, 1e-9)) / math.log(2)))

    def estimate(n):
        return probe_s * (n / probe) ** growth
    extra = dict(M=m, efConstruction=efc, estimated_build_s=estimate(ARGS.rows))
    n_h = ARGS.rows
    if probe < n_h and estimate(n_h) > ARGS.hnsw_budget_s:
        # The largest power-of-two multiple of the probe within the budget.
        n_h = probe
        while n_h * 2 <= ARGS.rows and estimate(n_h * 2) <= ARGS.hnsw_budget_s:
            n_h *= 2
        extra["subset_reason"] = (f"a build of all {ARGS.rows} rows is estimated at {estimate(ARGS.rows):.0f} s "
                                  f"({probe // 2} and {probe} rows took {half_s:.1f} and {probe_s:.1f} s), "
                                  f"above --hnsw-budget-s "
                                  f"{ARGS.hnsw_budget_s:.0f}: built on the first {n_h} rows, recall against "
                                  f"the flat index of those rows")
        log(f"hnsw: {extra['subset_reason']}")
    if n_h == probe:
        build = probe_s
    else:
        del h
        h, build = hnsw_build(n_h)
    log(f"hnsw: M {m}, efConstruction {efc}, {n_h} rows built in {build:.1f} s (estimated {estimate(n_h):.0f} s)")
    truth_h = truth
    if n_h < ARGS.rows:
        sub = faiss.IndexFlatIP(ARGS.dim)
        sub.add(xb[:n_h])
        truth_h = {k: sub.search(xq, k)[1] for k in ARGS.k}
        del sub

    def set_ef(v):
        h.hnsw.efSearch = v
    tuned("hnsw", h, "efSearch", set_ef, None, 8192, build, truth_h, dict(rows_indexed=n_h, **extra))
    del h

if "roofline" not in ARGS.skip:
    roofline()
