"""torch.nn.utils.rnn: pad_sequence (a batch of variable-length sequences as one padded
tensor).  The packed-sequence API (pack_padded_sequence, PackedSequence) is not here: pass the
padded batch and a mask, or raise clearly where a program needs it."""
from __future__ import annotations

from ...ops import cat, stack
from ...ops.creation import full
from ...tensors import Tensor

__all__ = ["pad_sequence", "pack_padded_sequence", "pad_packed_sequence", "pack_sequence"]


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


def _packed(name: str):
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"torch.nn.utils.rnn.{name}: packed sequences are not supported; run the RNN on "
                                  "the padded batch (pad_sequence) and mask the padded steps")
    refuse.__name__ = name
    return refuse


pack_padded_sequence = _packed("pack_padded_sequence")
pad_packed_sequence = _packed("pad_packed_sequence")
pack_sequence = _packed("pack_sequence")
