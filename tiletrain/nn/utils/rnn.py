"""torch.nn.utils.rnn: pad_sequence (a batch of variable-length sequences as one padded
tensor), unpad_sequence, and packed sequences -- PackedSequence, pack_padded_sequence,
pad_packed_sequence, pack_sequence, unpack_sequence -- with torch's layout: ``data`` holds
the steps time-major, at each step the sequences still running in decreasing length order
(``batch_sizes[t]`` of them).  Packing and unpacking are index_select of the rows, so
gradients flow through them; nn.RNN/LSTM/GRU accept a PackedSequence."""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from ...ops import cat, stack
from ...ops.creation import full
from ...ops.index import index_select
from ...ops.shape import reshape
from ...tensors import Tensor
from ...tensors.tensor import from_numpy

__all__ = ["PackedSequence", "pad_sequence", "unpad_sequence", "pack_padded_sequence", "pad_packed_sequence",
           "pack_sequence", "unpack_sequence"]


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Sequences of shape (L_i, *) padded with ``padding_value`` to the longest: (L, B, *), or
    (B, L, *) with batch_first; padding after each sequence, or before with padding_side='left'."""
    seqs = list(sequences)
    if not seqs:
        raise RuntimeError("received an empty list of sequences")
    if padding_side not in ("left", "right"):
        raise ValueError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    for s in seqs:
        if not isinstance(s, Tensor) or s.ndim < 1:
            raise TypeError("pad_sequence: expected a list of tensors of at least one dimension")
    longest = max(s.shape[0] for s in seqs)
    rows = []
    for s in seqs:
        n = longest - s.shape[0]
        if n == 0:
            rows.append(s)
            continue
        pad = full((n, *s.shape[1:]), padding_value, dtype=s.dtype)
        rows.append(cat([s, pad] if padding_side == "right" else [pad, s], 0))
    return stack(rows, 0 if batch_first else 1)


def unpad_sequence(padded_sequences: Tensor, lengths, batch_first: bool = False) -> list:
    """The inverse of pad_sequence: the list of the B sequences, each cut to its length."""
    lens = _lengths(lengths)
    x = padded_sequences
    return [x[b, :n] if batch_first else x[:n, b] for b, n in enumerate(lens.tolist())]


class PackedSequence(NamedTuple):
    """torch.nn.utils.rnn.PackedSequence(data, batch_sizes, sorted_indices, unsorted_indices):
    data (sum of the lengths, *), batch_sizes (T,) int64, the sorting permutation of the batch
    (None when it was sorted) and its inverse."""
    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Optional[Tensor] = None
    unsorted_indices: Optional[Tensor] = None

    def to(self, *args, **kwargs) -> "PackedSequence":
        """The same packing with ``data.to(*args, **kwargs)`` (the indices stay int64)."""
        return self._replace(data=self.data.to(*args, **kwargs))

    def double(self) -> "PackedSequence":
        return self._replace(data=self.data.double())

    def float(self) -> "PackedSequence":
        return self._replace(data=self.data.float())

    def cpu(self) -> "PackedSequence":
        return self

    @property
    def is_cuda(self) -> bool:
        return False

    def is_pinned(self) -> bool:
        return False


def _lengths(lengths) -> np.ndarray:
    """The lengths (a list, tuple, array or int64 tensor) as a 1-D int64 array, read on the host."""
    a = lengths.numpy(force=True) if isinstance(lengths, Tensor) else np.asarray(lengths)
    if a.ndim != 1 or not (np.issubdtype(a.dtype, np.integer) or a.size == 0):
        raise TypeError(f"lengths must be a 1-D sequence of integers, got {a.dtype} of shape {a.shape}")
    return a.astype(np.int64)


def _order(packed: PackedSequence) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(batch_sizes, the rank of each sequence of the batch in the sorted order, lengths in the
    batch's order) of a packing."""
    sizes = packed.batch_sizes.numpy(force=True).astype(np.int64)
    n = int(sizes[0])
    rank = np.arange(n) if packed.unsorted_indices is None else packed.unsorted_indices.numpy(force=True).astype(np.int64)
    sorted_lengths = (sizes[None, :] > np.arange(n)[:, None]).sum(1)
    return sizes, rank, sorted_lengths[rank]


