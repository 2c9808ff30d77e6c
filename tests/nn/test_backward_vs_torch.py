"""Every differentiable op of the torch surface, backward compared with torch's autograd: the
op runs forward in float64 with tiletrain and with torch on the same inputs, then backward
with the same random upstream gradient, and every input's gradient is compared (rtol 1e-9).
Most cases are one function of the module (``lambda m, F, *xs``, called with tiletrain and
with torch), as a ported program is; some inputs have odd tilings so that tile boundaries
fall inside the reduced, contracted, normalised or gathered axes."""
import math

import numpy as np
import pytest
import torch

import tiletrain as tt

RTOL, ATOL = 1e-9, 1e-12
IDS = np.array([[3, 0, 5, 3], [6, 3, 1, 0]])                 # embedding ids (repeats: accumulated)
TARGETS = np.array([2, 0, 4, 4, 1, -100, 3])                 # cross_entropy targets (-100 ignored)
IDX = np.array([4, 0, 2, 2, 5])                              # index_select along dim 1 of (3, 6)
GIDX = np.array([[0, 2, 2], [1, 1, 0], [2, 0, 1], [2, 2, 2]])  # gather/scatter_add, dim 1
MASK = np.random.default_rng(7).random((4, 5)) > 0.5
CLASS_W = np.random.default_rng(8).uniform(0.2, 2.0, 5)   # cross_entropy class weights


def _arg(spec, rng):
    """An input: (shape or array, tiles); arrays are used as they are (chosen domains)."""
    a, tiles = spec
    a = rng.standard_normal(a) if isinstance(a, tuple) else np.asarray(a, np.float64)
    return a, tiles


def _unit(shape, lo=0.05, hi=0.95, seed=3):
    return np.random.default_rng(seed).uniform(lo, hi, shape)


def _distinct(shape, seed=4):
    """Values all apart (max_pool's argmax is unique: no ties to break differently)."""
    n = int(np.prod(shape))
    return (np.random.default_rng(seed).permutation(n) / n - 0.5).reshape(shape)


def _rope_torch(x, theta=10000.0):
    """Hugging Face Llama's rotary embedding (rotate-half) written in torch: the angles in
    float32 (float32 inv_freq times float32 positions, as Hugging Face computes them, and as
    tiletrain's rope kernel does), their cos and sin in x's dtype."""
    T, D = x.shape[2], x.shape[3]
    inv = 1.0 / theta ** (torch.arange(0, D, 2).float() / D)
    f = torch.outer(torch.arange(T).float(), inv).to(x.dtype)
    emb = torch.cat((f, f), dim=-1)
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * emb.cos() + torch.cat((-x2, x1), dim=-1) * emb.sin()


def _conv_bn(m, F, x, w, g, b):
    return F.batch_norm(F.conv2d(x, w, padding=1), None, None, g, b, training=True)


S = lambda *shape: shape  # noqa: E731  (a shape, for readability of the table)

