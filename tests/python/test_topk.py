"""Client.topk against numpy: exact answers equal a float64 brute force on
the rows the servers hold (read with read_rows) for every score, ties go to
the lower id across servers and SparseCores, approximate answers keep
their expected recall, inputs convert as documented, and bad input raises
scps.InvalidArgument naming the argument and value."""
import numpy as np
import pytest
import torch

import scps
from conftest import table

V, D = 3000, 16
TABLES = [table("t", V, D), table("c", 400, 8, init={"type": "constant", "value": 0.5}), table("w", 200, 12)]
FEATURES = [{"name": "ft", "table": "t", "valency": 1}, {"name": "fc", "table": "c", "valency": 1},
            {"name": "fw", "table": "w", "valency": 1}]


@pytest.fixture
def client(cluster):
    c = cluster(TABLES, FEATURES)
    with scps.Client(c.servers) as cl:
        yield cl


def brute_force(rows, q, score):
    r, q = rows.astype(np.float64), q.astype(np.float64)
    if score == "dot":
        return q @ r.T
    if score == "cosine":
        return (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (r / np.linalg.norm(r, axis=1, keepdims=True)).T
    return -((q[:, None, :] - r[None, :, :]) ** 2).sum(-1)


@pytest.mark.parametrize("score", ["dot", "cosine", "l2"])
def test_exact_equals_brute_force(client, score):
    rows = client.read_rows("t", np.arange(V))
    q = np.random.default_rng(3).standard_normal((20, D)).astype(np.float32)
    k = 8
    ids, scores, info = client.topk("t", q, k=k, score=score, with_info=True)
    assert ids.shape == (20, k) and ids.dtype == np.int64 and scores.shape == (20, k) and scores.dtype == np.float32
    assert info == {"bins": 0, "rows_scanned": V, "expected_recall": 1.0}
    s = brute_force(rows, q, score)
    separated = 0
    for i in range(len(q)):
        np.testing.assert_allclose(scores[i], s[i][ids[i]], rtol=1e-5, atol=1e-5)
        assert list(scores[i]) == sorted(scores[i], reverse=True)
        order = np.argsort(-s[i], kind="stable")
        # Scores apart by far more than float32's error: the same ids, in order.
        if np.min(-np.diff(s[i][order[:k + 1]])) > 1e-4:
            separated += 1
            assert list(ids[i]) == list(order[:k]), "query %d" % i
    assert separated >= 15, "only %d of 20 queries had well-separated scores" % separated


def test_range(client):
    rows = client.read_rows("t", np.arange(V))
    q = np.random.default_rng(4).standard_normal((6, D)).astype(np.float32)
    ids, scores = client.topk("t", q, k=5, first_id=1000, count=250)
    assert ((ids >= 1000) & (ids < 1250)).all()
    s = brute_force(rows[1000:1250], q, "dot")
    for i in range(len(q)):
        assert set(ids[i]) == set(np.argsort(-s[i])[:5] + 1000)


def test_ties_go_to_the_lower_id(client):
    # Table c's rows are all equal: every score ties, on every server.
    q = np.random.default_rng(5).standard_normal((3, 8)).astype(np.float32)
    for score in ("dot", "cosine", "l2"):
        ids, scores = client.topk("c", q, k=6, score=score)
        assert (ids == np.arange(6)).all(), (score, ids)
        assert (scores == scores[:, :1]).all()
        ids, _ = client.topk("c", q, k=6, score=score, first_id=101, count=50)
        assert (ids == np.arange(101, 107)).all(), (score, ids)
    ids, scores = client.topk("c", q, k=400)
    assert (ids == np.arange(400)).all()
    np.testing.assert_allclose(scores[:, 0], q.astype(np.float64).sum(1) * 0.5, rtol=1e-5)


def test_approximate_recall(client):
    q = np.random.default_rng(6).standard_normal((64, D)).astype(np.float32)
    exact, _ = client.topk("t", q, k=10)
    ids, scores, info = client.topk("t", q, k=10, recall_target=0.9, with_info=True)
    assert info["bins"] > 0 and info["expected_recall"] >= 0.9 and info["rows_scanned"] == V
    recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(ids, exact)])
    assert recall >= 0.9, recall


