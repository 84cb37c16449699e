"""Bad inputs raise exceptions that name the feature, field and value and
change nothing on the servers; a killed server gives an exception within
the deadline, not a hang; a call waiting on a server releases the GIL."""
import concurrent.futures
import signal
import threading
import time

import numpy as np
import pytest
import torch

import scps
from conftest import table

B = 4
TABLES = [table("ta", 10, 4, "sum"), table("tb", 6, 2, "mean")]
FEATURES = [{"name": "fa", "table": "ta", "valency": 2}, {"name": "fb", "table": "tb", "valency": [1, 3]}]


def good():
    return {"fa": np.arange(8, dtype=np.int64).reshape(B, 2),
            "fb": scps.Ragged(np.array([0, 1, 2, 3, 4], np.int64), offsets=np.array([0, 1, 2, 3, 5], np.int64))}


def grads(client, value=1.0):
    return {f.name: np.full((f.batch_size, f.width), value, np.float32) for f in client.features}


def server_state(client):
    """Every row of every table, and the Lookup and ApplyGradients calls each server has had."""
    rows = {t: client.read_rows(t, np.arange(v.vocabulary)) for t, v in client.config.tables.items()}
    calls = [{m["method"]: m["calls"] for m in s["methods"] if m["method"] in ("Lookup", "ApplyGradients")}
             for s in client.stats()]
    return rows, calls


def with_(batch, **kw):
    b = dict(batch)
    b.update(kw)
    return b


BAD_LOOKUPS = [
    (with_(good(), fa=np.arange(8, dtype=np.int32).reshape(B, 2)), "feature 'fa' ids: dtype int32, expected int64"),
    (with_(good(), fa=np.arange(10, dtype=np.int64).reshape(5, 2)), "feature 'fa' ids: shape (5, 2), expected (4, valency)"),
    (with_(good(), fa=np.arange(16, dtype=np.int64).reshape(B, 4)[:, ::2]), "feature 'fa' ids: array of shape (4, 2)"),
    (with_(good(), fa=torch.arange(8).reshape(2, B).t()), "is not contiguous"),
    (with_(good(), fa=np.array([[0, 1], [2, 3], [4, 10], [6, 7]], np.int64)), "feature 'fa': id 10"),
    (with_(good(), fa=np.array([[0, 1], [2, -3], [4, 5], [6, 7]], np.int64)), "feature 'fa': id -3"),
    (with_(good(), fb=scps.Ragged(np.arange(5, dtype=np.int64), offsets=np.array([0, 1, 2, 5], np.int64))),
     "feature 'fb' offsets: shape (4,), expected (5,)"),
    (with_(good(), fb=scps.Ragged(np.arange(5, dtype=np.int64), lengths=np.array([1, 1, 1, 2], np.int64))),
     "feature 'fb' lengths: dtype int64, expected int32"),
    (with_(good(), fb=scps.Ragged(np.arange(5, dtype=np.int64), offsets=np.array([0, 1, 2, 3, 5], np.int64),
                                  weights=np.ones(5))), "feature 'fb' weights: dtype float64, expected float32"),
    (with_(good(), fb=scps.Ragged(np.arange(5, dtype=np.int64), offsets=np.array([0, 3, 2, 4, 5], np.int64))),
     "feature 'fb'"),
    (with_(good(), fb=scps.Ragged(np.arange(5, dtype=np.int64), offsets=np.array([0, 1, 2, 3, 5], np.int64),
                                  weights=np.array([1, 1, np.nan, 1, 1], np.float32))), "feature 'fb'"),
    (with_(good(), fc=np.zeros((B, 1), np.int64)), "unknown feature 'fc'"),
    ({"fa": good()["fa"]}, "no input for feature 'fb'"),
    (with_(good(), fa=[[0, 1]] * B), "feature 'fa': a list"),
]


