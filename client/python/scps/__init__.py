"""scps: Python client of the scps embedding parameter server, over libscps.

    import scps
    client = scps.Client("127.0.0.1:50051,127.0.0.1:50052")
    acts = client.lookup({"user": scps.Ragged(ids, offsets=offsets), "item": dense_ids})
    client.push(prepared_batch, grads, step)

:class:`Client` (lookups, pushes, their async forms, top-k retrieval, checkpoints, stats),
the input forms :class:`Ragged`, :class:`Dense`, :class:`KeyedJagged`, the
exceptions :class:`Error` and its subclasses; ``scps.torch`` (imported on
demand) holds the PyTorch module and the pipelined training loop.
"""
from . import _scps
from .client import Client, Config, Feature, Future, PreparedBatch, Table
from .errors import DeadlineExceeded, Error, InvalidArgument, Unavailable
from .inputs import Dense, KeyedJagged, Ragged

__version__ = _scps.version()


def memtune_apply() -> None:
    """libscps's allocator settings (scps_memtune_apply): call first, before
    large allocations, in a process that is mostly a trainer."""
    _scps.memtune_apply()


__all__ = ["Client", "Config", "Feature", "Table", "Future", "PreparedBatch", "Ragged", "Dense", "KeyedJagged",
           "Error", "InvalidArgument", "Unavailable", "DeadlineExceeded", "memtune_apply"]
