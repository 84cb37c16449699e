"""A stock gRPC client in another language: Debian's python3-grpcio with stubs
generated from proto/scps.proto talks to real scps-server processes.
Expected values are computed here with numpy from rows read back through the
service, never from the server's code."""
import json
import os

import numpy as np

from scps_srvtest import Cluster, gains_for, main

BATCH = 16

TABLES = [
    {"name": "emb", "vocabulary_size": 1000, "embedding_dim": 12, "combiner": "sqrtn",
     "optimizer": {"type": "sgd", "learning_rate": 0.5},
     "initializer": {"type": "uniform", "scale": 0.5}},
    {"name": "cat", "vocabulary_size": 300, "embedding_dim": 12, "combiner": "sqrtn",
     "optimizer": {"type": "sgd", "learning_rate": 0.5},
     "initializer": {"type": "uniform", "scale": 0.5}},
    {"name": "wide", "vocabulary_size": 200, "embedding_dim": 20, "combiner": "sum",
     "optimizer": {"type": "sgd", "learning_rate": 0.25},
     "initializer": {"type": "normal", "stddev": 0.3}},
]
FEATURES = [
    {"name": "f_emb", "table": "emb", "valency": [0, 5], "weighted": True},
    {"name": "f_emb2", "table": "emb", "valency": 1},
    {"name": "f_cat", "table": "cat", "valency": 1},
    {"name": "f_wide", "table": "wide", "valency": 3},
]


def roundup(x, m):
    return (x + m - 1) // m * m