# id: ([(shape or array, tiles), ...], f(m, F, *inputs) or (ours, ref))
CASES = {
    # -- products
    "matmul_2d": ([(S(5, 7), (2, 3)), (S(7, 3), (3, 2))], lambda m, F, a, b: m.matmul(a, b)),
    "matmul_operator": ([(S(4, 6), None), (S(6, 5), (4, 3))], lambda m, F, a, b: a @ b),
    "matmul_batched": ([(S(3, 5, 7), (2, 2, 3)), (S(3, 7, 4), (1, 3, 4))], lambda m, F, a, b: a @ b),
    "matmul_broadcast_rhs_2d": ([(S(2, 3, 5, 7), (1, 2, 2, 3)), (S(7, 4), (3, 2))], lambda m, F, a, b: a @ b),
    "matmul_broadcast_lhs_2d": ([(S(5, 7), (2, 7)), (S(2, 7, 3), (1, 3, 3))], lambda m, F, a, b: a @ b),
    "matmul_broadcast_batch": ([(S(1, 4, 6), None), (S(3, 6, 2), (2, 4, 2))], lambda m, F, a, b: a @ b),
    "matmul_vector": ([(S(2, 5, 7), (1, 2, 3)), (S(7,), (3,))], lambda m, F, a, b: a @ b),
    "matmul_vector_lhs": ([(S(5,), (2,)), (S(3, 5, 4), (2, 2, 3))], lambda m, F, a, b: m.matmul(a, b)),
    "matmul_dot": ([(S(6,), (4,)), (S(6,), None)], lambda m, F, a, b: m.matmul(a, b)),
    "linear_bias": ([(S(2, 5, 7), (1, 2, 3)), (S(6, 7), (4, 3)), (S(6,), (4,))],
                    lambda m, F, x, w, b: F.linear(x, w, b)),
    "linear_no_bias": ([(S(9, 7), (4, 7)), (S(5, 7), None)], lambda m, F, x, w: F.linear(x, w)),
    "outer": ([(S(5,), (2,)), (S(3,), None)], lambda m, F, a, b: m.outer(a, b)),
    # -- normalisations, rotary, attention
    "layer_norm": ([(S(4, 3, 10), (3, 2, 4)), (S(10,), None), (S(10,), (3,))],
                   lambda m, F, x, w, b: F.layer_norm(x, (10,), w, b, eps=1e-5)),
    "layer_norm_no_affine": ([(S(6, 9), (4, 9))], lambda m, F, x: F.layer_norm(x, [9])),
    "rms_norm": ([(S(4, 3, 10), (3, 2, 4)), (S(10,), (10,))], lambda m, F, x, w: F.rms_norm(x, (10,), w, 1e-6)),
    "rms_norm_whole_rows": ([(S(7, 8), (3, 8)), (S(8,), (3,))], lambda m, F, x, w: F.rms_norm(x, [8], w, eps=1e-5)),
    "rotary_embedding": ([(S(2, 3, 7, 8), (1, 2, 3, 8))],
                         (lambda x: tt.functional.rotary_embedding(x), lambda x: _rope_torch(x))),
    "sdpa_causal": ([(S(2, 2, 7, 4), (1, 2, 3, 4)), (S(2, 2, 7, 4), None), (S(2, 2, 7, 4), (2, 1, 4, 2))],
                    lambda m, F, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
    "sdpa_default_not_causal": ([(S(1, 2, 6, 4), (1, 1, 4, 4)), (S(1, 2, 6, 4), None), (S(1, 2, 6, 4), None)],
                                lambda m, F, q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.7)),
    "batch_norm_train_4d": ([(S(4, 3, 5, 5), (3, 2, 5, 5)), (S(3,), None), (S(3,), None)],
                            lambda m, F, x, w, b: F.batch_norm(x, None, None, w, b, training=True)),
    "batch_norm_train_running": ([(S(6, 4), None), (S(4,), None), (S(4,), None)],
                                 lambda m, F, x, w, b: F.batch_norm(x, m.zeros(4, dtype=m.float64), m.ones(4, dtype=m.float64), w, b, True, 0.3)),
    "conv2d_batch_norm": ([(S(2, 2, 6, 6), None), (S(3, 2, 3, 3), None), (S(3,), None), (S(3,), None)], _conv_bn),
    # -- activations, softmax
    "softmax_last": ([(S(4, 11), (3, 4))], lambda m, F, x: F.softmax(x, dim=-1)),
    "softmax_dim0": ([(S(7, 3, 2), (3, 2, 2))], lambda m, F, x: F.softmax(x, dim=0)),
    "log_softmax": ([(S(3, 9, 4), (2, 4, 3))], lambda m, F, x: F.log_softmax(x, dim=1)),
    "gelu": ([(S(5, 7), (2, 3))], lambda m, F, x: F.gelu(x)),
    "gelu_tanh": ([(S(5, 7), (2, 3))], lambda m, F, x: F.gelu(x, approximate="tanh")),
    "silu": ([(S(5, 7), (3, 4))], lambda m, F, x: F.silu(x)),
    "relu": ([(S(5, 7), (3, 4))], lambda m, F, x: F.relu(x)),
    "tanh": ([(S(5, 7), (3, 4))], lambda m, F, x: m.tanh(x)),
    "sigmoid": ([(S(5, 7), (3, 4))], lambda m, F, x: m.sigmoid(x)),
    "dropout_p0": ([(S(5, 7), (3, 4))], lambda m, F, x: F.dropout(x, p=0.0, training=True)),
    "elementwise_chain": ([(_unit((4, 5), 0.2, 2.0), (3, 2)), (S(4, 5), None)],
                          lambda m, F, x, y: (x.sqrt() * y.exp() - x.log() / (1 + y * y)) ** 2 + x.rsqrt()),
    "broadcast_binary": ([(S(3, 1, 5), (2, 1, 3)), (S(4, 1), None)], lambda m, F, x, y: x * y - y / (x * x + 1)),
    # -- losses
    "cross_entropy_mean_ignore": ([(S(7, 5), (3, 2))],
                                  lambda m, F, x: F.cross_entropy(x, m.tensor(TARGETS))),
    "cross_entropy_sum": ([(S(7, 5), (4, 5))],
                          lambda m, F, x: F.cross_entropy(x, m.tensor(TARGETS), reduction="sum")),
    "cross_entropy_none": ([(S(7, 5), (4, 3))],
                           lambda m, F, x: F.cross_entropy(x, m.tensor(TARGETS), reduction="none")),
    "cross_entropy_ignore_index": ([(S(7, 5), None)],
                                   lambda m, F, x: F.cross_entropy(x, m.tensor(TARGETS % 5), ignore_index=4)),
    "cross_entropy_label_smoothing": ([(S(7, 5), (3, 2))],
                                      lambda m, F, x: F.cross_entropy(x, m.tensor(TARGETS), label_smoothing=0.1)),
    "cross_entropy_label_smoothing_sum": (
        [(S(7, 5), (4, 3))],
        lambda m, F, x: F.cross_entropy(x, m.tensor(TARGETS), reduction="sum", label_smoothing=0.25)),
    "cross_entropy_label_smoothing_none": (
        [(S(7, 5), None)],
        lambda m, F, x: F.cross_entropy(x, m.tensor(TARGETS), reduction="none", label_smoothing=0.2)),
    "cross_entropy_weight_mean": ([(S(7, 5), (3, 2))],
                                  lambda m, F, x: F.cross_entropy(x, m.tensor(TARGETS), weight=m.tensor(CLASS_W))),
    "cross_entropy_weight_sum": ([(S(2, 3, 5), (1, 2, 4))],
                                 lambda m, F, x: F.cross_entropy(x.reshape(6, 5), m.tensor(TARGETS[:6] % 5),
                                                                 m.tensor(CLASS_W), reduction="sum")),
    "cross_entropy_weight_none_smoothing": (
        [(S(7, 5), None)],
        lambda m, F, x: F.cross_entropy(x, m.tensor(TARGETS), weight=m.tensor(CLASS_W), reduction="none",
                                        label_smoothing=0.2)),
    "cross_entropy_weight_mean_smoothing": (
        [(S(7, 5), (4, 3))],
        lambda m, F, x: F.cross_entropy(x, m.tensor(TARGETS), weight=m.tensor(CLASS_W), label_smoothing=0.3)),
    "mse_loss_mean": ([(S(4, 6), (3, 4)), (S(4, 6), None)], lambda m, F, x, y: F.mse_loss(x, y)),
    "mse_loss_sum": ([(S(4, 6), (3, 4)), (S(4, 6), (2, 5))], lambda m, F, x, y: F.mse_loss(x, y, reduction="sum")),
    "mse_loss_none": ([(S(4, 6), None), (S(4, 6), None)], lambda m, F, x, y: F.mse_loss(x, y, reduction="none")),
    "l1_loss_mean": ([(S(4, 6), (3, 4)), (S(4, 6), None)], lambda m, F, x, y: F.l1_loss(x, y)),
    "l1_loss_none": ([(S(4, 6), (3, 4)), (S(4, 6), (3, 4))], lambda m, F, x, y: F.l1_loss(x, y, reduction="none")),
    "bce_with_logits": ([(S(5, 4), (2, 3)), (_unit((5, 4)), None)],
                        lambda m, F, x, t: F.binary_cross_entropy_with_logits(x, t)),
    "bce_with_logits_weights": (
        [(S(5, 4), (3, 4)), (_unit((5, 4)), (3, 4))],
        lambda m, F, x, t: F.binary_cross_entropy_with_logits(
            x, t, weight=m.tensor(_unit(4, 0.5, 2.0, 8)), pos_weight=m.tensor(_unit(4, 0.5, 3.0, 9)), reduction="sum")),
    # -- convolution, pooling
    "conv1d": ([(S(2, 3, 11), (1, 2, 4)), (S(4, 3, 3), None), (S(4,), None)],
               lambda m, F, x, w, b: F.conv1d(x, w, b, stride=2, padding=1)),
    "conv1d_dilated_no_bias": ([(S(2, 2, 9), None), (S(3, 2, 2), None)],
                               lambda m, F, x, w: F.conv1d(x, w, dilation=2)),
    "conv2d": ([(S(2, 3, 7, 6), (1, 2, 4, 3)), (S(4, 3, 3, 3), None), (S(4,), None)],
               lambda m, F, x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=1)),
    "conv2d_groups": ([(S(1, 4, 5, 5), None), (S(6, 2, 2, 3), None)],
                      lambda m, F, x, w: F.conv2d(x, w, groups=2, padding=(1, 0))),
    "max_pool2d": ([(_distinct((2, 3, 6, 6)), (1, 2, 3, 6))], lambda m, F, x: F.max_pool2d(x, 2)),
    "max_pool2d_overlap": ([(_distinct((2, 2, 7, 7)), None)],
                           lambda m, F, x: F.max_pool2d(x, 3, stride=2, padding=1)),
    "avg_pool2d": ([(S(2, 3, 6, 6), (1, 2, 3, 6))], lambda m, F, x: F.avg_pool2d(x, 2)),
    "avg_pool2d_pad": ([(S(2, 2, 7, 5), None)],
                       lambda m, F, x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)),
    "adaptive_avg_pool2d_global": ([(S(2, 3, 5, 7), (1, 2, 3, 4))], lambda m, F, x: F.adaptive_avg_pool2d(x, (1, 1))),
    "adaptive_avg_pool2d": ([(S(2, 2, 6, 4), None)], lambda m, F, x: F.adaptive_avg_pool2d(x, (3, None))),
    "adaptive_avg_pool1d": ([(S(2, 3, 8), (1, 2, 3))], lambda m, F, x: F.adaptive_avg_pool1d(x, 2)),
    # -- reductions
    "sum_all": ([(S(4, 5, 3), (3, 2, 2))], lambda m, F, x: x.sum()),
    "sum_dims_keepdim": ([(S(4, 5, 3), (3, 2, 2))], lambda m, F, x: x.sum(dim=(0, 2), keepdim=True)),
    "mean_dim": ([(S(4, 5, 3), (3, 2, 2))], lambda m, F, x: x.mean(1)),
    "mean_all": ([(S(4, 5), (3, 3))], lambda m, F, x: m.mean(x)),
    "var_dim": ([(S(4, 5, 3), (3, 2, 2))], lambda m, F, x: x.var(dim=1)),
    "var_all_correction0": ([(S(4, 5), (3, 2))], lambda m, F, x: m.var(x, correction=0)),
    "std_dims_keepdim": ([(S(4, 5, 3), (3, 2, 2))], lambda m, F, x: x.std(dim=(0, 2), keepdim=True)),
    "std_all": ([(S(6, 5), (4, 2))], lambda m, F, x: x.std()),
    # -- shapes
    "cat": ([(S(2, 3, 4), (1, 2, 3)), (S(2, 5, 4), (2, 2, 2))], lambda m, F, a, b: m.cat([a, b], dim=1)),
    "stack": ([(S(3, 4), (2, 3)), (S(3, 4), None)], lambda m, F, a, b: m.stack((a, b), dim=1)),
    "split_sizes": ([(S(7, 4), (3, 3))], lambda m, F, x: m.split(x, [2, 4, 1], dim=0)),
    "split_chunks": ([(S(3, 10), (2, 3))], lambda m, F, x: x.split(4, dim=1)),
    "transpose": ([(S(3, 4, 5), (2, 3, 2))], lambda m, F, x: x.transpose(0, 2) * 1.5),
    "permute": ([(S(3, 4, 5), (2, 3, 2))], lambda m, F, x: x.permute(1, 2, 0)),
    "reshape": ([(S(4, 6), (3, 4))], lambda m, F, x: x.reshape(2, 3, 4)),
    "view_heads": ([(S(2, 5, 6), (1, 3, 4))],
                   lambda m, F, x: x.view(2, 5, 2, 3).transpose(1, 2).contiguous().view(2, 2, 15)),
    "getitem_slices": ([(S(5, 6), (2, 4))], lambda m, F, x: x[1:4, ::2]),
    # -- indexing
    "embedding": ([(S(7, 5), (3, 2))], lambda m, F, w: F.embedding(m.tensor(IDS), w)),
    "embedding_padding_idx": ([(S(7, 5), (4, 3))], lambda m, F, w: F.embedding(m.tensor(IDS), w, padding_idx=3)),
    "index_select": ([(S(3, 6), (2, 4))], lambda m, F, x: m.index_select(x, 1, m.tensor(IDX))),
    "gather": ([(S(4, 3), (3, 2))], lambda m, F, x: m.gather(x, 1, m.tensor(GIDX))),
    "scatter_add": ([(S(4, 3), (3, 2)), (S(4, 3), None)],
                    lambda m, F, x, s: m.scatter_add(x, 1, m.tensor(GIDX), s)),
    "where": ([(S(4, 5), (3, 2)), (S(4, 5), None)], lambda m, F, x, y: m.where(m.tensor(MASK), x, y)),
    "where_scalar": ([(S(4, 5), (3, 2))], lambda m, F, x: m.where(m.tensor(MASK), x, 0.5)),
    "masked_fill": ([(S(4, 5), (3, 4))], lambda m, F, x: x.masked_fill(m.tensor(MASK), -2.0)),
    "masked_fill_inf_softmax": ([(S(4, 5), (3, 4))],
                                lambda m, F, x: F.softmax(x.masked_fill(m.tensor(MASK & ~np.eye(4, 5, dtype=bool)),
                                                                        -math.inf), dim=-1)),
}


