"""scps.Client: a trainer's connection to an scps cluster, over libscps."""
from __future__ import annotations

import collections
import concurrent.futures
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _scps, admin
from .errors import from_status, invalid
from .inputs import batch_inputs, float_arrays, is_torch

_scps.set_error_factory(from_status)

Arrays = Dict[str, Any]
_MAX_SLOTS = 2


@dataclass(frozen=True)
class Feature:
    """A feature as the servers declare it: the table it looks up, the
    floats per sample of its activations (the table's embedding dim), the
    samples of a batch, and the vocabulary its ids must be below."""
    name: str
    table: str
    width: int
    batch_size: int
    vocabulary: int


@dataclass(frozen=True)
class Table:
    """A table: its embedding dim, vocabulary and the features that look it up."""
    name: str
    width: int
    vocabulary: int
    features: Tuple[str, ...]


@dataclass(frozen=True)
class Config:
    """What the cluster serves, as the client read it at connect: features
    in the servers' order (the order of every batch), tables, the batch
    size, the servers in process order and which have a checkpoint
    directory, and the last step they hold (-1: none)."""
    features: Tuple[Feature, ...]
    tables: Dict[str, Table]
    batch_size: int
    servers: Tuple[str, ...]
    checkpoint_dirs: Tuple[bool, ...]
    step: int
    wire_format: str

    def feature(self, name: str) -> Feature:
        for f in self.features:
            if f.name == name:
                return f
        raise invalid("feature %r: the servers declare %s" % (name, ", ".join(f.name for f in self.features)))


class PreparedBatch:
    """A batch preprocessed for the servers (scps_client_prepare): partitions
    per server, ready to be looked up and, with the gradients of its
    activations, pushed. Holds libscps memory until dropped; one lookup or
    push on it at a time."""

    def __init__(self, client: "Client", raw: Any, torch_out: bool):
        self._client = client
        self._raw = raw  # the scps._scps.Batch
        self.torch = torch_out


class Future:
    """An asynchronous lookup or push (``concurrent.futures.Future``-like):
    ``result(timeout)`` waits with the GIL released and returns the
    activations (None for a push) or raises the call's :class:`scps.Error`."""

    def __init__(self, op: Any, release=None):
        self._op = op
        self._release = release
        self._lock = threading.Lock()

    def done(self) -> bool:
        return self._op.done()

    def _wait(self, timeout: Optional[float]) -> None:
        if not self._op.wait(timeout):
            raise concurrent.futures.TimeoutError("scps operation not done after %s s" % timeout)
        with self._lock:  # a one-shot batch goes back to its pool once
            release, self._release = self._release, None
        if release:
            release()

    def result(self, timeout: Optional[float] = None) -> Any:
        self._wait(timeout)
        return self._op.result()

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        """The call's error (None if it succeeded), waiting up to timeout."""
        self._wait(timeout)
        try:
            self._op.result()
        except Exception as e:
            return e
        return None