def expected_stacks(P, S):
    """The stacked layout sparsecore-semantics.md section 5 gives this
    declaration on P processes of S SparseCores: emb and cat share padded
    dim 16, optimizer and combiner, so they stack, in name order (cat
    rotation 0, emb rotation S % N); wide (dim 24) stands alone."""
    N = P * S
    pe, pc, pw = roundup(1000, 8 * N), roundup(300, 8 * N), roundup(200, 8 * N)
    return {
        "cat_emb": {"dim": 16, "rows_per_sc": (pe + pc) // N, "total_sample_count": 3 * BATCH,
                    "tables": ["cat", "emb"], "row_offsets": [0, pc // N], "rotations": [0, S % N],
                    "features": {"f_emb", "f_emb2", "f_cat"}},
        "wide": {"dim": 24, "rows_per_sc": pw // N, "total_sample_count": BATCH,
                 "tables": ["wide"], "row_offsets": [0], "rotations": [0], "features": {"f_wide"}},
    }


def check_config(env, cl, P, S):
    pb = env.pb
    for p, c in enumerate(cl.configs):
        env.check(c.process_index == p, "GetConfig process_index %d == %d" % (c.process_index, p))
        env.check(len(c.config_fingerprint) == 32, "fingerprint is 32 bytes, got %d" % len(c.config_fingerprint))
        env.check(c.config_fingerprint == cl.fingerprint, "process %d has the cluster's fingerprint" % p)
        topo = c.cluster.topology
        env.check((topo.num_processes, topo.sc_per_process) == (P, S),
                  "topology %d x %d == %d x %d" % (topo.num_processes, topo.sc_per_process, P, S))
        env.check(topo.sc_memory_bytes == 4 << 30, "default --sc-memory 4G, got %d" % topo.sc_memory_bytes)
        env.check(c.max_message_bytes == 256 << 20, "default max_message_bytes, got %d" % c.max_message_bytes)
        env.check(c.version != "", "version set")
        got = {t.name: t for t in c.cluster.tables}
        env.check(sorted(got) == ["cat", "emb", "wide"], "tables %s" % sorted(got))
        for t in TABLES:
            g = got.get(t["name"])
            if g is None:
                continue
            env.check((g.vocabulary_size, g.embedding_dim) == (t["vocabulary_size"], t["embedding_dim"]),
                      "table %s shape" % t["name"])
            env.check(g.optimizer.type == pb.OPTIMIZER_TYPE_SGD, "table %s optimizer SGD" % t["name"])
            env.check(g.optimizer.WhichOneof("learning_rate_present") == "learning_rate"
                      and g.optimizer.learning_rate == t["optimizer"]["learning_rate"],
                      "table %s learning_rate %r" % (t["name"], g.optimizer.learning_rate))
            comb = {"sum": pb.COMBINER_SUM, "sqrtn": pb.COMBINER_SQRTN}[t["combiner"]]
            env.check(g.combiner == comb, "table %s combiner" % t["name"])
        feats = {f.name: f for f in c.cluster.features}
        for f in FEATURES:
            g = feats.get(f["name"])
            env.check(g is not None and g.table == f["table"] and g.batch_size == BATCH,
                      "feature %s declared as given" % f["name"])
        exp = expected_stacks(P, S)
        names = [s.name for s in c.stacks]
        env.check(sorted(names) == sorted(exp), "stacks %s, expected %s" % (names, sorted(exp)))
        for s in c.stacks:
            e = exp.get(s.name)
            if e is None:
                continue
            for key in ("dim", "rows_per_sc", "total_sample_count"):
                env.check(getattr(s, key) == e[key], "stack %s %s %d, expected %d"
                          % (s.name, key, getattr(s, key), e[key]))
            env.check(list(s.tables) == e["tables"], "stack %s tables %s" % (s.name, list(s.tables)))
            env.check(list(s.row_offsets) == e["row_offsets"],
                      "stack %s row_offsets %s, expected %s" % (s.name, list(s.row_offsets), e["row_offsets"]))
            env.check(list(s.rotations) == e["rotations"],
                      "stack %s rotations %s, expected %s" % (s.name, list(s.rotations), e["rotations"]))
            env.check(set(s.features) == e["features"], "stack %s features %s" % (s.name, list(s.features)))
            env.check(sorted(s.feature_sample_offsets) == list(range(0, e["total_sample_count"], BATCH)),
                      "stack %s feature_sample_offsets %s" % (s.name, list(s.feature_sample_offsets)))
            # scps_layout sums the stacked tables' limits (256 each by default).
            lim = 256 * len(e["tables"])
            env.check(s.max_ids_per_partition == lim and s.max_unique_ids_per_partition == lim,
                      "stack %s limits %d, %d: expected %d" % (s.name, s.max_ids_per_partition,
                                                               s.max_unique_ids_per_partition, lim))


def pad(samples):
    return samples + [[] for _ in range(BATCH - len(samples))]


def weighted_batch():
    return {
        "f_emb": pad([[(5, 0.5), (17, 1.0), (5, 0.25), (999, 2.0)], [], [(0, 1.0)],
                      [(1, 0.1), (2, 0.2), (3, 0.3), (500, 0.4), (501, 0.5)]]),
        "f_emb2": pad([[(17, 1.0)], [], [], [], [], [(998, 0.7)]]),
        "f_cat": pad([[(299, 1.0)], [(7, 0.3)]]),
        "f_wide": pad([[(0, 1.0), (1, 1.0), (1, 1.0)], [], [], [], [(10, 0.5), (199, 1.5), (2, 1.0)]]),
    }


def expected_activation(combiner, rows, samples, dim):
    """sum_i gain_i * row[x_i] per sample, in float64."""
    out = np.zeros((len(samples), dim))
    for r, s in enumerate(samples):
        if s:
            g = gains_for(combiner, [w for _, w in s])
            for (i, _), gain in zip(s, g):
                out[r] += gain * rows[i]
    return out


def read_table(cl, table, ids):
    return dict(zip(ids, cl.read_rows(table, ids)))


def dyadic(rng, shape):
    """Gradients that are multiples of 1/8 in [-2, 2]: lr * g and small sums
    of them are exact in float32, so an SGD step has one rounding only."""
    return (rng.integers(-16, 17, size=shape) / 8.0).astype(np.float32)


IDS = {"emb": [0, 1, 2, 3, 5, 17, 500, 501, 998, 999], "cat": [0, 7, 299],
       "wide": list(range(12)) + [199]}


def test_single_server(env):
    cfg = env.write_config("client", BATCH, TABLES, FEATURES)
    srv = env.server(cfg, sc_per_process=2).wait_ready()
    cl = Cluster(env, [srv])
    check_config(env, cl, 1, 2)
    pb = env.pb
    stub = cl.stubs[0]
    lookups = 0

    rows = {t: read_table(cl, t, ids) for t, ids in IDS.items()}
    lookups += 3
    for t, r in rows.items():
        m = np.array(list(r.values()))
        env.check(np.unique(m, axis=0).shape[0] == m.shape[0], "table %s: the rows read differ" % t)
        env.check(np.all(np.isfinite(m)) and m.std() > 0.01, "table %s: initialized rows" % t)
    for t in ("emb", "cat"):
        m = np.array(list(rows[t].values()))
        env.check(np.abs(m).max() <= 0.5, "table %s: uniform(-0.5, 0.5) rows, max %g" % (t, np.abs(m).max()))

    # A weighted multi-id lookup against the numpy combination of those rows.
    batch = weighted_batch()
    got = cl.lookup(batch)
    lookups += 1
    for fname, samples in batch.items():
        table = cl.features[fname]["table"]
        dim = cl.tables[table]["spec"].embedding_dim
        exp = expected_activation(cl.tables[table]["combiner"], rows[table], samples, dim)
        env.check(got[fname].shape == exp.shape, "%s: activation shape %s" % (fname, got[fname].shape))
        env.check(np.allclose(got[fname], exp, rtol=1e-5, atol=1e-6),
                  "%s: weighted lookup equals the numpy combination (max error %g)"
                  % (fname, np.abs(got[fname] - exp).max()))
        empty = [r for r, s in enumerate(samples) if not s]
        env.check(np.all(got[fname][empty] == 0), "%s: samples without ids are 0" % fname)
    # The same lookup answered with distinct rows, pooled here.
    rows_got = cl.lookup(batch, distinct_rows=True)
    lookups += 1
    for fname in batch:
        env.check(np.allclose(rows_got[fname], got[fname], rtol=1e-6, atol=1e-7),
                  "%s: distinct rows pooled equal the pooled answer (max difference %g)"
                  % (fname, np.abs(rows_got[fname] - got[fname]).max()))

    # SGD on 'wide' (lr 0.25): every touched row moves by exactly -lr * g.
    rng = np.random.default_rng(7)
    g = dyadic(rng, (BATCH, 20))
    before = read_table(cl, "wide", IDS["wide"])
    lookups += 1
    ab = {"f_wide": pad([[(3, 1.0), (4, 1.0), (5, 1.0)], [(5, 1.0), (6, 1.0), (7, 1.0)]])}
    upd = cl.apply(ab, {"f_wide": g})
    env.check(upd == [5], "rows_updated %s == [5]" % upd)
    after = read_table(cl, "wide", IDS["wide"])
    lookups += 1
    lr = np.float32(0.25)
    exp = {3: g[0], 4: g[0], 5: g[0] + g[1], 6: g[1], 7: g[1]}
    for i in IDS["wide"]:
        want = np.float32(before[i]) - lr * exp[i] if i in exp else before[i]
        env.check(np.array_equal(np.float32(after[i]), want),
                  "wide row %d after SGD: %s, expected %s" % (i, after[i][:3], want[:3]))

    # The request's learning_rate overrides the table's; 0 is a rate, not "unset".
    for rate in (0.125, 0.0):
        before = read_table(cl, "wide", [8, 9])
        cl.apply({"f_wide": pad([[(8, 1.0)]])}, {"f_wide": g}, step=1, learning_rate=rate)
        after = read_table(cl, "wide", [8, 9])
        lookups += 2
        env.check(np.array_equal(np.float32(after[8]), np.float32(before[8]) - np.float32(rate) * g[0]),
                  "learning_rate %g: row 8 moved by -lr * g" % rate)
        env.check(np.array_equal(after[9], before[9]), "learning_rate %g: row 9 untouched" % rate)

    # Weighted SGD on the stacked emb/cat tables (lr 0.5, sqrtn gains).
    before = {t: read_table(cl, t, IDS[t]) for t in ("emb", "cat")}
    lookups += 2
    gw = {"f_emb": rng.standard_normal((BATCH, 12)).astype(np.float32),
          "f_cat": rng.standard_normal((BATCH, 12)).astype(np.float32)}
    wb = {"f_emb": weighted_batch()["f_emb"], "f_cat": pad([[], [(7, 0.3)]])}
    upd = cl.apply(wb, gw, step=2)
    env.check(upd == [10], "rows_updated %s == [10] (9 distinct emb ids, 1 cat id)" % upd)
    after = {t: read_table(cl, t, IDS[t]) for t in ("emb", "cat")}
    lookups += 2
    for fname, table in (("f_emb", "emb"), ("f_cat", "cat")):
        grow = {}
        for r, s in enumerate(wb[fname]):
            if s:
                for (i, _), gain in zip(s, gains_for("sqrtn", [w for _, w in s])):
                    grow[i] = grow.get(i, 0.0) + gain * gw[fname][r].astype(np.float64)
        for i in IDS[table]:
            want = before[table][i] - 0.5 * grow[i] if i in grow else before[table][i]
            env.check(np.allclose(after[table][i], want, rtol=1e-5, atol=1e-6),
                      "%s row %d after weighted SGD (max error %g)"
                      % (table, i, np.abs(after[table][i] - want).max()))

    # Stats: memory, per-stack counters, per-method counters, stages.
    st = stub.Stats(pb.StatsRequest(), timeout=30)
    env.check(st.process_index == 0 and st.uptime_seconds > 0, "Stats process_index and uptime")
    env.check([s.sparse_core for s in st.sparse_cores] == [0, 1], "Stats sparse_cores [0, 1]")
    exp = expected_stacks(1, 2)
    used = sum(roundup(e["rows_per_sc"] * e["dim"] * 4, 64) for e in exp.values())
    for s in st.sparse_cores:
        env.check(s.memory_used_bytes == used and s.memory_capacity_bytes == 4 << 30,
                  "SparseCore %d memory %d of %d, expected %d of 4 GiB (SGD: rows only)"
                  % (s.sparse_core, s.memory_used_bytes, s.memory_capacity_bytes, used))
    stacks = {s.stack: s for s in st.stacks}
    env.check(sorted(stacks) == sorted(exp), "Stats stacks %s" % sorted(stacks))
    for name, s in stacks.items():
        env.check(s.ids_looked_up == cl.sent[0][name]["lookup_entries"],
                  "stack %s ids_looked_up %d, sent %d" % (name, s.ids_looked_up, cl.sent[0][name]["lookup_entries"]))
        env.check(s.rows_updated == cl.sent[0][name]["rows"],
                  "stack %s rows_updated %d, expected %d" % (name, s.rows_updated, cl.sent[0][name]["rows"]))
        env.check(len(s.max_ids_per_partition) == 2 and len(s.max_unique_ids_per_partition) == 2,
                  "stack %s FDO maxima per local SparseCore" % name)
        lo, hi = cl.sent[0][name]["fdo_lookup"], cl.sent[0][name]["fdo_all"]
        for k in range(2):
            for field, j in (("max_ids_per_partition", 0), ("max_unique_ids_per_partition", 1)):
                v = getattr(s, field)[k]
                env.check(lo[k][j] <= v <= hi[k][j], "stack %s %s[%d] = %d, expected in [%d, %d]"
                          % (name, field, k, v, lo[k][j], hi[k][j]))
        lim = 256 * len(exp[name]["tables"])
        env.check((s.max_ids_limit, s.max_unique_ids_limit) == (lim, lim), "stack %s limits in Stats" % name)
    methods = {m.method: m for m in st.methods}
    env.check(sorted(methods) == sorted(["GetConfig", "Lookup", "ApplyGradients", "Stats", "Health", "Checkpoint",
                                             "ReadRows", "ListCheckpoints", "Restore", "Check", "TopK"]),
              "Stats methods %s" % sorted(methods))
    env.check(st.checkpoints.saves == 0 and st.checkpoints.last_step == -1 and not st.checkpoints.saving,
              "Stats checkpoints of a server that never saved: %s" % st.checkpoints)
    want_calls = {"GetConfig": 1, "Lookup": lookups, "ApplyGradients": 4, "Health": 0}
    for name, n in want_calls.items():
        m = methods.get(name)
        env.check(m is not None and m.calls == n and m.errors == 0,
                  "%s: %s calls, expected %d without errors" % (name, m and m.calls, n))
    for name in ("Lookup", "ApplyGradients"):
        m = methods[name]
        env.check(m.bytes_received > 0 and m.bytes_sent > 0 and m.seconds > 0, "%s byte and time counters" % name)
    stages = {s.stage: s for s in st.stages}
    env.check({"sc0", "sc1", "tc", "inline"} <= set(stages), "Stats stages %s" % sorted(stages))
    if {"sc0", "sc1", "tc", "inline"} <= set(stages):
        # These Lookups are small: each ran either inline or as a job of
        # every worker; the 4 pushes are jobs of every worker.
        for name in ("sc0", "sc1", "tc"):
            env.check(stages[name].tasks >= 4, "stage %s ran the pushes" % name)
        env.check(stages["inline"].tasks + stages["sc0"].tasks - 4 == lookups,
                  "inline %d + gang %d lookups, expected %d"
                  % (stages["inline"].tasks, stages["sc0"].tasks - 4, lookups))

    h = stub.Health(pb.HealthRequest(), timeout=30)
    env.check(h.status == pb.HealthResponse.STATUS_SERVING, "Health SERVING, got %d" % h.status)
    env.check(h.process_index == 0 and h.uptime_seconds > 0, "Health process_index and uptime")


def test_two_processes(env):
    """2 processes x 2 SparseCores: each id lives on SparseCore
    (i % 4 + rotation) % 4, i.e. on process that // 2. Initial rows depend
    only on (table, id), so a 1 x 1 server is the reference."""
    cfg = env.write_config("client", BATCH, TABLES, FEATURES)
    ref_srv = env.server(cfg, num_processes=1, sc_per_process=1)
    c0 = env.server(cfg, index=0, num_processes=2, sc_per_process=2)
    c1 = env.server(cfg, index=1, num_processes=2, sc_per_process=2)
    for s in (ref_srv, c0, c1):
        s.wait_ready()
    ref = Cluster(env, [ref_srv])
    cl = Cluster(env, [c0, c1])
    check_config(env, cl, 2, 2)
    env.check(ref.fingerprint != cl.fingerprint, "another topology has another fingerprint")

    ids = {"emb": list(range(40)) + [996, 997, 998, 999], "cat": list(range(12)) + [299],
           "wide": list(range(8)) + [199]}
    for t, tids in ids.items():
        want = ref.read_rows(t, tids)
        got = cl.read_rows(t, tids)
        env.check(np.array_equal(got, want), "table %s: rows on 2 x 2 equal the 1 x 1 rows" % t)
        owners = {(cl.place(t, i)[0]) // 2 for i in tids}
        env.check(owners == {0, 1}, "table %s: ids spread over both processes" % t)
    # The rotation matters: placing emb ids as if its rotation were 0 reads
    # other rows (they are in range, so the server cannot tell).
    env.check(cl.tables["emb"]["rotation"] == 2, "emb rotation 2 on 2 x 2")
    wrong = cl.read_rows("emb", ids["emb"], rotation_of={"emb": 0})
    env.check(not np.array_equal(wrong, ref.read_rows("emb", ids["emb"])),
              "emb rows read with rotation 0 instead of 2 differ")
    for p, stub in enumerate(cl.stubs):
        st = stub.Stats(env.pb.StatsRequest(), timeout=30)
        env.check([s.sparse_core for s in st.sparse_cores] == [2 * p, 2 * p + 1],
                  "process %d owns SparseCores %d, %d" % (p, 2 * p, 2 * p + 1))
        looked = {s.stack: s.ids_looked_up for s in st.stacks}
        env.check(all(v > 0 for v in looked.values()), "process %d looked up ids of every stack: %s" % (p, looked))

    # SGD on ids of both processes: exact -lr * g, the reference untouched.
    rng = np.random.default_rng(11)
    g = dyadic(rng, (BATCH, 12))
    tids = list(range(8))
    before = cl.read_rows("emb", tids)
    upd = cl.apply({"f_emb2": pad([[(i, 1.0)] for i in tids])}, {"f_emb2": g})
    per_proc = [sum(1 for i in tids if cl.place("emb", i)[0] // 2 == p) for p in range(2)]
    env.check(upd == per_proc, "rows_updated per process %s == %s" % (upd, per_proc))
    after = cl.read_rows("emb", tids)
    want = before.astype(np.float32) - np.float32(0.5) * g[:8]
    env.check(np.array_equal(after.astype(np.float32), want), "emb rows moved by exactly -0.5 * g on both processes")
    env.check(np.array_equal(ref.read_rows("emb", tids), before), "the 1 x 1 reference is untouched")


def test_shared_workload(env):
    """A workload file from shared/ as it is: its declaration comes back from
    GetConfig, and a ragged weighted batch combines as the numpy reference."""
    path = os.path.join(env.args.shared, "workloads", "shared-tables.json")
    with open(path) as f:
        w = json.load(f)
    # Its tables keep the default per-partition limits, which a batch of
    # its size passes, and the server enforces them: raised in force here.
    srv = env.server(path, sc_per_process=2, extra=["--partition-limits", "65536,65536"]).wait_ready()
    cl = Cluster(env, [srv])
    c = cl.configs[0]
    env.check([t.name for t in c.cluster.tables] == [t["name"] for t in w["tables"]], "tables of %s" % path)
    env.check([(f.name, f.table, f.batch_size) for f in c.cluster.features]
              == [(f["name"], f["table"], w["batch_size"]) for f in w["features"]], "features of %s" % path)
    env.check(len(c.config_fingerprint) == 32, "fingerprint is 32 bytes")
    for t in w["tables"]:
        nfeat = sum(f["table"] == t["name"] for f in w["features"])
        st = cl.stacks[cl.tables[t["name"]]["stack"]]
        env.check(st.total_sample_count == nfeat * w["batch_size"] and st.dim == roundup(t["embedding_dim"], 8),
                  "stack of %s: %d samples, dim %d" % (t["name"], st.total_sample_count, st.dim))
    rng = np.random.default_rng(2)
    ids = [int(i) for i in rng.integers(0, 50000, size=40)]
    rows = dict(zip(ids, cl.read_rows("items", ids)))
    env.check(0.005 < np.std(list(rows.values())) < 0.05, "items rows drawn from N(0, 0.02^2)")
    samples = [[(ids[(3 * r + k) % 40], float(rng.uniform(0.1, 1.0))) for k in range(r % 5)]
               for r in range(w["batch_size"])]
    got = cl.lookup({"clicked_items": samples})["clicked_items"]
    exp = expected_activation("mean", rows, samples, 32)
    env.check(np.allclose(got, exp, rtol=1e-5, atol=1e-7),
              "clicked_items: mean of weighted rows (max error %g)" % np.abs(got - exp).max())


if __name__ == "__main__":
    main("test_python_client", [test_single_server, test_two_processes, test_shared_workload])
