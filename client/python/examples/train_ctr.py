#!/usr/bin/python3
"""train_ctr.py: scps-trainer's click model in PyTorch with the scps package.

Each feature's embedding comes from the scps cluster, a ReLU MLP over their
concatenation predicts the click, and sigmoid cross-entropy trains both:
the MLP with torch.optim.Adam here, the tables with their optimizers on the
servers (the activations' gradients pushed). The data are synthetic clicks
from scps-trainer's planted model (client/trainer/scps_ctr.c): the same
planted rows (uniform [-1, 1], drawn by the counter-based generator of
shard/scps_init.c from each table's seed) and output weights, the
workload's Zipf ids and valencies, labels drawn from the planted click
probability with its bias and logit scale. So the best achievable
log-loss is known, and the final line compares the trained model with it on
held-out batches, as scps-trainer's does. The id streams are drawn here
with numpy's generator, so they follow the same distributions as
scps-trainer's, not the same sequence.

    train_ctr.py --servers HOST:PORT,... [--workload deploy/workloads/ctr-demo.json]
                 [--steps 2000] [--sequential | --pipelined] [--json FILE]

--pipelined (the default) uses scps.torch.Pipeline: batch i is looked up
and batch i-2 pushed while the model computes batch i-1. --sequential uses
scps.torch.EmbeddingCollection: forward looks up, loss.backward() pushes.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
from torch import nn

import scps
import scps.torch as st

MASK = (1 << 64) - 1
PLANTED_BIAS = -1.0
CALIBRATION_SAMPLES = 1 << 17  # enough that the scale's sampling error is far below the losses compared


def fnv1a(name):
    h = 0xcbf29ce484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001b3) & MASK
    return h


def mix64(z):
    """splitmix64's finalizer on uint64 arrays (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
    return z ^ (z >> np.uint64(31))


def planted_rows(seed, vocab, dim):
    """scps_init.c's uniform rows (scale 1) of ids 0..vocab-1, float32."""
    with np.errstate(over="ignore"):
        z = mix64(np.full((vocab, 1), (seed + 0x9e3779b97f4a7c15) & MASK, np.uint64))
        z = mix64(z ^ (np.arange(vocab, dtype=np.uint64)[:, None] * np.uint64(0xd1b54a32d192ed03)))
        z = mix64(z ^ (np.arange(dim, dtype=np.uint64)[None, :] << np.uint64(32)))
    u = ((z >> np.uint64(11)).astype(np.float64) + 0.5) / 9007199254740992.0
    return (2.0 * u - 1.0).astype(np.float32)


def zipf_folded(rng, s, vocab, n):
    """n draws of Zipf(s) over 1, 2, ... folded into [0, vocab) as
    (X - 1) mod vocab, by Devroye's rejection sampler as
    shard/scps_workload_gen.c draws them: X past 2^50 (most of the tail at
    small s) stands for a uniform residue. numpy's own zipf rejects X past
    2^63 instead, which at s = 1.1 drops over 1% of the mass."""
    a = s - 1.0
    b = 2.0 ** a
    out = np.empty(0, np.int64)
    while out.size < n:
        m = int((n - out.size) * 1.6) + 64
        u = 1.0 - rng.random(m)
        v = rng.random(m)
        x = np.floor(u ** (-1.0 / a))
        huge = x >= 2.0 ** 50
        xs = np.where(huge, 2.0 ** 50, x)
        t = np.exp(a * np.log1p(1.0 / xs))
        accept = v * xs * (t - 1.0) / (b - 1.0) <= t / b
        ids = np.where(huge, rng.integers(0, vocab, m), (xs.astype(np.int64) - 1) % vocab)
        out = np.concatenate((out, ids[accept]))
    return out[:n]