class Client:
    """A connection to every process of an scps cluster (libscps's
    scps_client). ``servers``: "host:port" of every process in process-index
    order (a list, or one comma-separated string). The servers' declaration
    is read and cross-checked at connect (:attr:`config`).

    Options (scps_client_options): ``wire_format`` "float32" (default),
    "bfloat16" ("bf16"), an eXmY format ("e4m3", "e5m2", "e3m0s" with a
    scale per row, "e3m0b-2" with a bias), or "ACTIVATIONS/GRADIENTS" to
    give each its own ("e4m3/e3m0s"): servers round their activations to
    nearest, the client rounds gradients stochastically, both decoded to
    float32;
    ``deadline_ms`` of every call unless a call gives its own;
    ``connect_timeout_ms``; ``policy`` "error" or "drop" (ids over a
    partition's limits); ``answer`` "auto", "pooled" or "rows";
    ``gradients`` "auto", "sample" or "row"; ``prep_threads``;
    ``expected_config`` (a workload file's JSON text the servers must
    serve); ``ignore_checkpoint_due``, ``checkpoint_timeout_ms``;
    ``own_connections``, ``cq_threads``; ``shared_memory`` "auto" (answers
    and gradients through memory shared with servers on this host that
    offer it) or "off"; TLS and a token: ``tls``,
    ``tls_ca_file``, ``tls_cert_file``, ``tls_key_file``,
    ``tls_server_name``, ``token``. ``output``: "numpy" or "torch" for
    results; None: torch tensors when the batch's ids are tensors.

    A batch maps each feature's name to its ids: :class:`scps.Ragged`
    (values with offsets or lengths, optional weights), :class:`scps.Dense`
    or a [batch, valency] array, or is a :class:`scps.KeyedJagged` (or a
    torchrec KeyedJaggedTensor). Activations come back per feature as
    float32 [batch, width] arrays written by libscps in place. Every call
    releases the GIL while it waits; a Client may be used from several
    threads at once. Errors raise :class:`scps.Error` subclasses."""

    def __init__(self, servers: Union[str, Sequence[str]], *, wire_format: str = "float32",
                 deadline_ms: int = 30000, connect_timeout_ms: int = 10000, policy: str = "error",
                 answer: str = "auto", gradients: str = "auto", prep_threads: int = 0,
                 expected_config: Optional[str] = None, ignore_checkpoint_due: bool = False,
                 checkpoint_timeout_ms: int = 0, own_connections: bool = False, cq_threads: int = 0,
                 tls: bool = False, tls_ca_file: Optional[str] = None, tls_cert_file: Optional[str] = None,
                 tls_key_file: Optional[str] = None, tls_server_name: Optional[str] = None,
                 token: Optional[str] = None, shared_memory: str = "auto", output: Optional[str] = None):
        if isinstance(servers, str):
            servers = [s for s in servers.split(",")]
        servers = tuple(servers)
        if not servers or not all(isinstance(s, str) and s for s in servers):
            raise invalid("servers %r: expected 'host:port' strings, one per process" % (servers,))
        if deadline_ms <= 0:
            raise invalid("deadline_ms %r: expected > 0" % deadline_ms)
        if output not in (None, "numpy", "torch"):
            raise invalid("output %r: expected 'numpy', 'torch' or None" % output)
        self.deadline_ms = int(deadline_ms)
        self._output = output
        self._security = dict(tls=tls, tls_ca_file=tls_ca_file, tls_cert_file=tls_cert_file,
                              tls_key_file=tls_key_file, tls_server_name=tls_server_name, token=token)
        self._c = _scps.Client(servers, expected_config, policy, prep_threads, connect_timeout_ms, wire_format,
                               answer, gradients, ignore_checkpoint_due, checkpoint_timeout_ms, own_connections,
                               cq_threads, shared_memory=shared_memory, **self._security)
        self._servers = servers
        self._wire_format = wire_format
        self._features = tuple(Feature(*f) for f in self._c.features())
        self._free: collections.deque = collections.deque()  # batches for one-shot lookups
        self._pushed = -1  # the highest step pushed through this client

    # ---- what the cluster serves ----

    @property
    def config(self) -> Config:
        """The servers' tables, features, widths and topology (:class:`Config`)."""
        info = self._c.info()
        tables: Dict[str, Table] = {}
        for f in self._features:
            t = tables.get(f.table)
            tables[f.table] = Table(f.table, f.width, f.vocabulary, (t.features if t else ()) + (f.name,))
        return Config(self._features, tables, info["batch_size"], self._servers, info["checkpoint_dirs"],
                      info["step"], self._wire_format)

    @property
    def features(self) -> Tuple[Feature, ...]:
        """The features in the servers' order."""
        return self._features

    def step(self) -> int:
        """The last step the servers held at connect (-1: none): resume at step() + 1."""
        return self._c.info()["step"]

    def next_step(self) -> int:
        """The step after the last one this client knows of: the servers'
        at connect, or the highest it has pushed since. What
        scps.torch's module and pipeline start at by default."""
        return max(self.step(), self._pushed) + 1

    def traffic(self) -> Dict[str, int]:
        """Payload bytes sent and received since connect over the connections
        and through shared memory (``shared_bytes_sent``, Lookup requests and gradients;
        ``shared_bytes_received``, answers), and ids dropped (policy "drop")."""
        info = self._c.info()
        return {k: info[k] for k in ("bytes_sent", "bytes_received", "shared_bytes_sent", "shared_bytes_received",
                                     "ids_dropped")}

    # ---- lookups and pushes ----

    def prepare(self, batch: Any) -> PreparedBatch:
        """Preprocesses a batch (partitions per server) for :meth:`lookup`
        and :meth:`push`, so a training step prepares it once. Bad input
        raises :class:`scps.InvalidArgument` naming feature, position and
        value; nothing is sent."""
        inputs, torch_in = batch_inputs(self._features, batch)
        raw = self._c.batch()
        self._c.prepare(raw, inputs)
        return PreparedBatch(self, raw, self._torch(torch_in))

    def lookup(self, batch: Any, *, out: Optional[Mapping[str, Any]] = None,
               deadline_ms: Optional[int] = None) -> Arrays:
        """The batch's activations: {feature: float32 [batch, width]}, the
        servers' partials summed in process order (deterministic). ``out``:
        arrays to write into instead of new ones. ``batch``: inputs or a
        :class:`PreparedBatch`."""
        return self._lookup(batch, out, deadline_ms, True)

    def lookup_async(self, batch: Any, *, out: Optional[Mapping[str, Any]] = None,
                     deadline_ms: Optional[int] = None) -> Future:
        """:meth:`lookup` started now; the :class:`Future`'s result is the activations."""
        return self._lookup(batch, out, deadline_ms, False)

    def push(self, batch: Any, grads: Mapping[str, Any], step: int, *, learning_rate: Optional[float] = None,
             deadline_ms: Optional[int] = None) -> None:
        """Applies grads ({feature: float32 [batch, width]}, the loss
        gradient of the batch's activations) at global step ``step`` with
        each table's optimizer (``learning_rate``: None keeps each stack's).
        ``batch``: the :class:`PreparedBatch` looked up (or its inputs,
        prepared again). Never retried: on an error some servers may have
        applied the step; the message lists them."""
        self._push(batch, grads, step, learning_rate, deadline_ms, True)

    def push_async(self, batch: Any, grads: Mapping[str, Any], step: int, *, learning_rate: Optional[float] = None,
                   deadline_ms: Optional[int] = None) -> Future:
        """:meth:`push` started now; the arrays must not change until the :class:`Future` is done."""
        return self._push(batch, grads, step, learning_rate, deadline_ms, False)

    def _torch(self, torch_in: bool) -> bool:
        return self._output == "torch" if self._output else torch_in

    def _deadline(self, deadline_ms: Optional[int]) -> int:
        d = self.deadline_ms if deadline_ms is None else int(deadline_ms)
        if d <= 0:
            raise invalid("deadline_ms %r: expected > 0" % deadline_ms)
        return d

    def _outputs(self, torch_out: bool) -> Tuple[Arrays, List[np.ndarray]]:
        if torch_out:
            import torch
            res = {f.name: torch.empty((f.batch_size, f.width), dtype=torch.float32) for f in self._features}
            return res, [res[f.name].numpy() for f in self._features]
        res = {f.name: np.empty((f.batch_size, f.width), dtype=np.float32) for f in self._features}
        return res, [res[f.name] for f in self._features]

    def _take(self, batch: Any) -> Tuple[PreparedBatch, Any]:
        """The prepared batch, and what gives a one-shot batch back to the pool."""
        if isinstance(batch, PreparedBatch):
            if batch._client is not self:
                raise invalid("batch: a PreparedBatch of another client")
            return batch, None
        inputs, torch_in = batch_inputs(self._features, batch)
        try:
            raw = self._free.popleft()
        except IndexError:
            raw = self._c.batch()
        try:
            self._c.prepare(raw, inputs)
        except BaseException:
            self._free.append(raw)
            raise
        return PreparedBatch(self, raw, self._torch(torch_in)), lambda: self._free.append(raw)

    def _start(self, batch, call, blocking):
        """Runs call(prepared) on the batch, prepared here if it is inputs;
        a one-shot batch goes back to the pool when the call is over."""
        prepared, release = self._take(batch)
        try:
            r = call(prepared)
        except BaseException:
            if release:
                release()
            raise
        if blocking:
            if release:
                release()
            return r
        return Future(r, release)

    def _lookup(self, batch, out, deadline_ms, blocking):
        deadline = self._deadline(deadline_ms)

        def call(prepared):
            if out is not None:
                res, arrays = dict(out), float_arrays(self._features, out, "out")
            else:
                res, arrays = self._outputs(prepared.torch)
            return self._c.lookup(prepared._raw, arrays, res, deadline, blocking)
        return self._start(batch, call, blocking)

    def _push(self, batch, grads, step, learning_rate, deadline_ms, blocking):
        deadline = self._deadline(deadline_ms)
        if not isinstance(step, (int, np.integer)) or step < 0:
            raise invalid("step %r: expected an integer >= 0" % (step,))
        arrays = float_arrays(self._features, grads, "gradients")
        lr = -1.0 if learning_rate is None else float(learning_rate)
        if learning_rate is not None and not lr > 0:
            raise invalid("learning_rate %r: expected > 0 or None" % (learning_rate,))
        r = self._start(batch, lambda prepared: self._c.push(prepared._raw, arrays, int(step), lr, deadline,
                                                             blocking), blocking)
        self._pushed = max(self._pushed, int(step))
        return r

    # ---- operator calls ----

    def checkpoint(self, step: int, directory: Optional[str] = None, *, deadline_ms: int = 600000) -> Dict[str, Any]:
        """Saves the cluster checkpoint of ``step`` (every push of it
        acknowledged) under ``directory``, relative to the servers'
        --checkpoint-dir (None: that directory): {step, path, bytes, files,
        seconds}. Like ``scps-admin checkpoint save``."""
        return self._c.checkpoint(int(step), directory, self._deadline(deadline_ms))

    def last_auto_checkpoint(self) -> Optional[Dict[str, Any]]:
        """The latest checkpoint a push saved for servers run with
        --checkpoint-every (None: none yet), or raises its error."""
        return self._c.auto_checkpoint()

    def read_rows(self, table: str, ids: Any, *, num_slots: int = 0, deadline_ms: Optional[int] = None):
        """Table ``table``'s rows of ``ids`` as the servers hold them now:
        float32 [n, width]; with ``num_slots`` (the table optimizer's: 1
        for Adagrad, 2 for Adam) also its slots, [n, num_slots, width], as
        a pair. Like ``scps-admin rows``; admin callers only where servers
        check roles."""
        tables = self.config.tables
        if table not in tables:
            raise invalid("table %r: the servers declare %s" % (table, ", ".join(sorted(tables))))
        if num_slots not in (0, 1, 2):
            raise invalid("num_slots %r: expected 0, 1 or 2" % (num_slots,))
        ids = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
        width = tables[table].width
        rows = np.empty((ids.size, width), dtype=np.float32)
        if not num_slots:
            self._c.read_rows(table, ids, rows, None, self._deadline(deadline_ms))
            return rows
        # libscps writes as many slots as the optimizer has, at most
        # _MAX_SLOTS (scps_spec.h): room for that many whatever was asked.
        room = np.empty(ids.size * _MAX_SLOTS * width, dtype=np.float32)
        self._c.read_rows(table, ids, rows, room, self._deadline(deadline_ms))
        return rows, room[:ids.size * num_slots * width].reshape(ids.size, num_slots, width)

    def topk(self, table: str, queries: Any, k: int = 10, score: str = "dot", recall_target: float = 1.0,
             first_id: int = 0, count: int = 0, query_format: Optional[str] = None, *, with_info: bool = False,
             deadline_ms: Optional[int] = None):
        """The ``k`` rows of ``table`` that score highest against each query
        (scps_client_topk, the TopK RPC): every server scores its own rows
        as they are now, in float32, and the client merges their candidates.

        ``queries``: float32 [n, width] (width: the table's embedding dim),
        or anything numpy converts to that (other float dtypes, lists, a CPU
        torch tensor); a 1-D array is one query. ``score``: "dot" (q . r),
        "cosine" or "l2" (-|q - r|^2, nearest first). ``recall_target`` in
        (0, 1]: 1 is exact; below 1 each SparseCore keeps only the best row
        of each of L bins (TPU-KNN), L chosen so that the expected recall is
        at least the target. ``first_id``, ``count``: search ids
        [first_id, first_id + count) only (count 0: the whole table,
        first_id 0). ``query_format``: how queries travel, None or
        "float32", "bfloat16", an eXmY format ("e4m3"; width a multiple
        of 8).

        Returns ``(ids, scores)``: int64 and float32 [n, k], each query's
        best first (score descending, ties by lower id); for a 1-D query
        [k] each. A query whose scores were NaN for some rows can come back
        short: its missing places have id -1 and score NaN. With
        ``with_info`` a third element, a dict: ``bins`` (L; 0 when exact),
        ``rows_scanned`` (rows scored per query, all servers) and
        ``expected_recall``. Bad input (unknown table or score, k outside
        [1, rows searched], recall outside (0, 1], a range outside the
        vocabulary, a value that is not finite) raises
        :class:`scps.InvalidArgument` naming it; nothing is sent."""
        tables = self.config.tables
        if table not in tables:
            raise invalid("table %r: the servers declare %s" % (table, ", ".join(sorted(tables))))
        if score not in ("dot", "cosine", "l2"):
            raise invalid("score %r: expected 'dot', 'cosine' or 'l2'" % (score,))
        if query_format is not None and not isinstance(query_format, str):
            raise invalid("query_format %r: expected a format name such as 'bfloat16' or None" % (query_format,))
        for name, v in (("k", k), ("first_id", first_id), ("count", count)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise invalid("%s %r: expected an integer" % (name, v))
        if not 1 <= k < 2 ** 31:
            raise invalid("k %r: expected an integer in [1, 2^31)" % (k,))
        try:
            recall = float(recall_target)
        except (TypeError, ValueError):
            raise invalid("recall_target %r: expected a number in (0, 1]" % (recall_target,)) from None
        width = tables[table].width
        if is_torch(queries):
            queries = queries.detach().cpu().numpy()
        try:
            q = np.ascontiguousarray(queries, dtype=np.float32)
        except (TypeError, ValueError) as e:
            raise invalid("queries: not convertible to a float32 array (%s)" % e) from None
        one = q.ndim == 1
        if one:
            q = q.reshape(1, -1)
        if q.ndim != 2 or q.shape[0] < 1 or q.shape[1] != width:
            raise invalid("queries: shape %s, expected [n, %d] with n >= 1 (or [%d] for one query): table %r has "
                          "embedding dim %d" % (tuple(np.shape(queries)), width, width, table, width))
        n = q.shape[0]
        ids = np.empty((n, int(k)), dtype=np.int64)
        scores = np.empty((n, int(k)), dtype=np.float32)
        info = self._c.topk(table, q, n, int(k), score, recall, int(first_id), int(count), query_format, ids, scores,
                            self._deadline(deadline_ms))
        if one:
            ids, scores = ids[0], scores[0]
        return (ids, scores, info) if with_info else (ids, scores)

    def stats(self, *, deadline_ms: int = 5000) -> List[Dict[str, Any]]:
        """Every server's Stats, as ``scps-admin stats --json`` prints them."""
        return admin.ask("stats", self._servers, self._security, deadline_ms)

    def health(self, *, deadline_ms: int = 5000) -> List[Dict[str, Any]]:
        """Every server's Health (SERVING or DRAINING, process index, uptime)."""
        return admin.ask("health", self._servers, self._security, deadline_ms)

    def server_config(self, *, deadline_ms: int = 5000) -> List[Dict[str, Any]]:
        """Every server's GetConfig (stacks, limits in force, step), as ``scps-admin config --json``."""
        return admin.ask("config", self._servers, self._security, deadline_ms)

    # ---- life ----

    def close(self) -> None:
        """Waits for operations in flight and closes the channels (also at garbage collection)."""
        self._free.clear()
        self._c.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return "scps.Client(%r, %d features, wire_format=%r)" % (",".join(self._servers), len(self._features),
                                                                self._wire_format)
