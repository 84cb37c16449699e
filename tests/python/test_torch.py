"""scps.torch: backward pushes the gradients autograd computes, checked
against torch.nn.EmbeddingBag on the same rows; the Pipeline's lookups are
exactly one step stale (sequential: none); it takes a DataLoader."""
import os

import numpy as np
import pytest
import torch

import scps
import scps.torch as st
from conftest import table

B, LR = 8, 0.25
TABLES = [table("ts", 30, 4, "sum", {"type": "sgd", "learning_rate": LR}),
          table("tm", 20, 6, "mean", {"type": "sgd", "learning_rate": LR}),
          table("tq", 25, 3, "sqrtn", {"type": "sgd", "learning_rate": LR})]
FEATURES = [{"name": "s", "table": "ts", "valency": [1, 4]},
            {"name": "m", "table": "tm", "valency": [1, 3]},
            {"name": "q", "table": "tq", "valency": [1, 5]}]


def random_batch(client, rng, weighted=("s", "q")):
    out = {}
    for f in client.features:
        lengths = rng.integers(1, 5, size=f.batch_size)
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        ids = rng.integers(0, f.vocabulary, size=int(offsets[-1])).astype(np.int64)
        w = rng.uniform(0.5, 1.5, ids.size).astype(np.float32) if f.name in weighted else None
        out[f.name] = scps.Ragged(torch.from_numpy(ids), offsets=torch.from_numpy(offsets),
                                  weights=None if w is None else torch.from_numpy(w))
    return out


def test_backward_pushes_embeddingbag_gradients(cluster):
    c = cluster(TABLES, FEATURES, batch_size=B)
    rng = np.random.default_rng(11)
    with scps.Client(c.servers) as client:
        emb = st.EmbeddingCollection(client)
        assert emb.step == 0 and list(emb.parameters()) == []
        batch = random_batch(client, rng)
        proj = {f.name: torch.randn(f.width, dtype=torch.float64) for f in client.features}
        # The reference: EmbeddingBag over the rows the servers hold, the
        # same loss, autograd's gradient of each table, SGD by hand.
        before = {f.table: client.read_rows(f.table, np.arange(f.vocabulary)) for f in client.features}
        want = {}
        for f in client.features:
            x = batch[f.name]
            bag = torch.nn.EmbeddingBag.from_pretrained(torch.from_numpy(before[f.table]).double(), freeze=False,
                                                        mode="mean" if f.name == "m" else "sum")
            w = x.weights.double() if x.weights is not None else None
            if f.name == "q":  # sqrtn: a sum with gains w / sqrt(sum of w^2) per sample
                sample = torch.repeat_interleave(torch.arange(B), torch.diff(x.offsets))
                sq = torch.zeros(B, dtype=torch.float64).index_add_(0, sample, w * w)
                w = w / torch.sqrt(sq[sample])
            acts = bag(x.values, x.offsets[:-1], per_sample_weights=w)
            (acts @ proj[f.name]).pow(2).sum().backward()
            want[f.table] = before[f.table] - LR * bag.weight.grad.numpy()

        acts = emb(batch)
        assert emb.step == 1
        loss = sum((acts[n].double() @ proj[n]).pow(2).sum() for n in acts)
        loss.backward()
        for f in client.features:
            after = client.read_rows(f.table, np.arange(f.vocabulary))
            np.testing.assert_allclose(after, want[f.table], rtol=1e-5, atol=1e-5, err_msg=f.name)
            assert not np.array_equal(after, before[f.table])
        # Evaluation (no grad) looks up without taking a step or pushing.
        with torch.no_grad():
            again = emb(batch)
        assert emb.step == 1
        assert all(not t.requires_grad for t in again.values())


def test_async_push_module_waits_before_next_lookup(cluster):
    c = cluster(TABLES, FEATURES, batch_size=B)
    with scps.Client(c.servers) as client:
        emb = st.EmbeddingCollection(client, async_push=True, step=5)
        batch = {f.name: np.zeros((B, 1), np.int64) for f in client.features}
        first = emb(batch)
        sum(t.sum() for t in first.values()).backward()  # every activation's gradient is 1
        second = emb(batch)  # waits for the push of step 5 first
        # sum combiner, B samples on row 0, gradient 1 each: the row moved by LR * B.
        np.testing.assert_allclose(second["s"].detach().numpy(), first["s"].detach().numpy() - LR * B, rtol=1e-6)
        emb.wait()