def test_bad_inputs_raise_and_change_nothing(cluster):
    c = cluster(TABLES, FEATURES, batch_size=B)
    with scps.Client(c.servers) as client:
        client.push(good(), grads(client), 0)  # a real step first, so "nothing changed" means something
        before = server_state(client)
        for batch, message in BAD_LOOKUPS:
            with pytest.raises(scps.InvalidArgument) as e:
                client.lookup(batch)
            assert message in str(e.value), (message, str(e.value))
            assert e.value.status in ("SCPS_EINVAL", "SCPS_ERANGE")
            with pytest.raises(scps.InvalidArgument):
                client.push(batch, grads(client), 1)
        bad_grads = [
            ({"fa": grads(client)["fa"]}, "gradients: none for feature 'fb'"),
            (with_(grads(client), fa=np.ones((B, 4))), "feature 'fa' gradients: dtype float64, expected float32"),
            (with_(grads(client), fb=np.ones((B, 3), np.float32)), "feature 'fb' gradients: shape (4, 3), expected (4, 2)"),
            (with_(grads(client), fa=np.full((B, 4), np.inf, np.float32)), "feature 'fa'"),
            (with_(grads(client), fb=np.ones((2, B), np.float32).T), "not C-contiguous"),
        ]
        prepared = client.prepare(good())
        for g, message in bad_grads:
            with pytest.raises(scps.InvalidArgument) as e:
                client.push(prepared, g, 1)
            assert message in str(e.value), (message, str(e.value))
        for kw, message in [(dict(step=-1), "step -1"), (dict(step=1.5), "step 1.5"),
                            (dict(step=1, deadline_ms=0), "deadline_ms 0"),
                            (dict(step=1, learning_rate=-0.1), "learning_rate -0.1")]:
            with pytest.raises(scps.InvalidArgument) as e:
                client.push(prepared, grads(client), **kw)
            assert message in str(e.value)
        with scps.Client(c.servers) as other:
            with pytest.raises(scps.InvalidArgument, match="another client"):
                other.push(prepared, grads(client), 1)
        after = server_state(client)
        for t in before[0]:
            assert np.array_equal(before[0][t], after[0][t]), t
        assert before[1] == after[1]
    for kw, message in [(dict(wire_format="float16"), "wire_format 'float16': expected 'float32', 'bfloat16'"),
                        (dict(wire_format="e9m1"), "wire_format 'e9m1': expected"),
                        (dict(wire_format="e4m3/"), "wire_format 'e4m3/': expected"),
                        (dict(policy="skip"), "policy 'skip'"), (dict(deadline_ms=-5), "deadline_ms -5")]:
        with pytest.raises(scps.InvalidArgument, match=message):
            scps.Client(c.servers, **kw)
    with pytest.raises(scps.Error) as e:
        scps.Client(c.addrs[:1])  # one process of two
    assert e.value.status == "SCPS_EMISMATCH"


def test_killed_server_raises_within_the_deadline(cluster):
    c = cluster(TABLES, FEATURES, batch_size=B)
    with scps.Client(c.servers, deadline_ms=1500) as client:
        client.lookup(good())
        c.procs[1].send_signal(signal.SIGKILL)
        c.procs[1].wait()
        for call in (lambda: client.lookup(good()), lambda: client.push(good(), grads(client), 0),
                     lambda: client.lookup_async(good()).result(timeout=10)):
            t0 = time.monotonic()
            with pytest.raises((scps.Unavailable, scps.DeadlineExceeded)) as e:
                call()
            assert time.monotonic() - t0 < 1.5 + 1.0
            assert e.value.server == 1 and e.value.address == c.addrs[1], str(e.value)


def test_waiting_releases_the_gil(cluster):
    c = cluster(TABLES, FEATURES, batch_size=B)
    with scps.Client(c.servers, deadline_ms=1500) as client:
        client.lookup(good())
        count = [0]
        stop = threading.Event()

        def spin():
            while not stop.is_set():
                count[0] += 1

        c.procs[0].send_signal(signal.SIGSTOP)  # the lookup waits its whole deadline for an answer
        t = threading.Thread(target=spin)
        t.start()
        try:
            fut = client.lookup_async(good())
            with pytest.raises(concurrent.futures.TimeoutError):
                fut.result(timeout=0.2)
            n0, t0 = count[0], time.monotonic()
            with pytest.raises(scps.DeadlineExceeded):
                client.lookup(good())
            n1, waited = count[0], time.monotonic() - t0
            with pytest.raises(scps.DeadlineExceeded):
                fut.result()
            assert isinstance(fut.exception(), scps.DeadlineExceeded)
        finally:
            stop.set()
            t.join()
            c.procs[0].send_signal(signal.SIGCONT)
        assert waited > 1.0
        # A thread that held the GIL for the whole wait would leave the
        # spinner at a few switch intervals' worth of increments.
        assert n1 - n0 > 100000, (n1 - n0, waited)
        client.lookup(good())


def test_operator_calls(cluster, tmp_path):
    c = cluster(TABLES, FEATURES, batch_size=B, extra=("--checkpoint-dir", str(tmp_path)))
    with scps.Client(c.servers) as client:
        assert client.config.checkpoint_dirs == (True, True)
        assert [h["status"] for h in client.health()] == ["STATUS_SERVING"] * 2
        client.push(good(), grads(client), 0)
        stats = client.stats()
        assert [s["server"] for s in stats] == c.addrs
        assert sum(m["calls"] for s in stats for m in s["methods"] if m["method"] == "ApplyGradients") == 2
        cfg = client.server_config()
        assert [s["process_index"] for s in cfg] == [0, 1]
        res = client.checkpoint(0, "ckpt")
        assert res["step"] == 0 and res["files"] > 0 and "ckpt" in res["path"]
        assert client.last_auto_checkpoint() is None
        rows = client.read_rows("ta", [1, 1, 2])
        assert rows.shape == (3, 4) and np.array_equal(rows[0], rows[1])
    c.procs[1].send_signal(signal.SIGKILL)
    c.procs[1].wait()
    with pytest.raises(scps.Unavailable) as e:
        scps.Client(c.servers, connect_timeout_ms=500)
    assert e.value.server == 1
