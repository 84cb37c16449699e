"""scps.torch: scps's embeddings in PyTorch.

:class:`EmbeddingCollection` is an ``nn.Module`` whose forward looks a
batch up and whose backward pushes the activations' gradients, so that
``loss.backward()`` trains the remote tables; :class:`Pipeline` runs the
one-step-stale training pipeline of libscps's scps_train (batch i looked up
and batch i-2 pushed while the model computes batch i-1) over any iterable
of batches, a DataLoader included.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, Optional, Tuple

import numpy as np
import torch
from torch import nn

from .client import Client, PreparedBatch
from .errors import invalid

__all__ = ["EmbeddingCollection", "Pipeline", "Step"]


def _grads(client: Client, acts: Dict[str, torch.Tensor]) -> Dict[str, np.ndarray]:
    """Each activation's gradient as the float32 array a push takes (zeros
    for a feature the loss did not use)."""
    out = {}
    for f in client.features:
        g = acts[f.name].grad
        if g is None:
            out[f.name] = np.zeros((f.batch_size, f.width), dtype=np.float32)
        else:
            out[f.name] = g.detach().to(torch.float32).contiguous().numpy()
    return out


class _LookupPush(torch.autograd.Function):
    """Forward: the looked-up activations; backward: their gradients pushed."""

    @staticmethod
    def forward(ctx, anchor, module, prepared, step):
        acts = module.client.lookup(prepared, out=module._out_tensors())
        ctx.module, ctx.prepared, ctx.step = module, prepared, step
        return tuple(acts[f.name] for f in module.client.features)

    @staticmethod
    def backward(ctx, *grads):
        m = ctx.module
        arrays = {}
        for f, g in zip(m.client.features, grads):
            arrays[f.name] = (np.zeros((f.batch_size, f.width), dtype=np.float32) if g is None
                              else g.detach().to(torch.float32).contiguous().numpy())
        m._push(ctx.prepared, arrays, ctx.step)
        return None, None, None, None


class EmbeddingCollection(nn.Module):
    """The cluster's features as a module: ``forward(batch)`` returns
    {feature: float32 tensor [batch, width]} (batch as
    :meth:`scps.Client.lookup` takes it); ``loss.backward()`` pushes the
    gradients of those tensors at the module's step, which then advances.

    ``step``: the global step of the first batch (None:
    :meth:`scps.Client.next_step`, after the servers' last or this
    client's last push). ``async_push``: the push
    runs while the caller goes on (the next forward waits for it first, so
    every lookup still sees every earlier push). The tables' optimizers run
    on the servers: the module has no parameters of its own."""

    def __init__(self, client: Client, *, step: Optional[int] = None, async_push: bool = False,
                 learning_rate: Optional[float] = None):
        super().__init__()
        self.client = client
        self.step = client.next_step() if step is None else int(step)
        self.async_push = async_push
        self.learning_rate = learning_rate
        self._pending = None

    def _out_tensors(self) -> Dict[str, torch.Tensor]:
        return {f.name: torch.empty((f.batch_size, f.width), dtype=torch.float32) for f in self.client.features}

    def _push(self, prepared: PreparedBatch, grads: Dict[str, np.ndarray], step: int) -> None:
        self.wait()
        if self.async_push:
            self._pending = self.client.push_async(prepared, grads, step, learning_rate=self.learning_rate)
        else:
            self.client.push(prepared, grads, step, learning_rate=self.learning_rate)

    def wait(self) -> None:
        """Waits for a push still in flight (async_push), raising its error."""
        p, self._pending = self._pending, None
        if p is not None:
            p.result()

    def forward(self, batch: Any) -> Dict[str, torch.Tensor]:
        self.wait()
        prepared = batch if isinstance(batch, PreparedBatch) else self.client.prepare(batch)
        if not torch.is_grad_enabled():  # evaluation: nothing to push, no step taken
            return self.client.lookup(prepared, out=self._out_tensors())
        step = self.step
        self.step += 1
        anchor = torch.empty(0, requires_grad=True)
        outs = _LookupPush.apply(anchor, self, prepared, step)
        return {f.name: t for f, t in zip(self.client.features, outs)}


@dataclass
class Step:
    """One batch of a :class:`Pipeline`: its global ``step``, its activations
    (leaf tensors that require grad: the loss's backward fills their
    ``.grad``, which the pipeline pushes) and ``rest``, what the iterable's
    item held besides the sparse batch (labels, dense features)."""
    step: int
    acts: Dict[str, torch.Tensor]
    rest: Tuple[Any, ...]
    prepared: PreparedBatch = field(repr=False, default=None)


@dataclass
class PipelineStats:
    steps: int = 0
    wall_seconds: float = 0.0
    sc_busy_seconds: float = 0.0  # inside prepare, lookup and push (the SparseCore lane)


class Pipeline:
    """Trains over ``batches``: each item a sparse batch (what
    :meth:`scps.Client.lookup` takes) or a tuple (sparse batch, *rest).
    Iterating yields a :class:`Step` per batch; compute the loss from its
    acts, call ``loss.backward()`` (and the dense optimizer), and ask for the
    next: the pipeline pushes the acts' gradients.

    ``pipelined=True``: the SparseCore API's one-step-stale schedule: while
    the caller computes batch i-1, a lane of its own pushes batch i-2 and
    then prepares and looks up batch i, which thus sees every push but
    batch i-1's. ``pipelined=False``: look up, compute, push each batch in
    turn. ``first_step``: global step of the first batch (None:
    :meth:`scps.Client.next_step`); ``steps``: stop after that many
    batches. Leaving the loop early leaves the last batch computed
    unpushed. ``stats``: steps pushed, wall time, and the time the
    SparseCore lane spent in prepare, lookup and push."""

    def __init__(self, client: Client, batches: Iterable[Any], *, pipelined: bool = True,
                 first_step: Optional[int] = None, steps: Optional[int] = None,
                 learning_rate: Optional[float] = None, deadline_ms: Optional[int] = None):
        if steps is not None and steps < 0:
            raise invalid("steps %r: expected >= 0" % steps)
        self.client = client
        self.batches = batches
        self.pipelined = pipelined
        self.first_step = client.next_step() if first_step is None else int(first_step)
        self.steps = steps
        self.learning_rate = learning_rate
        self.deadline_ms = deadline_ms
        self.stats = PipelineStats()

    def _fetch(self, it: Iterator[Any], k: int) -> Optional[Step]:
        if self.steps is not None and k >= self.steps:
            return None
        try:
            item = next(it)
        except StopIteration:
            return None
        sparse, rest = (item[0], tuple(item[1:])) if isinstance(item, (tuple, list)) else (item, ())
        t0 = time.perf_counter()
        prepared = self.client.prepare(sparse)
        out = {f.name: torch.empty((f.batch_size, f.width), dtype=torch.float32) for f in self.client.features}
        self.client.lookup(prepared, out=out, deadline_ms=self.deadline_ms)
        self.stats.sc_busy_seconds += time.perf_counter() - t0
        for t in out.values():
            t.requires_grad_(True)
        return Step(self.first_step + k, out, rest, prepared)

    def _push(self, s: Optional[Step]) -> None:
        if s is None:
            return
        t0 = time.perf_counter()
        self.client.push(s.prepared, _grads(self.client, s.acts), s.step, learning_rate=self.learning_rate,
                         deadline_ms=self.deadline_ms)
        self.stats.sc_busy_seconds += time.perf_counter() - t0
        self.stats.steps += 1

    def _sc(self, it: Iterator[Any], push: Optional[Step], k: int) -> Optional[Step]:
        """The SparseCore lane's work of one iteration: push, then look up."""
        self._push(push)
        return self._fetch(it, k)

    def __iter__(self) -> Iterator[Step]:
        t0 = time.perf_counter()
        it = iter(self.batches)
        if not self.pipelined:
            k = 0
            while True:
                s = self._fetch(it, k)
                if s is None:
                    break
                yield s
                self._push(s)
                k += 1
            self.stats.wall_seconds += time.perf_counter() - t0
            return
        # SparseCore lane: one thread, so its pushes and lookups keep their order.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="scps-sc") as lane:
            pending = lane.submit(self._sc, it, None, 0)  # look up batch 0
            done_with: Optional[Step] = None  # the batch computed last, its push still to do
            k = 0
            try:
                while True:
                    cur = pending.result()  # batch k looked up (and batch k-2 pushed)
                    if cur is None:
                        break
                    # While the caller computes batch k: push k-1, look up k+1.
                    pending = lane.submit(self._sc, it, done_with, k + 1)
                    done_with = None
                    yield cur
                    done_with = cur
                    k += 1
                self._push(done_with)
            finally:
                if not pending.done():
                    pending.result()  # never leave a call of the lane behind
        self.stats.wall_seconds += time.perf_counter() - t0
