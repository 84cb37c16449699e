"""Batch inputs: per feature a ragged pair (values with offsets or lengths,
optional weights) in the style of TorchRec's KeyedJaggedTensor, or a dense
[batch, valency] array. Arrays are numpy arrays or CPU torch tensors; they
are handed to libscps without a copy, so they must already have the dtype
libscps reads (ids, offsets int64; lengths int32; weights float32) and be
C-contiguous: anything else raises :class:`scps.InvalidArgument` naming the
feature and field rather than converting silently."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from .errors import invalid

# (form, ids, weights, offsets, lengths, valency, batch_size): what
# scps._scps.Client.prepare takes per feature (scps_feature_input).
RAGGED, DENSE = 0, 1


def is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def as_array(x: Any, dtype: Any, what: str) -> np.ndarray:
    """x as a numpy array sharing its memory, checked for dtype and layout."""
    if is_torch(x):
        if x.device.type != "cpu":
            raise invalid("%s: a tensor on %s; scps reads CPU memory (use .cpu())" % (what, x.device))
        if x.requires_grad:
            x = x.detach()
        if not x.is_contiguous():
            raise invalid("%s: tensor of shape %s and strides %s is not contiguous (use .contiguous())"
                          % (what, tuple(x.shape), x.stride()))
        x = x.numpy()
    elif not isinstance(x, np.ndarray):
        raise invalid("%s: a %s, expected a numpy array or a torch tensor" % (what, type(x).__name__))
    if x.dtype != dtype:
        raise invalid("%s: dtype %s, expected %s" % (what, x.dtype, np.dtype(dtype)))
    if not x.flags.c_contiguous:
        raise invalid("%s: array of shape %s and strides %s is not C-contiguous (use np.ascontiguousarray)"
                      % (what, x.shape, x.strides))
    return x


@dataclass(frozen=True)
class Ragged:
    """One feature's ids of a batch, sample by sample: sample ``s`` has
    ``values[offsets[s]:offsets[s+1]]`` (or the next ``lengths[s]``), each
    with its ``weights`` entry (None: every weight 1)."""
    values: Any
    offsets: Any = None
    lengths: Any = None
    weights: Any = None


@dataclass(frozen=True)
class Dense:
    """One feature's ids as a [batch, valency] array, every sample with
    ``valency`` ids; ``weights`` (None: 1) has the same shape."""
    ids: Any
    weights: Any = None


@dataclass(frozen=True)
class KeyedJagged:
    """Several features' ragged ids in one, as TorchRec's KeyedJaggedTensor
    holds them: ``values`` of every key one after the other, ``lengths``
    (or ``offsets``) of key k's samples at [k*batch, (k+1)*batch)."""
    keys: Sequence[str]
    values: Any
    lengths: Any = None
    offsets: Any = None
    weights: Any = None

    def split(self) -> Dict[str, Ragged]:
        """Per key a Ragged of views into values and weights (no copy of
        the ids; offsets are rebased, one small array per key)."""
        n = len(self.keys)
        if self.lengths is not None:
            # Any integer dtype: only their running sum reaches libscps.
            lengths = self.lengths.numpy() if is_torch(self.lengths) else np.asarray(self.lengths)
            if lengths.dtype.kind not in "iu":
                raise invalid("KeyedJagged lengths: dtype %s, expected integers" % lengths.dtype)
            if n == 0 or lengths.ndim != 1 or lengths.size % n:
                raise invalid("KeyedJagged lengths: %d entries for %d keys" % (lengths.size, n))
            batch = lengths.size // n
            starts = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))
        elif self.offsets is not None:
            starts = as_array(self.offsets, np.int64, "KeyedJagged offsets")
            if n == 0 or starts.ndim != 1 or (starts.size - 1) % n:
                raise invalid("KeyedJagged offsets: %d entries for %d keys" % (starts.size, n))
            batch = (starts.size - 1) // n
        else:
            raise invalid("KeyedJagged: neither lengths nor offsets")
        values = as_array(self.values, np.int64, "KeyedJagged values")
        weights = None if self.weights is None else as_array(self.weights, np.float32, "KeyedJagged weights")
        if starts[-1] != values.size:
            raise invalid("KeyedJagged: lengths sum to %d, values has %d" % (starts[-1], values.size))
        # Tensors in, tensors out (torch.from_numpy shares the memory), so
        # the lookup answers with tensors as it does for other tensor inputs.
        def wrap(x):
            return x
        if is_torch(self.values):
            import torch
            wrap = torch.from_numpy
        out = {}
        for k, key in enumerate(self.keys):
            a, b = int(starts[k * batch]), int(starts[(k + 1) * batch])
            out[key] = Ragged(wrap(values[a:b]), offsets=wrap(starts[k * batch:(k + 1) * batch + 1] - a),
                              weights=None if weights is None else wrap(weights[a:b]))
        return out


