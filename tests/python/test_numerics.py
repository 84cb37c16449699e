"""The package's lookups and pushes equal libscps's driven from C
(scps_pyref.c) bit for bit on the same inputs, in float32, bfloat16 and eXmY, for
ragged (offsets, lengths), dense and weighted inputs, every combiner and
stacked tables; and lookups equal an independent numpy pooling of the rows
the servers hold."""
import os
import subprocess

import numpy as np
import pytest
import torch

import scps
from conftest import table

B = 16
# Every combiner; two tables of like shape and optimizer (stacked by the
# servers), one table read by two features, weights on one feature.
TABLES = [table("t_sum", 97, 8, "sum"), table("t_sum2", 61, 8, "sum"),
          table("t_mean", 50, 4, "mean"), table("t_sqrtn", 40, 16, "sqrtn",
                                                 {"type": "adagrad", "learning_rate": 0.3,
                                                  "initial_accumulator": 0.1})]
FEATURES = [{"name": "a", "table": "t_sum", "valency": [0, 5]},
            {"name": "b", "table": "t_sum2", "valency": 3},
            {"name": "c", "table": "t_mean", "valency": [1, 4]},
            {"name": "d", "table": "t_sqrtn", "valency": [1, 6]},
            {"name": "e", "table": "t_sum", "valency": 2}]


def ragged_batch(client, rng, weighted=True):
    """Per feature (offsets, ids, weights or None), drawn within its
    vocabulary; weights on features a and d if weighted."""
    out = {}
    for f in client.features:
        lengths = rng.integers(0 if f.name == "a" else 1, 6, size=f.batch_size)
        if f.name in ("b", "e"):
            lengths[:] = 3 if f.name == "b" else 2
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        ids = rng.integers(0, f.vocabulary, size=int(offsets[-1])).astype(np.int64)
        weights = rng.uniform(0.1, 2.0, size=ids.size).astype(np.float32) if weighted and f.name in ("a", "d") else None
        out[f.name] = (offsets, ids, weights)
    return out


def write_input(path, client, batch):
    with open(path, "wb") as fh:
        np.array([len(client.features)], np.int64).tofile(fh)
        for f in client.features:
            offsets, ids, weights = batch[f.name]
            np.array([f.batch_size, ids.size, weights is not None], np.int64).tofile(fh)
            offsets.tofile(fh)
            ids.tofile(fh)
            if weights is not None:
                weights.tofile(fh)


