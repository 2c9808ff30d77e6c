"""torch.nn.utils.rnn's packed sequences against torch (float64): the packed layout,
unpacking, gradients through both, and RNN/LSTM/GRU on a PackedSequence (outputs, h_n,
c_n and every gradient)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tiletrain as tt
import tiletrain.nn as nn
from tiletrain.nn.utils import rnn as tt_rnn

trnn = torch.nn.utils.rnn


def _pair(a):
    return torch.tensor(a, requires_grad=True), tt.tensor(a, requires_grad=True)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("lengths,sorted_", [([4, 2, 3, 1], False), ([4, 3, 3, 1], True), ([2, 2, 2], True)])
def test_pack_and_pad_equal_torch_with_gradients(batch_first, lengths, sorted_):
    rng = np.random.default_rng(0)
    shape = (len(lengths), 5, 3) if batch_first else (5, len(lengths), 3)
    a, w = rng.standard_normal(shape), rng.standard_normal(shape)
    xt, xo = _pair(a)
    pt = trnn.pack_padded_sequence(xt, torch.tensor(lengths), batch_first=batch_first, enforce_sorted=sorted_)
    po = tt_rnn.pack_padded_sequence(xo, tt.tensor(lengths), batch_first=batch_first, enforce_sorted=sorted_)
    np.testing.assert_array_equal(po.data.detach().numpy(), pt.data.detach().numpy())
    np.testing.assert_array_equal(po.batch_sizes.numpy(), pt.batch_sizes.numpy())
    for ours, ref in ((po.sorted_indices, pt.sorted_indices), (po.unsorted_indices, pt.unsorted_indices)):
        assert (ours is None) == (ref is None)
        if ref is not None:
            np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    yt, lt = trnn.pad_packed_sequence(pt, batch_first=batch_first, padding_value=-1.5, total_length=6)
    yo, lo = tt_rnn.pad_packed_sequence(po, batch_first=batch_first, padding_value=-1.5, total_length=6)
    np.testing.assert_array_equal(yo.detach().numpy(), yt.detach().numpy())
    np.testing.assert_array_equal(lo.numpy(), lt.numpy())
    assert lo.dtype == tt.int64
    g = rng.standard_normal(tuple(yt.shape))
    yt.backward(torch.tensor(g))
    yo.backward(tt.tensor(g))
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), rtol=0, atol=1e-15)


def test_pack_sequence_unpack_sequence_and_unpad_sequence():
    rng = np.random.default_rng(1)
    seqs = [rng.standard_normal((n, 2)) for n in (3, 5, 1)]
    pt = trnn.pack_sequence([torch.tensor(s) for s in seqs], enforce_sorted=False)
    po = tt_rnn.pack_sequence([tt.tensor(s) for s in seqs], enforce_sorted=False)
    np.testing.assert_array_equal(po.data.numpy(), pt.data.numpy())
    for ours, s in zip(tt_rnn.unpack_sequence(po), seqs):
        np.testing.assert_array_equal(ours.numpy(), s)
    padded = tt_rnn.pad_sequence([tt.tensor(s) for s in seqs])
    for ours, s in zip(tt_rnn.unpad_sequence(padded, [3, 5, 1]), seqs):
        np.testing.assert_array_equal(ours.numpy(), s)
    assert isinstance(po, tuple) and po._fields == pt._fields
    assert po.to(tt.float32).data.dtype == tt.float32


def test_packing_refuses_what_torch_refuses():
    x = tt.zeros((3, 4, 2))
    with pytest.raises(RuntimeError, match="sorted in decreasing order"):
        tt_rnn.pack_padded_sequence(x, [1, 3, 2], batch_first=True)
    with pytest.raises(RuntimeError, match="greater than 0"):
        tt_rnn.pack_padded_sequence(x, [3, 0, 2], batch_first=True, enforce_sorted=False)
    with pytest.raises(RuntimeError, match="batch_size"):
        tt_rnn.pack_padded_sequence(x, [3, 2], batch_first=True)
    with pytest.raises(RuntimeError, match="exceeds"):
        tt_rnn.pack_padded_sequence(x, [5, 2, 1], batch_first=True)
    p = tt_rnn.pack_padded_sequence(x, [4, 2, 1], batch_first=True)
    with pytest.raises(ValueError, match="total_length"):
        tt_rnn.pad_packed_sequence(p, total_length=3)
    with pytest.raises(TypeError, match="PackedSequence"):
        tt_rnn.pad_packed_sequence(x)


@pytest.mark.parametrize("mode,kw", [("LSTM", dict(num_layers=2, bidirectional=True)),
                                     ("GRU", dict(num_layers=1, bidirectional=True)),
                                     ("RNN", dict(num_layers=2)), ("LSTM", dict(batch_first=True))])
def test_rnn_on_packed_sequence_equals_torch(mode, kw):
    rng = np.random.default_rng(2)
    ref = getattr(torch.nn, mode)(3, 4, **kw).double()
    ours = getattr(nn, mode)(3, 4, **kw).double()
    ours.load_state_dict({k: tt.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    bf, lengths = kw.get("batch_first", False), [3, 5, 2, 5]
    a = rng.standard_normal((4, 5, 3) if bf else (5, 4, 3))
    layers = kw.get("num_layers", 1) * (2 if kw.get("bidirectional") else 1)
    h0 = rng.standard_normal((layers, 4, 4))
    xt, xo = _pair(a)
    ht, ho = _pair(h0)
    hx_t, hx_o = ((ht, ht * 0.5), (ho, ho * 0.5)) if mode == "LSTM" else (ht, ho)
    out_t, st_t = ref(trnn.pack_padded_sequence(xt, lengths, batch_first=bf, enforce_sorted=False), hx_t)
    out_o, st_o = ours(tt_rnn.pack_padded_sequence(xo, lengths, batch_first=bf, enforce_sorted=False), hx_o)
    assert isinstance(out_o, tt_rnn.PackedSequence)
    np.testing.assert_allclose(out_o.data.detach().numpy(), out_t.data.detach().numpy(), rtol=1e-12, atol=1e-14)
    st_t, st_o = (st_t if mode == "LSTM" else (st_t,)), (st_o if mode == "LSTM" else (st_o,))
    loss_t = trnn.pad_packed_sequence(out_t)[0].pow(2).sum() + sum((s * s.detach()).sum() for s in st_t)
    loss_o = tt_rnn.pad_packed_sequence(out_o)[0].pow(2).sum() + sum((s * s.detach()).sum() for s in st_o)
    for u, v in zip(st_t, st_o):
        np.testing.assert_allclose(v.detach().numpy(), u.detach().numpy(), rtol=1e-12, atol=1e-14)
    loss_t.backward()
    loss_o.backward()
    for u, v in [(xt, xo), (ht, ho)] + [(p, dict(ours.named_parameters())[n]) for n, p in ref.named_parameters()]:
        np.testing.assert_allclose(v.grad.numpy(), u.grad.numpy(), rtol=1e-10, atol=1e-12)