def from_torchrec(kjt: Any) -> KeyedJagged:
    """A KeyedJagged of a torchrec KeyedJaggedTensor (duck-typed: keys(),
    values(), lengths(), weights_or_none())."""
    return KeyedJagged(list(kjt.keys()), kjt.values(), lengths=kjt.lengths(),
                       weights=kjt.weights_or_none())


def feature_input(name: str, x: Any, batch: int) -> Tuple[tuple, bool]:
    """(scps._scps input tuple, whether torch) of feature ``name``'s input x:
    a Ragged, a Dense, a 2-d array (dense) or a (values, offsets) tuple."""
    what = "feature '%s'" % name
    torch_in = False
    if isinstance(x, tuple) and len(x) == 2:
        x = Ragged(x[0], offsets=x[1])
    elif isinstance(x, np.ndarray) or is_torch(x):
        x = Dense(x)
    if isinstance(x, Ragged):
        torch_in = is_torch(x.values)
        values = as_array(x.values, np.int64, what + " values")
        if values.ndim != 1:
            raise invalid("%s values: shape %s, expected one dimension" % (what, values.shape))
        offsets = lengths = weights = None
        if (x.offsets is None) == (x.lengths is None):
            raise invalid("%s: give exactly one of offsets and lengths" % what)
        if x.offsets is not None:
            offsets = as_array(x.offsets, np.int64, what + " offsets")
            if offsets.shape != (batch + 1,):
                raise invalid("%s offsets: shape %s, expected (%d,): batch size + 1" % (what, offsets.shape, batch + 1))
        else:
            lengths = as_array(x.lengths, np.int32, what + " lengths")
            if lengths.shape != (batch,):
                raise invalid("%s lengths: shape %s, expected (%d,): the batch size" % (what, lengths.shape, batch))
        if x.weights is not None:
            weights = as_array(x.weights, np.float32, what + " weights")
            if weights.shape != values.shape:
                raise invalid("%s weights: shape %s, values %s" % (what, weights.shape, values.shape))
        return (RAGGED, values, weights, offsets, lengths, 0, batch), torch_in
    if isinstance(x, Dense):
        torch_in = is_torch(x.ids)
        ids = as_array(x.ids, np.int64, what + " ids")
        if ids.ndim != 2 or ids.shape[0] != batch:
            raise invalid("%s ids: shape %s, expected (%d, valency)" % (what, ids.shape, batch))
        weights = None
        if x.weights is not None:
            weights = as_array(x.weights, np.float32, what + " weights")
            if weights.shape != ids.shape:
                raise invalid("%s weights: shape %s, ids %s" % (what, weights.shape, ids.shape))
        return (DENSE, ids.reshape(-1), None if weights is None else weights.reshape(-1), None, None,
                ids.shape[1], batch), torch_in
    raise invalid("%s: a %s; expected scps.Ragged, scps.Dense, a [batch, valency] array or (values, offsets)"
                  % (what, type(x).__name__))


def batch_inputs(features: Sequence[Any], batch: Any) -> Tuple[list, bool]:
    """The binding's inputs of a whole batch, in the servers' feature order:
    batch maps every feature's name to its input (or is a KeyedJagged, or a
    torchrec KeyedJaggedTensor)."""
    if isinstance(batch, KeyedJagged):
        batch = batch.split()
    elif hasattr(batch, "keys") and hasattr(batch, "values") and hasattr(batch, "lengths") and callable(batch.values):
        if not isinstance(batch, Mapping):
            batch = from_torchrec(batch).split()
    if not isinstance(batch, Mapping):
        raise invalid("batch: a %s, expected a mapping of feature name to input, or a KeyedJagged"
                      % type(batch).__name__)
    names = {f.name for f in features}
    unknown = sorted(set(batch) - names)
    if unknown:
        raise invalid("batch: unknown feature %r (the servers declare %s)" % (unknown[0], ", ".join(sorted(names))))
    missing = [f.name for f in features if f.name not in batch]
    if missing:
        raise invalid("batch: no input for feature %r" % missing[0])
    out, any_torch = [], False
    for f in features:
        t, tt = feature_input(f.name, batch[f.name], f.batch_size)
        out.append(t)
        any_torch |= tt
    return out, any_torch


def float_arrays(features: Sequence[Any], arrays: Mapping[str, Any], what: str) -> list:
    """Per feature a C-contiguous float32 [batch, width] array of arrays
    (gradients, or caller-supplied outputs), checked and named."""
    if not isinstance(arrays, Mapping):
        raise invalid("%s: a %s, expected a mapping of feature name to array" % (what, type(arrays).__name__))
    unknown = sorted(set(arrays) - {f.name for f in features})
    if unknown:
        raise invalid("%s: unknown feature %r" % (what, unknown[0]))
    out = []
    for f in features:
        if f.name not in arrays:
            raise invalid("%s: none for feature %r" % (what, f.name))
        a = as_array(arrays[f.name], np.float32, "feature '%s' %s" % (f.name, what))
        if a.shape != (f.batch_size, f.width):
            raise invalid("feature '%s' %s: shape %s, expected (%d, %d)" % (f.name, what, a.shape, f.batch_size, f.width))
        out.append(a)
    return out

