#!/usr/bin/python3
"""python_lookup.py: lookups through the scps Python package against a
running cluster, timed as scps-bench-client --mode lookup times libscps's
(prepare + Lookup per batch, batches generated before timing, the median
reported), so tests/bench/python.sh can set the two side by side. Batches:
the workload's valencies and Zipf (or uniform) ids drawn with numpy.

    python_lookup.py --servers LIST --workload FILE [--batches K] [--warmup W]
                     [--prep-threads T] [--wire-format F]
Prints one JSON line: ms_per_batch_median, samples_per_s."""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python",
                                "examples"))
from train_ctr import zipf_folded  # noqa: E402  the example's sampler, scps_workload_gen.c's

import scps  # noqa: E402


def batches(workload, features, k, rng):
    draws = {f["name"]: f["valency"] for f in workload["features"]}
    ids = workload["ids"]
    out = []
    for _ in range(k):
        b = {}
        for f in features:
            v = draws[f.name]
            lo, hi = (v, v) if isinstance(v, int) else v
            lengths = rng.integers(lo, hi + 1, size=f.batch_size)
            offsets = np.zeros(f.batch_size + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
            n = int(offsets[-1])
            x = (zipf_folded(rng, ids["exponent"], f.vocabulary, n) if ids["distribution"] == "zipf"
                 else rng.integers(0, f.vocabulary, n))
            b[f.name] = scps.Ragged(x.astype(np.int64), offsets=offsets)
        out.append(b)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servers", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--prep-threads", type=int, default=os.cpu_count())
    ap.add_argument("--wire-format", default="float32")
    a = ap.parse_args()
    with open(a.workload) as f:
        workload = json.load(f)
    scps.memtune_apply()  # as scps-bench-client does
    client = scps.Client(a.servers, prep_threads=a.prep_threads, wire_format=a.wire_format)
    data = batches(workload, client.features, min(a.batches, 8), np.random.default_rng(1))
    for i in range(a.warmup):
        client.lookup(data[i % len(data)])
    times = []
    for i in range(a.batches):
        t0 = time.perf_counter()
        client.lookup(data[i % len(data)])
        times.append(time.perf_counter() - t0)
    ms = 1e3 * float(np.median(times))
    print(json.dumps({"workload": workload["name"], "wire_format": a.wire_format, "batches": a.batches,
                      "ms_per_batch_median": round(ms, 3),
                      "samples_per_s": round(client.config.batch_size / ms * 1e3, 1)}))
    client.close()


if __name__ == "__main__":
    main()