def test_input_forms(client):
    q = np.random.default_rng(7).standard_normal((4, D)).astype(np.float32)
    ids, scores = client.topk("t", q, k=3)
    one_ids, one_scores = client.topk("t", q[1], k=3)
    assert one_ids.shape == (3,) and (one_ids == ids[1]).all() and (one_scores == scores[1]).all()
    for other in (q.astype(np.float64), q.tolist(), torch.from_numpy(q), np.asfortranarray(q)):
        i2, s2 = client.topk("t", other, k=3)
        assert (i2 == ids).all() and (s2 == scores).all()
    # Values bfloat16 holds exactly: the same answer whichever way they travel.
    qb = (q.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    a = client.topk("t", qb, k=5)
    b = client.topk("t", qb, k=5, query_format="bfloat16")
    assert (a[0] == b[0]).all() and (a[1] == b[1]).all()


def test_cosine_of_huge_and_tiny_queries(client):
    # |q|^2 past float32's range (1e19 x 4) or below its smallest value
    # (1e-30 x 4): cosine depends on the direction only.
    q = np.random.default_rng(8).standard_normal((3, D)).astype(np.float32)
    ids, scores = client.topk("t", q, k=6, score="cosine")
    for scale in (1e19, 1e-30):
        i2, s2 = client.topk("t", q * np.float32(scale), k=6, score="cosine")
        assert (i2 == ids).all(), (scale, i2, ids)
        np.testing.assert_allclose(s2, scores, rtol=1e-6)


Q = np.zeros((2, D), np.float32)
Q_NAN = Q.copy()
Q_NAN[1, 3] = np.nan
Q_INF = Q.copy()
Q_INF[0, 0] = np.inf
BAD = [
    (dict(table="nope"), "table 'nope'"),
    (dict(score="manhattan"), "score 'manhattan'"),
    (dict(k=0), "k 0"),
    (dict(k=V + 1), "k %d not in [1, %d]" % (V + 1, V)),
    (dict(k=11, count=10), "k 11 not in [1, 10]"),
    (dict(k="3"), "k '3': expected an integer"),
    (dict(recall_target=0), "recall_target 0 not in (0, 1]"),
    (dict(recall_target=-0.1), "recall_target -0.1 not in (0, 1]"),
    (dict(recall_target=1.5), "recall_target 1.5 not in (0, 1]"),
    (dict(recall_target=float("nan")), "recall_target nan not in (0, 1]"),
    (dict(recall_target="high"), "recall_target 'high'"),
    (dict(queries=np.zeros((2, D - 1), np.float32)), "queries: shape (2, 15), expected [n, 16]"),
    (dict(queries=np.zeros((0, D), np.float32)), "queries: shape (0, 16)"),
    (dict(queries=np.zeros((2, 2, 4), np.float32)), "queries: shape (2, 2, 4)"),
    (dict(queries="abc"), "queries: not convertible to a float32 array"),
    (dict(queries=Q_NAN), "queries[1][3] = nan: every query value must be finite"),
    (dict(queries=Q_INF), "queries[0][0] = inf"),
    (dict(first_id=5), "first_id 5 with count 0"),
    (dict(first_id=2990, count=20), "first_id 2990, count 20: the range must lie in [0, 3000)"),
    (dict(first_id=-1, count=20), "first_id -1, count 20"),
    (dict(query_format="fp8"), "query_format: wire format 'fp8'"),
    (dict(query_format=3), "query_format 3"),
    (dict(table="w", queries=np.zeros((1, 12), np.float32), query_format="e4m3"),
     "query_format 'e4m3' needs an embedding_dim that is a multiple of 8; table 'w' has 12"),
]


@pytest.mark.parametrize("kwargs,message", BAD, ids=[m for _, m in BAD])
def test_bad_input(client, kwargs, message):
    args = dict(table="t", queries=Q)
    args.update(kwargs)
    with pytest.raises(scps.InvalidArgument) as e:
        client.topk(**args)
    assert message in str(e.value), str(e.value)
    assert e.value.status == "SCPS_EINVAL"