class PlantedClicks:
    """scps_ctr.c's planted click model over a workload (JSON dict); stream
    picks the sample stream, all streams sharing one planted model."""

    def __init__(self, workload, stream, logit_std=1.5):
        self.batch = workload["batch_size"]
        self.exponent = workload["ids"].get("exponent") if workload["ids"]["distribution"] == "zipf" else None
        tables = {t["name"]: t for t in workload["tables"]}
        self.features = []
        ws = (workload["ids"].get("seed", 0) ^ 0x91a27ed0f1e1d) & MASK
        rows = {}
        for f in workload["features"]:
            t = tables[f["table"]]
            seed = t.get("initializer", {}).get("seed") or fnv1a(t["name"])
            if t["name"] not in rows:
                rows[t["name"]] = planted_rows((seed ^ 0x7a5e11ed) & MASK, t["vocabulary_size"], t["embedding_dim"])
            weights = []
            for _ in range(t["embedding_dim"]):  # scps_ctr.c's next64 stream, in feature order
                ws = (ws + 0x9e3779b97f4a7c15) & MASK
                z = ws
                z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & MASK
                z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & MASK
                z ^= z >> 31
                weights.append(2.0 * ((z >> 11) / 9007199254740992.0) - 1.0)
            v = f["valency"]
            lo, hi = (v, v) if isinstance(v, int) else v
            self.features.append((f["name"], t["vocabulary_size"], lo, hi, t["combiner"], rows[t["name"]],
                                  np.array(weights, np.float32)))
        self.scale = 1.0
        cal = np.random.default_rng(0xca11b7a7e)
        raw = np.concatenate([self._raw(self._ids(cal))[0] for _ in range(CALIBRATION_SAMPLES // self.batch)])
        self.scale = logit_std / raw.std()
        self.rng = np.random.default_rng(stream)

    def _ids(self, rng):
        out = {}
        for name, vocab, lo, hi, _, _, _ in self.features:
            lengths = rng.integers(lo, hi + 1, size=self.batch)
            offsets = np.zeros(self.batch + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
            n = int(offsets[-1])
            if self.exponent:
                ids = zipf_folded(rng, self.exponent, vocab, n)
            else:
                ids = rng.integers(0, vocab, size=n)
            out[name] = (ids.astype(np.int64), offsets)
        return out

    def _raw(self, ids):
        logits = np.zeros(self.batch)
        for name, _, _, _, combiner, rows, weights in self.features:
            x, offsets = ids[name]
            counts = np.diff(offsets)
            gain = {"sum": np.ones(self.batch), "mean": 1.0 / np.maximum(counts, 1),
                    "sqrtn": 1.0 / np.sqrt(np.maximum(counts, 1))}[combiner]
            pooled = np.add.reduceat(rows[x].astype(np.float64), offsets[:-1], axis=0) if x.size else 0
            pooled = np.where(counts[:, None] > 0, pooled, 0.0) * gain[:, None]
            logits += pooled @ weights
        return logits, ids

    def next(self):
        """(inputs {feature: scps.Ragged}, labels float32, planted click probabilities)."""
        raw, ids = self._raw(self._ids(self.rng))
        p = 1.0 / (1.0 + np.exp(-(PLANTED_BIAS + self.scale * raw)))
        labels = (self.rng.random(self.batch) < p).astype(np.float32)
        return {n: scps.Ragged(x, offsets=o) for n, (x, o) in ids.items()}, labels, p

    def __iter__(self):
        while True:
            inputs, labels, _ = self.next()
            yield inputs, torch.from_numpy(labels)


def mlp(n_in, hidden, seed):
    """scps_mlp.c's model: ReLU layers to one logit, He-uniform weights, zero biases."""
    torch.manual_seed(seed)
    layers, prev = [], n_in
    for h in hidden + [1]:
        lin = nn.Linear(prev, h)
        nn.init.kaiming_uniform_(lin.weight, nonlinearity="relu")
        nn.init.zeros_(lin.bias)
        layers += [lin, nn.ReLU()]
        prev = h
    return nn.Sequential(*layers[:-1])


def auc(scores, labels):
    """Area under the ROC curve (ties count half)."""
    order = np.argsort(scores, kind="mergesort")
    s, y = scores[order], labels[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):  # average ranks of ties
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2.0 + 1
        i = j + 1
    pos = y > 0.5
    n_pos, n_neg = pos.sum(), (~pos).sum()
    if n_pos == 0 or n_neg == 0:
        return 0.5
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", required=True, help="scps-server addresses in process-index order")
    ap.add_argument("--workload", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                                       "deploy", "workloads", "ctr-demo.json"))
    ap.add_argument("--steps", type=int, default=2000)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--pipelined", dest="pipelined", action="store_true", default=True)
    mode.add_argument("--sequential", dest="pipelined", action="store_false")
    ap.add_argument("--eval-batches", type=int, default=20)
    ap.add_argument("--hidden", default="48,24")
    ap.add_argument("--dense-lr", type=float, default=0.003)
    ap.add_argument("--logit-std", type=float, default=1.5)
    ap.add_argument("--wire-format", default="float32")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the dense model is small)")
    ap.add_argument("--json", help="also write the final figures as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    with open(args.workload) as f:
        workload = json.load(f)
    client = scps.Client(args.servers, wire_format=args.wire_format, expected_config=json.dumps(workload))
    features = client.features
    model = mlp(sum(f.width for f in features), [int(h) for h in args.hidden.split(",")], 7)
    opt = torch.optim.Adam(model.parameters(), lr=args.dense_lr)
    data = PlantedClicks(workload, stream=1, logit_std=args.logit_std)

    def step(acts, labels):
        x = torch.cat([acts[f.name] for f in features], dim=1)
        loss = nn.functional.binary_cross_entropy_with_logits(model(x).squeeze(1), labels)
        opt.zero_grad()
        loss.backward()  # fills acts' gradients; EmbeddingCollection pushes them here
        opt.step()
        return float(loss)

    t0 = time.perf_counter()
    losses = []
    if args.pipelined:
        pipe = st.Pipeline(client, data, steps=args.steps)
        for s in pipe:
            losses.append(step(s.acts, s.rest[0]))
        sc_busy = pipe.stats.sc_busy_seconds
    else:
        emb = st.EmbeddingCollection(client)
        it = iter(data)
        for _ in range(args.steps):
            inputs, labels = next(it)
            losses.append(step(emb(inputs), labels))
        sc_busy = float("nan")
    wall = time.perf_counter() - t0
    rate = args.steps * data.batch / wall

    held = PlantedClicks(workload, stream=0x4e1d07, logit_std=args.logit_std)
    scores, pscores, labels = [], [], []
    with torch.no_grad():
        for _ in range(args.eval_batches):
            inputs, y, p = held.next()
            acts = client.lookup(inputs, out={f.name: torch.empty(f.batch_size, f.width) for f in features})
            scores.append(model(torch.cat([acts[f.name] for f in features], dim=1)).squeeze(1).numpy())
            pscores.append(p)
            labels.append(y)
    scores, pscores, labels = np.concatenate(scores).astype(np.float64), np.concatenate(pscores), np.concatenate(labels)
    loss = float(np.mean(np.logaddexp(0, scores) - labels * scores))
    planted = float(-np.mean(np.where(labels > 0.5, np.log(pscores), np.log1p(-pscores))))
    res = {"mode": "pipelined" if args.pipelined else "sequential", "wire_format": args.wire_format,
           "steps": args.steps, "batch": data.batch, "wall_seconds": round(wall, 4), "samples_per_s": round(rate, 1),
           "sc_busy_seconds": None if math.isnan(sc_busy) else round(sc_busy, 4), "heldout_logloss": round(loss, 6), "planted_logloss": round(planted, 6),
           "heldout_auc": round(auc(scores, labels), 6), "planted_auc": round(auc(pscores, labels), 6),
           "train_logloss_last_100": round(float(np.mean(losses[-100:])), 6)}
    print("train_ctr.py: %s %d steps in %.2f s: %.0f samples/s; held-out log-loss %.4f vs planted %.4f (%+.2f%%), "
          "AUC %.4f vs planted %.4f" % (res["mode"], args.steps, wall, rate, loss, planted,
                                        100 * (loss / planted - 1), res["heldout_auc"], res["planted_auc"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f)
    client.close()
    return 0 if math.isfinite(loss) else 1


if __name__ == "__main__":
    sys.exit(main())