def _pack_rows(batch: int, steps: int, lengths: np.ndarray, order: np.ndarray, batch_first: bool) -> np.ndarray:
    """The rows of a padded (steps, batch) or (batch, steps) tensor, flattened, that make the packed data."""
    rows = []
    for t in range(int(lengths.max())):
        running = order[lengths[order] > t]
        rows.append(running * steps + t if batch_first else t * batch + running)
    return np.concatenate(rows).astype(np.int64)


def pack_padded_sequence(input: Tensor, lengths, batch_first: bool = False,  # noqa: A002
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack a padded (T, B, *) (or (B, T, *) with batch_first) batch whose sequence b has
    ``lengths[b]`` valid steps.  enforce_sorted=True requires decreasing lengths; False sorts
    them (stable) and keeps the permutation in the PackedSequence."""
    lens = _lengths(lengths)
    if input.ndim < 2:
        raise ValueError(f"pack_padded_sequence: expected an input of at least 2 dimensions, got {input.ndim}")
    batch, steps = (input.shape[0], input.shape[1]) if batch_first else (input.shape[1], input.shape[0])
    if lens.shape[0] != batch:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got {lens.shape[0]} "
                           f"(batch_size={batch})")
    if lens.min() <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element in 'lengths' "
                           "that is <= 0")
    if lens.max() > steps:
        raise RuntimeError(f"pack_padded_sequence: a length ({int(lens.max())}) exceeds the padded length {steps}")
    if enforce_sorted:
        if np.any(np.diff(lens) > 0):
            raise RuntimeError("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. "
                               "You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence "
                               "to sidestep this requirement if you do not need ONNX exportability.")
        order, sorted_idx, unsorted_idx = np.arange(batch), None, None
    else:
        order = np.argsort(-lens, kind="stable")
        sorted_idx, unsorted_idx = from_numpy(order.astype(np.int64)), from_numpy(np.argsort(order).astype(np.int64))
    rows = _pack_rows(batch, steps, lens, order, batch_first)
    flat = reshape(input, (batch * steps, *input.shape[2:]))
    sizes = (lens[None, :] > np.arange(int(lens.max()))[:, None]).sum(1).astype(np.int64)
    return PackedSequence(index_select(flat, 0, from_numpy(rows)), from_numpy(sizes), sorted_idx, unsorted_idx)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False, padding_value: float = 0.0,
                        total_length: Optional[int] = None) -> tuple[Tensor, Tensor]:
    """The inverse of pack_padded_sequence: (padded (T, B, *) or (B, T, *), lengths (B,) int64),
    the batch in its original order, T the longest length or ``total_length``."""
    if not isinstance(sequence, PackedSequence):
        raise TypeError(f"pad_packed_sequence: expected a PackedSequence, got {type(sequence).__name__}")
    sizes, rank, lens = _order(sequence)
    longest = len(sizes)
    if total_length is not None:
        if total_length < longest:
            raise ValueError("Expected total_length to be at least the length of the longest sequence in input, "
                             f"but got total_length={total_length} and max sequence length being {longest}")
        longest = total_length
    data = sequence.data
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    batch, n_rows = len(rank), data.shape[0]
    t = np.arange(longest)[:, None]
    src = np.where(t < lens[None, :], offsets[np.minimum(t, len(sizes) - 1)] + rank[None, :], n_rows)  # (T, B)
    if batch_first:
        src = src.T
    ext = cat([data, full((1, *data.shape[1:]), padding_value, dtype=data.dtype)], 0)
    out = index_select(ext, 0, from_numpy(np.ascontiguousarray(src).reshape(-1).astype(np.int64)))
    return reshape(out, (*src.shape, *data.shape[1:])), from_numpy(lens.astype(np.int64))


def pack_sequence(sequences, enforce_sorted: bool = True) -> PackedSequence:
    """pack_padded_sequence(pad_sequence(sequences), their lengths, enforce_sorted=...)."""
    seqs = list(sequences)
    return pack_padded_sequence(pad_sequence(seqs), [s.shape[0] for s in seqs], enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list:
    """The inverse of pack_sequence: the list of the sequences in their original order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
