"""torch.nn.RNN, LSTM and GRU (and their cells) with torch's parameter names (weight_ih_l0,
weight_hh_l0, bias_ih_l0, bias_hh_l0, ..._reverse), gate orders (LSTM i, f, g, o; GRU r, z,
n), initialisation U(-1/sqrt(hidden), 1/sqrt(hidden)), batch_first, num_layers, dropout
between layers and bidirectional; a PackedSequence input runs each sequence for its own
length (the state of a finished sequence is kept, the reverse direction starts at its last
step) and gives a PackedSequence output.  Each time step is a few tensor ops (the input projection
of every step is one product up front); the recurrence is sequential by nature."""
from __future__ import annotations

import math

import numpy as np

from .. import functional as F
from ..ops.creation import zeros
from ..ops.elementwise import where
from ..ops.index import index_get, index_select
from ..ops.shape import cat, chunk, permute, reshape, stack
from ..tensors import Tensor
from ..tensors.tensor import default_float, from_numpy
from .layers import uniform
from .module import Module, Parameter
from .utils.rnn import PackedSequence, _pack_rows, pad_packed_sequence

__all__ = ["GRU", "GRUCell", "LSTM", "LSTMCell", "RNN", "RNNCell"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _uniform(shape, k, dtype):
    """U(-k, k), k = 1/sqrt(hidden_size): torch's reset_parameters, in its parameter order."""
    return Parameter(uniform(shape, k, None, dtype))


def _cell(mode: str, x_proj: Tensor, h: Tensor, c, w_hh: Tensor, b_hh):
    """One step: x_proj = x W_ih^T + b_ih (precomputed); returns (h, c)."""
    hh = F.linear(h, w_hh, b_hh)
    if mode == "LSTM":
        i, f, g, o = chunk(F.add(x_proj, hh), 4, -1)
        c = F.add(F.mul(F.sigmoid(f), c), F.mul(F.sigmoid(i), F.tanh(g)))
        return F.mul(F.sigmoid(o), F.tanh(c)), c
    if mode == "GRU":
        xr, xz, xn = chunk(x_proj, 3, -1)
        hr, hz, hn = chunk(hh, 3, -1)
        r, z = F.sigmoid(F.add(xr, hr)), F.sigmoid(F.add(xz, hz))
        n = F.tanh(F.add(xn, F.mul(r, hn)))
        return F.add(F.mul(F.sub(1.0, z), n), F.mul(z, h)), None
    pre = F.add(x_proj, hh)
    return (F.tanh(pre) if mode == "RNN_TANH" else F.relu(pre)), None


class _RNNBase(Module):
    mode = "RNN_TANH"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None):
        super().__init__()
        if proj_size:
            raise NotImplementedError("LSTM(proj_size > 0) is not supported")
        if not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        self.input_size, self.hidden_size, self.num_layers, self.bias = input_size, hidden_size, num_layers, bias
        self.batch_first, self.dropout, self.bidirectional = batch_first, float(dropout), bidirectional
        dtype = default_float(dtype)
        gates, k = _GATES[self.mode] * hidden_size, 1.0 / math.sqrt(hidden_size)
        for layer in range(num_layers):
            for sfx in ("", "_reverse")[:2 if bidirectional else 1]:
                in_size = input_size if layer == 0 else hidden_size * (2 if bidirectional else 1)
                setattr(self, f"weight_ih_l{layer}{sfx}", _uniform((gates, in_size), k, dtype))
                setattr(self, f"weight_hh_l{layer}{sfx}", _uniform((gates, hidden_size), k, dtype))
                if bias:
                    setattr(self, f"bias_ih_l{layer}{sfx}", _uniform((gates,), k, dtype))
                    setattr(self, f"bias_hh_l{layer}{sfx}", _uniform((gates,), k, dtype))

    def _direction(self, x: Tensor, layer: int, sfx: str, h: Tensor, c, running=None):
        """x (T, N, in) through one layer in one direction: (outputs (T, N, H), h, c).
        running: None, or per step t an (N, 1) bool tensor of the sequences with a step t (the
        others keep their state), None at the steps where all have one."""
        b_ih = getattr(self, f"bias_ih_l{layer}{sfx}") if self.bias else None
        b_hh = getattr(self, f"bias_hh_l{layer}{sfx}") if self.bias else None
        proj = F.linear(x, getattr(self, f"weight_ih_l{layer}{sfx}"), b_ih)
        w_hh = getattr(self, f"weight_hh_l{layer}{sfx}")
        steps = range(x.shape[0] - 1, -1, -1) if sfx else range(x.shape[0])
        outs = [None] * x.shape[0]
        for t in steps:
            h_t, c_t = _cell(self.mode, index_get(proj, t), h, c, w_hh, b_hh)
            keep = None if running is None else running[t]
            h = h_t if keep is None else where(keep, h_t, h)
            c = c_t if keep is None or c is None else where(keep, c_t, c)
            outs[t] = h
        return stack(outs, 0), h, c

    def forward(self, input: Tensor, hx=None):  # noqa: A002
        if isinstance(input, PackedSequence):
            return self._forward_packed(input, hx)
        batched = input.ndim == 3
        x = input if batched else reshape(input, (input.shape[0], 1, input.shape[1]))
        if self.batch_first and batched:
            x = permute(x, 1, 0, 2)
        T = x.shape[0]
        out, h_n, c_n = self._layers(x, *self._initial(hx, batched), None)
        if self.batch_first and batched:
            out = permute(out, 1, 0, 2)
        if not batched:
            out, h_n = reshape(out, (T, out.shape[-1])), reshape(h_n, (h_n.shape[0], self.hidden_size))
        if self.mode == "LSTM":
            return out, (h_n, c_n if batched else reshape(c_n, (c_n.shape[0], self.hidden_size)))
        return out, h_n

    def _initial(self, hx, batched: bool):
        """(h0, c0) of a forward's ``hx`` (each (L*D, N, H) or None)."""
        h0, c0 = (hx if self.mode == "LSTM" else (hx, None)) if hx is not None else (None, None)
        if h0 is not None and not batched:
            h0 = reshape(h0, (h0.shape[0], 1, h0.shape[1]))
            c0 = None if c0 is None else reshape(c0, (c0.shape[0], 1, c0.shape[1]))
        return h0, c0

    def _layers(self, x: Tensor, h0, c0, running):
        """x (T, N, in) through every layer: (out (T, N, D*H), h_n, c_n (None but for LSTM))."""
        N = x.shape[1]
        D = 2 if self.bidirectional else 1
        hs, cs = [], []
        for layer in range(self.num_layers):
            outs = []
            for d, sfx in enumerate(("", "_reverse")[:D]):
                i = layer * D + d
                h = index_get(h0, i) if h0 is not None else zeros((N, self.hidden_size), dtype=x.dtype)
                c = (index_get(c0, i) if c0 is not None else zeros((N, self.hidden_size), dtype=x.dtype)) \
                    if self.mode == "LSTM" else None
                o, h, c = self._direction(x, layer, sfx, h, c, running)
                outs.append(o)
                hs.append(h)
                cs.append(c)
            x = outs[0] if D == 1 else cat(outs, 2)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        return x, stack(hs, 0), (stack(cs, 0) if self.mode == "LSTM" else None)

    def _forward_packed(self, packed: PackedSequence, hx):
        """A PackedSequence through the layers: each sequence runs for its own length; the
        output is packed as the input, h_n/c_n in the batch's original order (as torch's)."""
        x, lengths = pad_packed_sequence(packed)  # (T, N, in), the original order
        lens = lengths.numpy(force=True)
        T, N = x.shape[0], x.shape[1]
        running = [None if (lens > t).all() else from_numpy((lens > t)[:, None]) for t in range(T)]
        out, h_n, c_n = self._layers(x, *self._initial(hx, True), running)
        order = np.arange(N) if packed.sorted_indices is None else packed.sorted_indices.numpy(force=True).astype(np.int64)
        rows = from_numpy(_pack_rows(N, T, lens, order, False))
        data = index_select(reshape(out, (T * N, out.shape[-1])), 0, rows)
        out = PackedSequence(data, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices)
        return (out, (h_n, c_n)) if self.mode == "LSTM" else (out, h_n)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.batch_first:
            s += ", batch_first=True"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class RNN(_RNNBase):
    """torch.nn.RNN(input_size, hidden_size, num_layers=1, nonlinearity='tanh', bias=True,
    batch_first=False, dropout=0.0, bidirectional=False)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        self.mode = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, dtype=dtype)


class LSTM(_RNNBase):
    mode = "LSTM"


class GRU(_RNNBase):
    mode = "GRU"


class _CellBase(Module):
    mode = "RNN_TANH"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        dtype = default_float(dtype)
        gates, k = _GATES[self.mode] * hidden_size, 1.0 / math.sqrt(hidden_size)
        self.weight_ih = _uniform((gates, input_size), k, dtype)
        self.weight_hh = _uniform((gates, hidden_size), k, dtype)
        self.bias_ih = _uniform((gates,), k, dtype) if bias else None
        self.bias_hh = _uniform((gates,), k, dtype) if bias else None

    def forward(self, input: Tensor, hx=None):  # noqa: A002
        batched = input.ndim == 2
        x = input if batched else reshape(input, (1, input.shape[0]))
        if hx is None:
            h = zeros((x.shape[0], self.hidden_size), dtype=x.dtype)
            c = zeros((x.shape[0], self.hidden_size), dtype=x.dtype) if self.mode == "LSTM" else None
        elif self.mode == "LSTM":
            h, c = hx
        else:
            h, c = hx, None
        if not batched and hx is not None:
            h = reshape(h, (1, self.hidden_size))
            c = None if c is None else reshape(c, (1, self.hidden_size))
        h, c = _cell(self.mode, F.linear(x, self.weight_ih, self.bias_ih), h, c, self.weight_hh, self.bias_hh)
        if not batched:
            h = reshape(h, (self.hidden_size,))
            c = None if c is None else reshape(c, (self.hidden_size,))
        return (h, c) if self.mode == "LSTM" else h


class RNNCell(_CellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        self.mode = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias, dtype=dtype)


class LSTMCell(_CellBase):
    mode = "LSTM"


class GRUCell(_CellBase):
    mode = "GRU"