def pyref(client, servers, wire, *args):
    r = subprocess.run([os.environ["SCPS_PYREF"], servers, wire] + [str(a) for a in args], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def ref_lookup(client, servers, wire, batch, tmp):
    path_in, path_out = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.bin")
    write_input(path_in, client, batch)
    pyref(client, servers, wire, "lookup", path_in, path_out)
    flat = np.fromfile(path_out, dtype=np.float32)
    out, k = {}, 0
    for f in client.features:
        n = f.batch_size * f.width
        out[f.name] = flat[k:k + n].reshape(f.batch_size, f.width)
        k += n
    assert k == flat.size
    return out


def forms(batch):
    """The same batch as the package takes it four ways: ragged with
    offsets, ragged with lengths (torch tensors), dense where every sample
    has the same valency, and a KeyedJagged of all features."""
    yield {n: scps.Ragged(ids, offsets=off, weights=w) for n, (off, ids, w) in batch.items()}
    yield {n: scps.Ragged(torch.from_numpy(ids), lengths=torch.from_numpy(np.diff(off).astype(np.int32)),
                          weights=None if w is None else torch.from_numpy(w)) for n, (off, ids, w) in batch.items()}
    dense = {}
    for n, (off, ids, w) in batch.items():
        v = np.diff(off)
        if (v == v[0]).all() and v[0] > 0:
            dense[n] = scps.Dense(ids.reshape(-1, v[0]), None if w is None else w.reshape(-1, v[0]))
        else:
            dense[n] = scps.Ragged(ids, offsets=off, weights=w)
    yield dense
    names = list(batch)
    values = np.concatenate([batch[n][1] for n in names])
    lengths = np.concatenate([np.diff(batch[n][0]) for n in names]).astype(np.int32)
    if all(batch[n][2] is None for n in names) or all(batch[n][2] is not None for n in names):
        weights = None if batch[names[0]][2] is None else np.concatenate([batch[n][2] for n in names])
        yield scps.KeyedJagged(names, values, lengths=lengths, weights=weights)


def numpy_pool(client, batch):
    """The combiners over the rows the servers hold, in float64."""
    out = {}
    combiner = {t["name"]: t["combiner"] for t in TABLES}
    for f in client.features:
        off, ids, w = batch[f.name]
        rows = client.read_rows(f.table, ids).astype(np.float64)
        w = np.ones(ids.size) if w is None else w.astype(np.float64)
        acts = np.zeros((f.batch_size, f.width))
        for s in range(f.batch_size):
            a, b = off[s], off[s + 1]
            if a == b:
                continue
            gain = {"sum": w[a:b], "mean": w[a:b] / w[a:b].sum(), "sqrtn": w[a:b] / np.sqrt((w[a:b] ** 2).sum())}
            acts[s] = gain[combiner[f.table]] @ rows[a:b]
        out[f.name] = acts
    return out


@pytest.mark.parametrize("wire", ["float32", "bfloat16", "e4m3/e3m0s"])
def test_lookup_and_push_equal_libscps(cluster, tmp_path, wire):
    a = cluster(TABLES, FEATURES, batch_size=B)
    b = cluster(TABLES, FEATURES, batch_size=B)  # the C reference's twin, pushed from C
    rng = np.random.default_rng(7)
    with scps.Client(a.servers, wire_format=wire) as client:
        assert [f.name for f in client.features] == [f["name"] for f in FEATURES]
        stacks = {t.name: t.features for t in client.config.tables.values()}
        assert stacks["t_sum"] == ("a", "e")
        for step in range(3):
            batch = ragged_batch(client, rng, weighted=step != 2)  # unweighted: the KeyedJagged form too
            want = ref_lookup(client, b.servers, wire, batch, str(tmp_path))
            n_forms = 0
            for form in forms(batch):
                n_forms += 1
                got = client.lookup(form)
                for n in want:
                    g = got[n].numpy() if isinstance(got[n], torch.Tensor) else got[n]
                    assert g.dtype == np.float32 and g.shape == want[n].shape
                    assert np.array_equal(g.view(np.uint32), want[n].view(np.uint32)), (wire, step, n)
            assert n_forms == (3 if step != 2 else 4)
            if wire == "float32":
                pooled = numpy_pool(client, batch)
                for n in want:
                    np.testing.assert_allclose(want[n], pooled[n], rtol=2e-6, atol=2e-6, err_msg=n)
            grads = {f.name: rng.standard_normal((f.batch_size, f.width)).astype(np.float32)
                     for f in client.features}
            prepared = client.prepare(next(forms(batch)))
            client.lookup(prepared)
            client.push(prepared, grads, step)
            path_in, path_g = os.path.join(str(tmp_path), "in.bin"), os.path.join(str(tmp_path), "g.bin")
            write_input(path_in, client, batch)
            with open(path_g, "wb") as fh:
                for f in client.features:
                    grads[f.name].tofile(fh)
            pyref(client, b.servers, wire, "push", path_in, path_g, step)
        # The servers run on this host: answers and gradients by sample went
        # through shared memory; the twin reads back over the connection.
        assert client.traffic()["shared_bytes_received"] > 0
        with scps.Client(b.servers, wire_format=wire, shared_memory="off") as twin:
            for t in client.config.tables.values():
                ids = np.arange(t.vocabulary)
                slots = 1 if t.name == "t_sqrtn" else 0
                mine = client.read_rows(t.name, ids, num_slots=slots)
                theirs = twin.read_rows(t.name, ids, num_slots=slots)
                for x, y in zip(mine if slots else [mine], theirs if slots else [theirs]):
                    assert np.array_equal(x.view(np.uint32), y.view(np.uint32)), t.name
        assert client.traffic()["bytes_sent"] > 0


def test_pushes_change_rows_and_async_matches_blocking(cluster):
    c = cluster(TABLES, FEATURES, batch_size=B)
    rng = np.random.default_rng(3)
    with scps.Client(c.servers) as client:
        batch = ragged_batch(client, rng)
        inputs = next(forms(batch))
        before = {t: client.read_rows(t, np.arange(v.vocabulary)) for t, v in client.config.tables.items()}
        blocking = client.lookup(inputs)
        fut = client.lookup_async(inputs)
        got = fut.result(timeout=30)
        assert fut.done()
        for n in blocking:
            assert np.array_equal(blocking[n], got[n])
        grads = {f.name: np.ones((f.batch_size, f.width), np.float32) for f in client.features}
        client.push_async(client.prepare(inputs), grads, 0).result(timeout=30)
        after = {t: client.read_rows(t, np.arange(v.vocabulary)) for t, v in client.config.tables.items()}
        for t in before:
            touched = np.unique(np.concatenate([batch[f.name][1] for f in client.features if f.table == t]))
            changed = np.flatnonzero((before[t] != after[t]).any(axis=1))
            assert set(changed) <= set(touched) and len(changed) > 0, t


class KJTLike:
    """The accessors of torchrec's KeyedJaggedTensor that the package reads
    (torchrec is not a Debian package): keys(), values(), lengths() as
    int64, weights_or_none()."""

    def __init__(self, keys, values, lengths):
        self._k, self._v, self._l = keys, values, lengths

    def keys(self):
        return self._k

    def values(self):
        return self._v

    def lengths(self):
        return self._l

    def weights_or_none(self):
        return None


def test_keyed_jagged_tensor_interface(cluster):
    c = cluster(TABLES, FEATURES, batch_size=B)
    rng = np.random.default_rng(9)
    with scps.Client(c.servers) as client:
        batch = ragged_batch(client, rng, weighted=False)
        names = [f.name for f in client.features][::-1]  # any key order
        kjt = KJTLike(names, torch.from_numpy(np.concatenate([batch[n][1] for n in names])),
                      torch.from_numpy(np.concatenate([np.diff(batch[n][0]) for n in names])))
        got, want = client.lookup(kjt), client.lookup(next(forms(batch)))
        assert isinstance(got["a"], torch.Tensor)
        for n in want:
            assert np.array_equal(got[n].numpy(), want[n]), n
