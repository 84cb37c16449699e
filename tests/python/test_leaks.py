"""Many calls leak nothing: over 10,000 lookups (blocking into new numpy
arrays, into torch tensors, into caller's arrays, and asynchronous) and
pushes, the inputs' reference counts, tracemalloc's traced memory and the
process's RSS stay where they were after a warm-up."""
import gc
import sys
import tracemalloc

import numpy as np
import torch

import scps
from conftest import table

B = 64
TABLES = [table("ta", 1000, 16, "sum"), table("tb", 500, 8, "mean")]
FEATURES = [{"name": "fa", "table": "ta", "valency": 4}, {"name": "fb", "table": "tb", "valency": [1, 8]}]


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def test_ten_thousand_lookups_leak_nothing(cluster):
    c = cluster(TABLES, FEATURES, batch_size=B, processes=1)
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 1000, (B, 4)).astype(np.int64)
    values = rng.integers(0, 500, 4 * B).astype(np.int64)
    offsets = np.arange(0, 4 * B + 1, 4, dtype=np.int64)
    weights = np.ones(4 * B, np.float32)
    batch = {"fa": ids, "fb": scps.Ragged(values, offsets=offsets, weights=weights)}
    tbatch = {"fa": torch.from_numpy(ids), "fb": scps.Ragged(torch.from_numpy(values), offsets=torch.from_numpy(offsets))}
    out = {"fa": np.empty((B, 16), np.float32), "fb": np.empty((B, 8), np.float32)}
    with scps.Client(c.servers) as client:
        g = {f.name: np.full((B, f.width), 1e-6, np.float32) for f in client.features}
        prepared = client.prepare(batch)

        def rounds(n):
            for i in range(n):
                k = i % 5
                if k == 0:
                    client.lookup(batch)
                elif k == 1:
                    client.lookup(tbatch)
                elif k == 2:
                    client.lookup(prepared, out=out)
                elif k == 3:
                    client.lookup_async(batch).result()
                else:
                    client.push(prepared, g, i)

        rounds(1000)
        gc.collect()
        refs = [sys.getrefcount(a) for a in (ids, values, offsets, weights, out["fa"])]
        tracemalloc.start()
        traced0 = tracemalloc.get_traced_memory()[0]
        rss0 = rss_kib()
        rounds(10000)
        gc.collect()
        traced1 = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        rss1 = rss_kib()
        assert [sys.getrefcount(a) for a in (ids, values, offsets, weights, out["fa"])] == refs
        # A leaked activation array per lookup alone would be 8000 x 6 KiB.
        assert traced1 - traced0 < 256 * 1024, traced1 - traced0
        assert rss1 - rss0 < 16 * 1024, (rss0, rss1)