def staleness(client, pipelined, steps=6):
    """Every batch looks up row 0 of every table alone and pushes gradient
    1 on it; with SGD, a lookup's value tells how many pushes it saw."""
    batch = {f.name: np.zeros((B, 1), np.int64) for f in client.features}
    first = client.lookup(batch)["s"][0, 0]
    seen = []
    pipe = st.Pipeline(client, [(batch, k) for k in range(steps)], pipelined=pipelined)
    for s in pipe:
        assert s.rest == (s.step,)
        v = float(s.acts["s"][0, 0])
        seen.append(int(round((first - v) / (LR * B))))
        s.acts["s"].sum().backward()  # gradient 1 on each sample's activation
    assert pipe.stats.steps == steps
    assert int(round((first - client.lookup(batch)["s"][0, 0]) / (LR * B))) == steps
    return seen


def test_pipeline_is_exactly_one_step_stale(cluster):
    c = cluster(TABLES, FEATURES, batch_size=B)
    with scps.Client(c.servers) as client:
        # Batch k sees the pushes of batches 0 .. k-2: all but k-1's.
        assert staleness(client, pipelined=True) == [0, 0, 1, 2, 3, 4]
    d = cluster(TABLES, FEATURES, batch_size=B)
    with scps.Client(d.servers) as client:
        assert staleness(client, pipelined=False) == [0, 1, 2, 3, 4, 5]


def test_pipeline_with_a_dataloader(cluster):
    c = cluster(TABLES, FEATURES, batch_size=B)

    class Clicks(torch.utils.data.Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return {"s": torch.randint(0, 30, (B, 2), generator=g), "m": torch.randint(0, 20, (B, 3), generator=g),
                    "q": torch.randint(0, 25, (B, 1), generator=g)}, torch.rand(B, generator=g)

    loader = torch.utils.data.DataLoader(Clicks(), batch_size=None, num_workers=0)
    with scps.Client(c.servers) as client:
        before = client.read_rows("ts", np.arange(30))
        model = torch.nn.Linear(13, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        steps = []
        for s in st.Pipeline(client, loader):
            x = torch.cat([s.acts[n] for n in ("s", "m", "q")], dim=1)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x).squeeze(1), s.rest[0])
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps.append(s.step)
        assert steps == [0, 1, 2, 3, 4]
        assert not np.array_equal(before, client.read_rows("ts", np.arange(30)))
    with scps.Client(c.servers) as again:
        assert again.step() == 4


def readme_example(path):
    """The ```python block of a README, as a user would paste it."""
    text = open(path).read()
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_examples_run(cluster):
    c = cluster(TABLES, FEATURES, batch_size=B)
    repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    for name in ("README.md", os.path.join("client", "python", "README.md")):
        code = readme_example(os.path.join(repo, name))
        assert "127.0.0.1:50051,127.0.0.1:50052" in code, name
        code = code.replace("127.0.0.1:50051,127.0.0.1:50052", c.servers)
        g = torch.Generator().manual_seed(1)
        loader = [({"s": torch.randint(0, 30, (B, 2), generator=g), "m": torch.randint(0, 20, (B, 3), generator=g),
                    "q": torch.randint(0, 25, (B, 1), generator=g)}, torch.rand(B, generator=g).round())
                  for _ in range(4)]
        scope = {"loader": loader}
        exec(compile(code, name, "exec"), scope)
        scope["client"].close()
        with scps.Client(c.servers) as again:
            assert again.step() == 3 + 4 * (name != "README.md")  # 4 pushes per example



def test_steps_continue_across_pipelines_of_one_client(cluster):
    c = cluster(TABLES, FEATURES, batch_size=B)
    batch = {"s": np.zeros((B, 1), np.int64), "m": np.zeros((B, 1), np.int64), "q": np.zeros((B, 1), np.int64)}
    with scps.Client(c.servers) as client:
        assert client.next_step() == 0
        first = [s.step for s in st.Pipeline(client, [batch] * 3)]
        emb = st.EmbeddingCollection(client)
        sum(t.sum() for t in emb(batch).values()).backward()
        second = [s.step for s in st.Pipeline(client, [batch] * 2, pipelined=False)]
        assert (first, emb.step, second, client.step()) == ([0, 1, 2], 4, [4, 5], -1)
        assert client.next_step() == 6