def _run(m, fn, arrays, tiles):
    if m is tt:
        xs = [tt.from_numpy(np.array(a, order="C"), t).requires_grad_() for a, t in zip(arrays, tiles)]
    else:
        xs = [torch.from_numpy(a.copy()).requires_grad_() for a in arrays]
    out = fn(m, m.nn.functional, *xs) if not isinstance(fn, tuple) else fn[m is torch](*xs)
    return xs, out


@pytest.mark.parametrize("case", list(CASES))
def test_backward_matches_torch(case):
    specs, fn = CASES[case]
    rng = np.random.default_rng(sum(map(ord, case)))
    arrays, tiles = zip(*(_arg(s, rng) for s in specs))
    xs, out = _run(tt, fn, arrays, tiles)
    rxs, rout = _run(torch, fn, arrays, tiles)
    outs, routs = (list(out), list(rout)) if isinstance(out, (tuple, list)) else ([out], [rout])
    assert len(outs) == len(routs)
    for o, r in zip(outs, routs):
        assert o.shape == tuple(r.shape), case
        np.testing.assert_allclose(o.detach().numpy(), r.detach().numpy(), rtol=RTOL, atol=ATOL, err_msg=f"{case}: forward")
    ups = [rng.standard_normal(tuple(r.shape)) for r in routs]
    if len(outs) == 1:
        outs[0].backward(tt.from_numpy(np.array(ups[0], order="C")))
        routs[0].backward(torch.from_numpy(ups[0]))
    else:  # several outputs (split): one scalar, sum_i <out_i, up_i>
        sum(tt.sum(o * tt.from_numpy(u)) for o, u in zip(outs, ups)).backward()
        sum(torch.sum(r * torch.from_numpy(u)) for r, u in zip(routs, ups)).backward()
    for i, (x, r) in enumerate(zip(xs, rxs)):
        assert x.grad is not None, f"{case}: input {i} got no gradient"
        np.testing.assert_allclose(x.grad.numpy(), r.grad.numpy(), rtol=RTOL, atol=ATOL,
                                   err_msg=f"{case}: gradient of input {i}")
