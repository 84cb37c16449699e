"""Storage formats on a server: a table kept in e4m3 with its Adagrad
accumulator in bfloat16 trains and is looked up; its checkpoint, restored
into a server declaring float32 (Restore RPC and --restore at start),
gives the same rows; one declaring e2m1 gets them rounded."""
import os

import numpy as np

from scps_srvtest import Cluster, call_status, main

BATCH = 16
VOCAB = 400


def tables(fmt, slot):
    t = {"name": "a", "vocabulary_size": VOCAB, "embedding_dim": 8, "combiner": "sum",
         "optimizer": {"type": "adagrad", "learning_rate": 0.1}, "initializer": {"type": "uniform", "scale": 0.5}}
    if fmt:
        t["storage_format"] = fmt
    if slot:
        t["slot_formats"] = {"accumulator": slot}
    return [t]


FEATURES = [{"name": "fa", "table": "a", "valency": 2}]


def rows(cl):
    return cl.read_rows("a", list(range(VOCAB)))


def test_restore_across_formats(env):
    pb = env.pb
    root = os.path.join(env.tmp, "root")
    cfg8 = env.write_config("e4m3", BATCH, tables("e4m3", "bfloat16"), FEATURES)
    a = env.server(cfg8, extra=["--checkpoint-dir", root, "--checkpoint-min-interval", "0"]).wait_ready()
    cl = Cluster(env, [a])
    env.check(cl.configs[0].cluster.tables[0].storage_format == "e4m3"
              and list(cl.configs[0].cluster.tables[0].slot_formats) == ["bfloat16"],
              "GetConfig declares the formats: %s" % cl.configs[0].cluster.tables[0])
    before = rows(cl)
    rng = np.random.default_rng(3)
    for s in range(1, 6):
        ids = rng.integers(0, VOCAB, size=(BATCH, 2))
        cl.apply({"fa": [[(int(i), 1.0) for i in row] for row in ids]}, {"fa": rng.standard_normal((BATCH, 8))}, step=s)
    trained = rows(cl)
    env.check(not np.array_equal(before, trained), "training moved the e4m3 rows")
    # e4m3 values have at most 4 significant bits (the sum of one row with
    # gain 1 is the row itself)
    mant = np.frexp(trained)[0] * 16
    env.check(np.array_equal(mant, np.round(mant)), "the rows hold e4m3 values: %s" % trained[0])
    st = a.stub().Stats(pb.StatsRequest(), timeout=30)
    used = sum(c.memory_used_bytes for c in st.sparse_cores)
    env.check(used < VOCAB * 8 * 4 * 2, "e4m3 rows and a bfloat16 accumulator take %d bytes, under float32's %d"
              % (used, VOCAB * 8 * 4 * 2))
    req = pb.CheckpointRequest(config_fingerprint=cl.fingerprint, process_index=0, step=5)
    a.stub().Checkpoint(req, timeout=60)
    a.stop()

    # float32 through the Restore RPC: the same values.
    cfg32 = env.write_config("f32", BATCH, tables("", ""), FEATURES)
    b = env.server(cfg32, extra=["--checkpoint-dir", root]).wait_ready()
    cb = Cluster(env, [b])
    req = pb.RestoreRequest(config_fingerprint=cb.fingerprint, process_index=0, step=5)
    got, details, _ = call_status(b.stub().Restore, req, timeout=60)
    env.check(got == "OK", "Restore of the e4m3 checkpoint into float32: %s %r" % (got, details))
    env.check(np.array_equal(rows(cb), trained), "float32 after Restore holds the e4m3 rows' values")
    b.stop()

    # --restore at start, into float32 and into e2m1.
    step_dir = os.path.join(root, "step-%012d" % 5)
    c = env.server(cfg32, extra=["--restore", step_dir]).wait_ready()
    env.check(np.array_equal(rows(Cluster(env, [c])), trained), "float32 after --restore holds the same values")
    c.stop()
    cfg4 = env.write_config("e2m1", BATCH, tables("e2m1", ""), FEATURES)
    d = env.server(cfg4, extra=["--restore", step_dir]).wait_ready()
    r4 = rows(Cluster(env, [d]))
    scale = np.abs(trained).max(axis=1, keepdims=True)
    env.check(not np.array_equal(r4, trained) and np.all(np.abs(r4 - trained) <= scale / 3 + 1e-7),
              "e2m1 after --restore: the rows rounded (largest error %g of the row's largest)"
              % np.max(np.abs(r4 - trained) / np.where(scale == 0, 1, scale)))


if __name__ == "__main__":
    main("test_storage_server", [test_restore_across_formats])
