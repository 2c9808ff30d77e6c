"""F.ctc_loss / nn.CTCLoss and F.fold / nn.Fold against torch itself (float64; values and every
gradient), and torch's errors for bad input."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import tiletrain as tt
import tiletrain.nn as nn
import tiletrain.nn.functional as F

TF = torch.nn.functional


def _same(fn_t, fn_tt, *arrays, rtol=1e-10, atol=1e-12, grad=True):
    """fn_t on torch tensors and fn_tt on tiletrain tensors of the same arrays: equal values,
    and equal gradients of every float input for one random upstream gradient (NaN where
    torch's is NaN)."""
    A = [torch.tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
    B = [tt.tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ra, rb = fn_t(*A), fn_tt(*B)
    np.testing.assert_allclose(rb.detach().numpy(), ra.detach().numpy(), rtol=rtol, atol=atol)
    assert rb.detach().numpy().dtype == ra.detach().numpy().dtype
    assert tuple(rb.shape) == tuple(ra.shape)
    if grad and ra.requires_grad:
        w = np.random.default_rng(9).standard_normal(tuple(ra.shape)).astype(ra.detach().numpy().dtype)
        ra.backward(torch.tensor(w))
        rb.backward(tt.tensor(w))
        for a, b in zip(A, B):
            if a.grad is not None:
                np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=rtol, atol=atol)


def _log_probs(t, n, c, seed=0, normalised=True):
    a = np.random.default_rng(seed).standard_normal((t, n, c)) * 2
    return a - np.log(np.exp(a).sum(-1, keepdims=True)) if normalised else a


# padded targets: repeats (1 2 2), a label equal to its neighbour's (4 4 4), a short one, an empty one
TARGETS = np.array([[1, 2, 2, 3], [3, 1, 0, 0], [4, 4, 4, 1], [2, 0, 0, 0]], dtype=np.int64)
T_LENS, S_LENS = (12, 9, 11, 5), (4, 2, 3, 0)


def _concat(targets, lengths):
    return np.concatenate([targets[i, :n] for i, n in enumerate(lengths)]).astype(np.int64)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("layout", ["padded", "concatenated"])
@pytest.mark.parametrize("lengths", ["tuple", "list", "tensor"])
def test_ctc_loss_equals_torch(reduction, layout, lengths):
    lp = _log_probs(12, 4, 5)
    tg = TARGETS if layout == "padded" else _concat(TARGETS, S_LENS)

    def lens(mod):
        if lengths == "tuple":
            return T_LENS, S_LENS
        if lengths == "list":
            return list(T_LENS), list(S_LENS)
        return mod.tensor(np.array(T_LENS)), mod.tensor(np.array(S_LENS))

    _same(lambda x, y: TF.ctc_loss(x, y, *lens(torch), reduction=reduction),
          lambda x, y: F.ctc_loss(x, y, *lens(tt), reduction=reduction), lp, tg)


@pytest.mark.parametrize("blank", [0, 4])
def test_ctc_loss_blank_index_and_unnormalised_log_probs_equal_torch(blank):
    """Any blank; log_probs that are not log-softmaxed (torch's gradient is exp(log_probs) minus
    the label posteriors: compared as is)."""
    tg = np.where(TARGETS == blank, (blank + 1) % 5, TARGETS)
    lp = _log_probs(12, 4, 5, seed=3, normalised=False)
    _same(lambda x, y: TF.ctc_loss(x, y, T_LENS, S_LENS, blank=blank),
          lambda x, y: F.ctc_loss(x, y, T_LENS, S_LENS, blank=blank), lp, tg)
    # a target holding the blank's own index is an ordinary label, as torch (which documents
    # that targets cannot be blank)
    tg2 = tg.copy()
    tg2[0, 1] = tg2[2, 0] = blank
    _same(lambda x, y: TF.ctc_loss(x, y, T_LENS, S_LENS, blank=blank, reduction="none"),
          lambda x, y: F.ctc_loss(x, y, T_LENS, S_LENS, blank=blank, reduction="none"), lp, tg2)
    # as the last label, the value is torch's; torch's gradient at the last step then keeps one of
    # the two ends' terms at the blank's index, tiletrain's is the derivative: checked against
    # central differences of the loss
    tg2[2, 2] = blank
    _same(lambda x, y: TF.ctc_loss(x, y, T_LENS, S_LENS, blank=blank, reduction="none"),
          lambda x, y: F.ctc_loss(x, y, T_LENS, S_LENS, blank=blank, reduction="none"), lp, tg2, grad=False)
    x = tt.tensor(lp, requires_grad=True)
    F.ctc_loss(x, tt.tensor(tg2), T_LENS, S_LENS, blank=blank, reduction="none")[2].backward()
    t, h = T_LENS[2] - 1, 1e-6
    for c in range(5):
        up, down = lp.copy(), lp.copy()
        up[t, 2, c] += h
        down[t, 2, c] -= h
        fd = [F.ctc_loss(tt.tensor(v), tt.tensor(tg2), T_LENS, S_LENS, blank=blank, reduction="none").numpy()[2]
              for v in (up, down)]
        np.testing.assert_allclose(x.grad.numpy()[t, 2, c], (fd[0] - fd[1]) / (2 * h) + np.exp(lp[t, 2, c]),
                                   rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("zero_infinity", [False, True])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_ctc_loss_impossible_alignments_equal_torch(zero_infinity, reduction):
    """Inputs too short for their targets (3 steps for 1 2 2 3, which needs 5; 2 steps for 4 4 4):
    inf and NaN gradients on their steps, or 0 and a zero gradient with zero_infinity."""
    lp = _log_probs(12, 4, 5, seed=5)
    il = (3, 9, 2, 5)
    _same(lambda x, y: TF.ctc_loss(x, y, il, S_LENS, reduction=reduction, zero_infinity=zero_infinity),
          lambda x, y: F.ctc_loss(x, y, il, S_LENS, reduction=reduction, zero_infinity=zero_infinity), lp, TARGETS)
    loss = F.ctc_loss(tt.tensor(lp), tt.tensor(TARGETS), il, S_LENS, reduction="none", zero_infinity=zero_infinity)
    assert (loss.numpy()[[0, 2]] == (0.0 if zero_infinity else np.inf)).all()
    assert np.isfinite(loss.numpy()[[1, 3]]).all()


def test_ctc_loss_unbatched_equals_torch():
    """(T, C) log_probs; 1-D targets are the one sequence's labels (as concatenated: exactly the
    target length), a (1, S) one is padded; lengths as one-element tuples or 0-d tensors."""
    lp = _log_probs(9, 1, 6, seed=7)[:, 0]
    tg = np.array([2, 5, 5, 1], dtype=np.int64)
    for reduction in ("none", "sum", "mean"):
        _same(lambda x, y: TF.ctc_loss(x, y, (9,), (4,), reduction=reduction),
              lambda x, y: F.ctc_loss(x, y, (9,), (4,), reduction=reduction), lp, tg)
        _same(lambda x, y: TF.ctc_loss(x, y, (9,), (3,), reduction=reduction),
              lambda x, y: F.ctc_loss(x, y, (9,), (3,), reduction=reduction), lp, tg[None])
    _same(lambda x, y: TF.ctc_loss(x, y, torch.tensor(8), torch.tensor(4)),
          lambda x, y: F.ctc_loss(x, y, tt.tensor(8), tt.tensor(4)), lp, tg)


def test_ctc_loss_module_and_float32_equal_torch():
    lp = _log_probs(12, 4, 5, seed=11)
    for kw in ({}, {"blank": 0, "reduction": "sum", "zero_infinity": True}):
        _same(lambda x, y: torch.nn.CTCLoss(**kw)(x, y, T_LENS, S_LENS),
              lambda x, y: nn.CTCLoss(**kw)(x, y, T_LENS, S_LENS), lp, TARGETS)
    _same(lambda x, y: TF.ctc_loss(x, y, T_LENS, S_LENS, reduction="none"),
          lambda x, y: F.ctc_loss(x, y, T_LENS, S_LENS, reduction="none"), lp.astype(np.float32), TARGETS,
          rtol=1e-4, atol=1e-5)  # (float32 sums in another order than torch's)


def test_ctc_loss_trains_a_linear_layer_as_torch():
    """A step of SGD through log_softmax and ctc_loss moves the weights as torch's."""
    rng = np.random.default_rng(2)
    x, w0 = rng.standard_normal((10, 3, 4)), rng.standard_normal((5, 4)) * 0.5
    tg, il, tl = TARGETS[:3], (10, 9, 10), (4, 2, 3)
    wa, wb = torch.tensor(w0, requires_grad=True), tt.tensor(w0, requires_grad=True)
    for _ in range(2):
        la = TF.ctc_loss(TF.log_softmax(torch.tensor(x) @ wa.T, 2), torch.tensor(tg), il, tl)
        lb = F.ctc_loss(F.log_softmax(tt.tensor(x) @ wb.T, 2), tt.tensor(tg), il, tl)
        np.testing.assert_allclose(lb.item(), la.item(), rtol=1e-10)
        la.backward()
        lb.backward()
        np.testing.assert_allclose(wb.grad.numpy(), wa.grad.numpy(), rtol=1e-10, atol=1e-12)
        with torch.no_grad():
            wa -= 0.5 * wa.grad
        wa.grad = None
        with tt.no_grad():
            wb -= 0.5 * wb.grad
        wb.grad = None
    np.testing.assert_allclose(wb.detach().numpy(), wa.detach().numpy(), rtol=1e-10)


@pytest.mark.parametrize("call,error,match", [
    (lambda lp, tg: F.ctc_loss(lp, tg, T_LENS, S_LENS, blank=5), RuntimeError, "blank must be in label range"),
    (lambda lp, tg: F.ctc_loss(lp, tg, T_LENS, S_LENS, blank=-1), RuntimeError, "blank must be in label range"),
    (lambda lp, tg: F.ctc_loss(lp, tg, (13, 9, 11, 5), S_LENS), RuntimeError, "input_lengths to have value at most 12"),
    (lambda lp, tg: F.ctc_loss(lp, tg, (12, 9, -1, 5), S_LENS), RuntimeError, "input_lengths to have value at least 0"),
    (lambda lp, tg: F.ctc_loss(lp, tg, T_LENS, (4, 2, -3, 0)), RuntimeError,
     "target_lengths to have value at least 0"),
    (lambda lp, tg: F.ctc_loss(lp, tg, (12, 9), S_LENS), RuntimeError, "input_lengths must be of size batch_size"),
    (lambda lp, tg: F.ctc_loss(lp, tg, T_LENS, (4, 2, 3)), RuntimeError, "target_lengths must be of size batch_size"),
    (lambda lp, tg: F.ctc_loss(lp, tg, T_LENS, (5, 2, 3, 0)), RuntimeError, "size at least 5 at dimension 1"),
    (lambda lp, tg: F.ctc_loss(lp, tt.tensor(_concat(TARGETS, S_LENS)), T_LENS, (4, 2, 3, 1)), RuntimeError,
     "size 10 at dimension 0, but got size 9"),
    (lambda lp, tg: F.ctc_loss(lp, tg[:3], T_LENS, S_LENS), RuntimeError, "size 4 at dimension 0, but got size 3"),
    (lambda lp, tg: F.ctc_loss(lp, tg[0, 0], T_LENS, S_LENS), RuntimeError, "Expected 1 to 2 dimensions"),
    (lambda lp, tg: F.ctc_loss(lp, tg, T_LENS, S_LENS, reduction="avg"), ValueError, "reduction"),
    (lambda lp, tg: F.ctc_loss(lp, tg, 12, S_LENS), TypeError, "input_lengths must be a tuple or list"),
    (lambda lp, tg: F.ctc_loss(lp[0], tg, T_LENS, S_LENS), RuntimeError, "input_lengths must be of size batch_size"),
    (lambda lp, tg: F.ctc_loss(lp, tt.tensor(np.where(TARGETS == 4, 7, TARGETS)), T_LENS, S_LENS), RuntimeError,
     "target value 7 is out of range for 5 classes"),
])
def test_ctc_loss_bad_input_raises_torchs_errors(call, error, match):
    with pytest.raises(error, match=match):
        call(tt.tensor(_log_probs(12, 4, 5)), tt.tensor(TARGETS))


FOLDS = [  # input shape, output_size, kernel_size, keyword arguments
    ((2, 3 * 4, 12), (4, 5), 2, {}),
    ((3 * 4, 12), (4, 5), (2, 2), {}),  # unbatched
    ((2, 2 * 6, 16), (7, 8), (2, 3), {"dilation": (1, 2), "padding": (1, 0), "stride": (2, 1)}),
    ((1, 3 * 9, 9), 5, 3, {"padding": 1, "stride": 2}),
    ((2, 2 * 4, 4), (6, 6), 2, {"dilation": 2, "stride": 3}),  # blocks that do not cover every pixel
]


@pytest.mark.parametrize("shape,output_size,kernel_size,kw", FOLDS)
def test_fold_and_module_equal_torch(shape, output_size, kernel_size, kw):
    a = np.random.default_rng(4).standard_normal(shape)
    _same(lambda x: TF.fold(x, output_size, kernel_size, **kw), lambda x: F.fold(x, output_size, kernel_size, **kw), a,
          rtol=1e-12, atol=1e-14)
    _same(torch.nn.Fold(output_size, kernel_size, **kw), nn.Fold(output_size, kernel_size, **kw), a,
          rtol=1e-12, atol=1e-14)
    _same(lambda x: TF.fold(x, output_size, kernel_size, **kw), lambda x: F.fold(x, output_size, kernel_size, **kw),
          a.astype(np.float32), rtol=1e-6, atol=1e-6)


def test_fold_is_the_adjoint_of_unfold():
    """<unfold(x), y> = <x, fold(y)>, and fold(unfold(x)) counts each pixel's blocks, as torch."""
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal((2, 3, 7, 6)), rng.standard_normal((2, 3 * 6, 12))
    kw = {"kernel_size": (3, 2), "dilation": (1, 2), "padding": 1, "stride": 2}
    lhs = (F.unfold(tt.tensor(x), **kw).numpy() * y).sum()
    rhs = (x * F.fold(tt.tensor(y), (7, 6), **kw).numpy()).sum()
    np.testing.assert_allclose(lhs, rhs, rtol=1e-12)
    _same(lambda t: TF.fold(TF.unfold(t, **kw), (7, 6), **kw), lambda t: F.fold(F.unfold(t, **kw), (7, 6), **kw), x,
          rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("shape,args,kw,error,match", [
    ((1, 12, 12), ((4, 4), 2), {}, RuntimeError, r"number of sliding blocks 3 \* 3 = 9, but got input.size\(2\)=12"),
    ((1, 12, 12), ((4, 5), (3, 2)), {}, RuntimeError, "sliding blocks 2 \\* 4 = 8"),
    ((1, 10, 12), ((4, 5), 2), {}, RuntimeError, "divisible by the product of kernel_size"),
    ((1, 12, 12), ((4, 5), (0, 2)), {}, RuntimeError, "kernel size should be greater than zero"),
    ((1, 12, 12), ((4, 5), 2), {"stride": 0}, RuntimeError, "stride should be greater than zero"),
    ((1, 12, 12), ((4, 5), 2), {"dilation": 0}, RuntimeError, "dilation should be greater than zero"),
    ((1, 12, 12), ((4, 5), 2), {"padding": -1}, RuntimeError, "padding should be non-negative"),
    ((12,), ((4, 5), 2), {}, RuntimeError, "Expected 2D or 3D"),
    ((1, 1, 2, 12), ((4, 5), 2), {}, RuntimeError, "Expected 2D or 3D"),
    ((1, 12, 12), ((4, 5, 6), 2), {}, RuntimeError, "output_size equals to 2, but got size 3"),
])
def test_fold_bad_input_raises_torchs_errors(shape, args, kw, error, match):
    with pytest.raises(error, match=match):
        TF.fold(torch.zeros(shape), *args, **kw)  # torch raises the same type
    with pytest.raises(error, match=match):
        F.fold(tt.zeros(shape), *args, **kw)


def test_odd_tilings_and_fold_double_backward_equal_torch():
    """Tiling is never a correctness rule: log_probs, targets and fold's input in odd tilings;
    fold's gradient is itself differentiable (create_graph), as torch's."""
    import tiletrain.autograd
    lp = _log_probs(12, 4, 5, seed=8)
    a, b = torch.tensor(lp, requires_grad=True), tt.tensor(lp, requires_grad=True, tiles=(5, 3, 2))
    la = TF.ctc_loss(a, torch.tensor(TARGETS), T_LENS, S_LENS)
    lb = F.ctc_loss(b, tt.tensor(TARGETS, tiles=(3, 2)), T_LENS, S_LENS)
    la.backward()
    lb.backward()
    np.testing.assert_allclose(lb.item(), la.item(), rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=1e-10, atol=1e-12)
    x = np.random.default_rng(0).standard_normal((2, 12, 12))
    a, b = torch.tensor(x, requires_grad=True), tt.tensor(x, requires_grad=True, tiles=(1, 5, 7))
    ya, yb = TF.fold(a, (4, 5), 2), F.fold(b, (4, 5), 2)
    np.testing.assert_allclose(yb.detach().numpy(), ya.detach().numpy(), rtol=1e-12)
    ga, = torch.autograd.grad((ya * ya).sum(), [a], create_graph=True)
    gb, = tiletrain.autograd.grad((yb * yb).sum(), [b], create_graph=True)
    np.testing.assert_allclose(gb.detach().numpy(), ga.detach().numpy(), rtol=1e-12)
    (ga * ga).sum().backward()
    (gb * gb).sum().backward()
    np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss_with_minus_infinite_log_probs_equals_torch(zero_infinity):
    """log_probs of exactly -inf: a label never emitted makes its sequence impossible (inf, or 0
    with zero_infinity, as torch); a lone -inf entry on a possible path leaves a finite loss.
    The gradients are torch's, except at a lone -inf entry where torch's is NaN (0/0) and
    tiletrain's is the derivative, 0."""
    lp = _log_probs(12, 4, 5, seed=5)
    lp[:, 0, 1] = -np.inf  # sequence 0 (1 2 2 3) needs label 1
    lp[3, 1, 2] = -np.inf
    a, b = torch.tensor(lp, requires_grad=True), tt.tensor(lp, requires_grad=True)
    la = TF.ctc_loss(a, torch.tensor(TARGETS), T_LENS, S_LENS, reduction="none", zero_infinity=zero_infinity)
    lb = F.ctc_loss(b, tt.tensor(TARGETS), T_LENS, S_LENS, reduction="none", zero_infinity=zero_infinity)
    np.testing.assert_allclose(lb.detach().numpy(), la.detach().numpy(), rtol=1e-10)
    la.sum().backward()
    lb.sum().backward()
    ga, gb = a.grad.numpy(), b.grad.numpy()
    lone = np.zeros(ga.shape, bool)
    lone[3, 1, 2] = True
    assert np.isnan(ga[lone]).all() and (gb[lone] == 0).all()
    np.testing.assert_allclose(gb[~lone], ga[~lone], rtol=1e-10, atol=1e-12)
