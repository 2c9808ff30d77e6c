"""Double backward (tiletrain.autograd.grad / backward with create_graph=True) against torch,
float64: for every op with a differentiable backward form, the gradient of a function of the
op (grad_outputs u) and then the gradient of <gradient, v> (a Hessian-vector product), rtol
1e-9.  Each case ends in a cube of the op's output so that the gradient reaching the op's
rule depends on the inputs (its differentiable form is what the second pass goes through)."""
import numpy as np
import pytest
import torch

import tiletrain as tt
import tiletrain.autograd
from tiletrain.ops.autograd import backward_rule, record

RTOL, ATOL = 1e-9, 1e-12


def _cube(m, y):
    return y * y * y


def _abs(m, x):
    """|x|; torch's reference is x * sign(x), the same function with the same derivatives away
    from 0 (torch's own abs/l1_loss double backward imports torch._dynamo: 10 s)."""
    return m.abs(x) if m is tt else x * m.sign(x)


def _sdpa(m, F, q, k, v, causal=False, prefix=False):
    """scaled_dot_product_attention; torch's reference written out where tiletrain takes
    what torch's fused kernels do not differentiate twice (a key/value prefix, grouped heads)."""
    Tq, Tk = q.shape[2], k.shape[2]
    if m is tt:
        mask = F.causal_lower_right(Tq, Tk) if prefix else None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                              enable_gqa=k.shape[1] != q.shape[1])
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    s = q @ k.transpose(-1, -2) / q.shape[3] ** 0.5
    if causal or prefix:
        s = s.masked_fill(torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq).logical_not(), float("-inf"))
    return torch.softmax(s, -1) @ v


def _rope(m, F, x, theta=10000.0, offset=0):
    """Rotary embedding; torch's reference: Hugging Face Llama's rotate-half form (float32
    angles, as transformers computes them)."""
    if m is tt:
        return F.rotary_embedding(x, theta, offset)
    D, T = x.shape[3], x.shape[2]
    inv = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float) / D)
    ang = (torch.arange(offset, offset + T).float()[:, None] * inv).double()
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    return x * cos + torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1) * sin


def _split(m, F, x, n_head, part=0, nparts=1):
    if m is tt:
        return F.split_heads(x, n_head, part, nparts)
    B, T, W = x.shape
    C = W // nparts
    return x[..., part * C:(part + 1) * C].reshape(B, T, n_head, C // n_head).transpose(1, 2)


def _merge(m, F, y):
    return F.merge_heads(y) if m is tt else y.transpose(1, 2).reshape(y.shape[0], y.shape[2], -1)


# a CSR pattern (11 x 7, 24 entries, an empty row; blocks of 4 x 3 with smaller last blocks)
_D = (np.random.default_rng(11).random((11, 7)) < 0.3) & ~np.eye(11, 7, -4, dtype=bool)
_D[3] = False
_ROWS, _COLS = np.nonzero(_D)


def _csr_mm(m, F, values, x):
    """A(values) @ x; torch's reference: the dense matrix of the values (torch's CSR product
    has no double backward)."""
    if m is tt:
        crow = np.concatenate([[0], np.cumsum(_D.sum(1))])
        return tt.sparse.mm(tt.sparse_csr_tensor(crow, _COLS, values, _D.shape, blocks=(4, 3)), x)
    dense = torch.zeros(_D.shape, dtype=torch.float64).index_put((torch.tensor(_ROWS), torch.tensor(_COLS)), values)
    return dense @ x


# name: (f(m, F, *inputs), [(shape, tiles, kind)], cube the output)
# kind: "n" normal, "p" positive, "a" away from 0 (abs, relu kinks), "q" multiples of 1/8, "t" ties
CASES = {
    "add_broadcast": (lambda m, F, a, b: a + b, [((4, 3), (3, 2), "n"), ((3,), (2,), "n")]),
    "add_scalar_alpha": (lambda m, F, a, b: m.add(a, b, alpha=2.5) + 1.5, [((4, 3), (2, 3), "n"), ((4, 3), (2, 3), "n")]),
    "sub_broadcast": (lambda m, F, a, b: a - b, [((2, 4, 3), (1, 3, 2), "n"), ((4, 1), (2, 1), "n")]),
    "rsub_scalar": (lambda m, F, a: 2.0 - a, [((5,), (2,), "n")]),
    "mul_broadcast": (lambda m, F, a, b: a * b, [((4, 3), (3, 2), "n"), ((1, 3), (1, 2), "n")]),
    "mul_scalar": (lambda m, F, a: 3.0 * a * 0.5, [((5,), (2,), "n")]),
    "div": (lambda m, F, a, b: a / b, [((4, 3), (3, 2), "n"), ((4, 3), (3, 2), "p")]),
    "div_scalar": (lambda m, F, a: a / 3.0, [((5,), (2,), "n")]),
    "rdiv_scalar": (lambda m, F, a: 2.0 / a, [((5,), (2,), "p")]),
    "neg": (lambda m, F, a: -a, [((5,), (2,), "n")]),
    "square": (lambda m, F, a: a ** 2, [((5,), (2,), "n")]),
    "pow_scalar": (lambda m, F, a: a ** 3.5, [((5,), (2,), "p")]),
    "pow_sqrt_recip": (lambda m, F, a: a ** 0.5 + a ** -1.0, [((5,), (2,), "p")]),
    "rpow_scalar": (lambda m, F, a: 2.0 ** a, [((5,), (2,), "n")]),
    "pow_tensor": (lambda m, F, a, b: m.pow(a, b), [((4, 3), (2, 2), "p"), ((4, 3), (2, 2), "n")]),
    "exp": (lambda m, F, a: m.exp(a), [((5,), (2,), "n")]),
    "log": (lambda m, F, a: m.log(a), [((5,), (2,), "p")]),
    "sqrt": (lambda m, F, a: m.sqrt(a), [((5,), (2,), "p")]),
    "rsqrt": (lambda m, F, a: m.rsqrt(a), [((5,), (2,), "p")]),
    "abs": (lambda m, F, a: _abs(m, a), [((5,), (2,), "a")]),
    "sin_cos": (lambda m, F, a: m.sin(a) * m.cos(a), [((5,), (2,), "n")]),
    "tanh": (lambda m, F, a: m.tanh(a), [((5,), (2,), "n")]),
    "asin_acos_atan": (lambda m, F, a: m.asin(a / (1 + a * a)) * m.acos(a / (2 + a * a)) + m.atan(a),
                       [((5,), (2,), "n")]),
    "erfinv_erfc": (lambda m, F, a: m.erfinv(a / (1 + a * a)) + m.erfc(a), [((5,), (2,), "n")]),
    "atan2_broadcast": (lambda m, F, a, b: m.atan2(a, b), [((4, 3), (3, 2), "n"), ((3,), (2,), "n")]),
    "lgamma_digamma_polygamma": (lambda m, F, a: m.lgamma(a) + m.digamma(a) * m.polygamma(2, a), [((5,), (2,), "p")]),
    "bessel_i_erfcx": (lambda m, F, a: m.i0(a) * m.special.i1(a) + m.special.i0e(a) * m.special.i1e(a)
                       + m.special.erfcx(a), [((5,), (2,), "n")]),
    "sigmoid": (lambda m, F, a: m.sigmoid(a), [((5,), (2,), "n")]),
    "relu": (lambda m, F, a: F.relu(a), [((6,), (4,), "a")]),
    "gelu_erf": (lambda m, F, a: F.gelu(a), [((6,), (4,), "n")]),
    "gelu_tanh": (lambda m, F, a: F.gelu(a, approximate="tanh"), [((6,), (4,), "n")]),
    "silu": (lambda m, F, a: F.silu(a), [((6,), (4,), "n")]),
    "clamp": (lambda m, F, a: m.clamp(a, -0.5, 0.7), [((6,), (4,), "a")]),
    "maximum_minimum": (lambda m, F, a, b: m.maximum(a, b) * m.minimum(a, b) + m.maximum(a, b),
                        [((4, 3), (2, 2), "n"), ((4, 3), (2, 2), "n")]),
    "where": (lambda m, F, a, b: m.where(a > 0.1, a * b, b), [((4, 3), (2, 2), "n"), ((4, 3), (2, 2), "n")]),
    "masked_fill": (lambda m, F, a: (a * a).masked_fill(a < 0.0, 2.0), [((4, 3), (2, 2), "n")]),
    "sum_all": (lambda m, F, a: (a * a).sum(), [((4, 3), (3, 2), "n")]),
    "sum_dim": (lambda m, F, a: (a * a).sum(dim=1), [((4, 3, 2), (3, 2, 2), "n")]),
    "mean_dims_keepdim": (lambda m, F, a: (a * a).mean(dim=(0, 2), keepdim=True), [((4, 3, 2), (3, 2, 2), "n")]),
    "mean_all": (lambda m, F, a: (a * a * a).mean(), [((4, 3), (3, 2), "n")]),
    "reshape_view": (lambda m, F, a: a.reshape(3, 4).view(2, 6), [((4, 3), (3, 2), "n")]),
    "transpose_permute": (lambda m, F, a: a.transpose(0, 1).permute(2, 0, 1), [((2, 3, 4), (1, 2, 3), "n")]),
    "getitem_cat": (lambda m, F, a, b: m.cat([a[1:3], b], dim=0), [((4, 3), (3, 2), "n"), ((2, 3), (2, 3), "n")]),
    "getitem_tile_view_stack": (lambda m, F, a: m.stack([a[2:4], a[0:2, :]], dim=1), [((4, 3), (2, 3), "n")]),
    "split_chunk_flatten": (lambda m, F, a: a.split(2, dim=1)[1] * a.chunk(2, dim=0)[0][:, :1].flatten().sum(),
                            [((4, 3), (2, 2), "n")]),
    "astype": (lambda m, F, a: a.to(m.float32).to(m.float64), [((5,), (2,), "q")]),
    "expand_unsqueeze": (lambda m, F, a: a.unsqueeze(0).expand(3, 4, 2).squeeze(), [((4, 2), (3, 2), "n")]),
    "matmul": (lambda m, F, a, b: a @ b, [((4, 3), (3, 2), "n"), ((3, 5), (2, 5), "n")]),
    "einsum_tril": (lambda m, F, a, b: m.tril(m.einsum("ij,jk->ik", a, b)), [((4, 3), (3, 2), "n"), ((3, 4), (2, 4), "n")]),
    "index_select_add": (lambda m, F, a, b: m.index_add(m.index_select(a, 1, m.tensor([2, 0, 2, 1])), 0,
                                                           m.tensor([1, 1, 3]), b, alpha=0.5),
                         [((4, 3), (3, 2), "n"), ((3, 4), (2, 3), "n")]),
    "index_tensor_and_list": (lambda m, F, a: m.cat([a[m.tensor([0, 2, 2])], a[[1, 3], :]], dim=0),
                              [((4, 3), (3, 2), "n")]),
    "matmul_batched": (lambda m, F, a, b: m.matmul(a, b), [((2, 4, 3), (1, 3, 2), "n"), ((3, 2), (2, 2), "n")]),
    "linear_bias": (lambda m, F, x, w, b: F.linear(x, w, b), [((4, 3), (3, 2), "n"), ((5, 3), (2, 2), "n"),
                                                              ((5,), (2,), "n")]),
    "mse_loss": (lambda m, F, a, b: F.mse_loss(a * a, b), [((4, 3), (3, 2), "n"), ((4, 3), (3, 2), "n")]),
    "softmax": (lambda m, F, a: F.softmax(a, dim=-1), [((3, 5), (2, 3), "n")]),
    "softmax_dim0": (lambda m, F, a: F.softmax(a, dim=0), [((3, 5), (2, 3), "n")]),
    "log_softmax": (lambda m, F, a: F.log_softmax(a, dim=1), [((3, 5), (2, 3), "n")]),
    "layer_norm": (lambda m, F, x, w, b: F.layer_norm(x, (4,), w, b), [((3, 4), (2, 4), "n"), ((4,), (4,), "n"),
                                                                       ((4,), (4,), "n")]),
    "layer_norm_no_affine": (lambda m, F, x: F.layer_norm(x, (4,)), [((3, 4), (2, 4), "n")]),
    "rms_norm": (lambda m, F, x, w: F.rms_norm(x, (4,), w, eps=1e-6), [((3, 4), (2, 4), "n"), ((4,), (4,), "n")]),
    "var_std": (lambda m, F, a: a.var(dim=(0, 2)) + a.std(dim=1, keepdim=True).sum(), [((4, 3, 2), (3, 2, 2), "n")]),
    "amax_amin_max": (lambda m, F, a: a.amax(dim=1) * a.max() + a.amin(dim=0).sum(), [((4, 3), (3, 2), "n")]),
    "bce_with_logits": (lambda m, F, a, b: F.binary_cross_entropy_with_logits(
        a, b, reduction="sum", pos_weight=m.tensor([1.5, 0.5, 2.0], dtype=m.float64)),
        [((4, 3), (3, 2), "a"), ((4, 3), (3, 2), "n")]),
    "logsumexp": (lambda m, F, a: m.logsumexp(a, dim=(1, 2)), [((3, 4, 2), (2, 3, 2), "n")]),
    "norm_2_and_3": (lambda m, F, a: a.norm(2, dim=1) * m.norm(a, 3.0, dim=1), [((4, 3), (3, 2), "a")]),
    "norm_inf": (lambda m, F, a: a.norm(float("inf"), dim=1) + (a * a).norm(float("-inf")) if m is tt
                 else _abs(m, a).amax(dim=1) + _abs(m, a * a).amin(), [((4, 3), (3, 2), "a")]),
    "l1_loss": (lambda m, F, a, b: F.l1_loss(a * a, b, reduction="sum") if m is tt else _abs(m, a * a - b).sum(),
                [((4, 3), (3, 2), "n"), ((4, 3), (3, 2), "n")]),
    # convolution, pooling, batch norm (odd tilings: batch, channel and spatial axes split)
    "conv1d_stride_pad": (lambda m, F, x, w, b: F.conv1d(x, w, b, stride=2, padding=1),
                          [((2, 3, 7), (1, 3, 4), "n"), ((4, 3, 3), (2, 3, 3), "n"), ((4,), (3,), "n")]),
    "conv2d_groups_dilation": (lambda m, F, x, w, b: F.conv2d(x, w, b, padding=1, dilation=(1, 2), groups=2),
                               [((2, 4, 5, 6), (1, 2, 3, 4), "n"), ((6, 2, 3, 2), (6, 2, 3, 2), "n"),
                                ((6,), (6,), "n")]),
    "conv2d_same": (lambda m, F, x, w: F.conv2d(x, w, padding="same"), [((1, 2, 5, 4), (1, 2, 3, 4), "n"),
                                                                        ((3, 2, 2, 3), (3, 2, 2, 3), "n")]),
    "conv3d": (lambda m, F, x, w: F.conv3d(x, w, stride=(1, 2, 1)), [((2, 2, 4, 4, 3), (1, 2, 2, 4, 3), "n"),
                                                                     ((3, 2, 2, 2, 2), (3, 2, 2, 2, 2), "n")]),
    "max_pool2d": (lambda m, F, x: F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True), [((2, 3, 7, 6), (1, 2, 4, 3), "n")]),
    "max_pool1d_dilated_ties": (lambda m, F, x: F.max_pool1d(x, 3, stride=1, dilation=2) * x.sum()
                                + F.max_pool1d(x * x, 2)[..., :4], [((2, 2, 8), (1, 2, 5), "t")]),
    "max_pool3d": (lambda m, F, x: F.max_pool3d(x, (2, 2, 1), stride=(2, 1, 1)), [((1, 2, 4, 3, 3), (1, 2, 2, 3, 2), "n")]),
    "avg_pool2d": (lambda m, F, x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
                   [((2, 3, 7, 6), (1, 2, 4, 3), "n")]),
    "avg_pool1d_adaptive": (lambda m, F, x: F.avg_pool1d(x, 2) * F.adaptive_avg_pool1d(x, 4)
                            + F.adaptive_avg_pool1d(x, 1), [((2, 3, 8), (1, 3, 3), "n")]),
    "batch_norm_train": (lambda m, F, x, w, b: F.batch_norm(x, m.zeros(3, dtype=m.float64), m.ones(3, dtype=m.float64),
                                                            w, b, training=True, eps=1e-3),
                         [((4, 3, 2, 3), (3, 2, 2, 2), "n"), ((3,), (2,), "n"), ((3,), (3,), "n")]),
    "batch_norm_train_no_affine": (lambda m, F, x: F.batch_norm(x, None, None, training=True),
                                   [((5, 3, 4), (2, 3, 3), "n")]),
    "batch_norm_eval": (lambda m, F, x, w, b: F.batch_norm(x, m.tensor([0.5, -1.0, 0.2], dtype=m.float64),
                                                           m.tensor([2.0, 0.5, 1.5], dtype=m.float64), w, b),
                        [((4, 3, 5), (3, 2, 2), "n"), ((3,), (3,), "n"), ((3,), (3,), "n")]),
    # attention
    "sdpa": (lambda m, F, q, k, v: _sdpa(m, F, q, k, v), [((2, 2, 5, 3), (1, 1, 3, 3), "n")] * 3),
    "sdpa_causal": (lambda m, F, q, k, v: _sdpa(m, F, q, k, v, causal=True), [((1, 3, 6, 4), (1, 2, 4, 2), "n")] * 3),
    "sdpa_prefix_gqa": (lambda m, F, q, k, v: _sdpa(m, F, q, k, v, prefix=True),
                        [((1, 4, 3, 2), (1, 2, 2, 2), "n"), ((1, 2, 5, 2), (1, 1, 3, 2), "n"),
                         ((1, 2, 5, 2), (1, 2, 2, 2), "n")]),
    "rotary_embedding": (lambda m, F, x: _rope(m, F, x * x, 500.0, offset=3), [((2, 2, 5, 6), (1, 2, 3, 4), "n")]),
    "split_merge_heads": (lambda m, F, x: _merge(m, F, _split(m, F, x, 3) * _split(m, F, x, 3)),
                          [((2, 5, 12), (1, 3, 5), "n")]),
    "split_heads_qkv": (lambda m, F, x: _merge(m, F, _split(m, F, x, 2, 0, 3) * _split(m, F, x, 2, 2, 3)
                                               + _split(m, F, x, 2, 1, 3)),
                        [((2, 3, 12), (1, 2, 2), "n")]),
    # index ops (indices smaller than the input off dim, repeats)
    "gather": (lambda m, F, a: m.gather(a * a, 1, m.tensor([[0, 4, 4], [1, 1, 0], [3, 2, 0]])),
               [((4, 5), (3, 2), "n")]),
    "scatter_add": (lambda m, F, a, b: m.scatter_add(a, 0, m.tensor([[3, 0, 3], [3, 1, 0]]), b * b),
                    [((4, 3), (3, 2), "n"), ((2, 3), (1, 2), "n")]),
    "scatter": (lambda m, F, a, b: m.scatter(a * a, 1, m.tensor([[2, 0], [1, 3], [0, 2]]), b * a[:, :2]),
                [((3, 4), (2, 3), "n"), ((3, 2), (2, 1), "n")]),
    "scatter_reduce_sum_mean": (lambda m, F, a, b: m.scatter_reduce(a, 0, m.tensor([[1, 0, 1], [1, 1, 0]]), b * b,
                                                                    "sum", include_self=False)
                                * m.scatter_reduce(a, 0, m.tensor([[2, 0, 1], [2, 2, 0]]), b, "mean"),
                                [((3, 3), (2, 2), "n"), ((2, 3), (1, 2), "n")]),
    "scatter_reduce_amax_amin": (lambda m, F, a, b: m.scatter_reduce(a, 1, m.tensor([[1, 0, 1], [2, 2, 0]]), b * b,
                                                                     "amax")
                                 + m.scatter_reduce(a * a, 1, m.tensor([[1, 1, 1], [0, 2, 0]]), b, "amin",
                                                    include_self=False),
                                 [((2, 4), (1, 3), "n"), ((2, 3), (2, 2), "n")]),
    "max_min_dim": (lambda m, F, a: m.max(a * a, dim=1).values * m.min(a, dim=0, keepdim=True).values.sum(),
                    [((4, 3), (3, 2), "n")]),
    "sparse_csr_mm": (lambda m, F, v, x: _csr_mm(m, F, v * v, x), [((len(_ROWS),), (7,), "n"), ((7, 5), (4, 2), "n")]),
}


def _array(rng, shape, kind):
    a = rng.standard_normal(shape)
    if kind == "p":
        return np.abs(a) + 0.5
    if kind == "q":  # values exact in float32, whose cubes are too
        return np.round(a * 8) / 8
    if kind == "t":  # few values: ties in every window (the gradient goes to the first maximum)
        return rng.integers(-2, 3, shape) / 2.0
    if kind == "a":
        return np.where(np.abs(a) < 0.1, 0.3, a)
    return a


def _both(fn, arrays, tiles, cube=True):
    """(tiletrain inputs, output), (torch inputs, output)."""
    xs = [tt.from_numpy(a, t) for a, t in zip(arrays, tiles)]
    for x in xs:
        x.requires_grad = True
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y, yt = fn(tt, tt.nn.functional, *xs), fn(torch, torch.nn.functional, *ts)
    if cube:
        y, yt = _cube(tt, y), _cube(torch, yt)
    return (xs, y), (ts, yt)


def _close(got, want, what):
    got = np.zeros(want.shape) if got is None else got.detach().numpy()
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=what)


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")   # torch's note on its own padding copy
@pytest.mark.parametrize("name", sorted(CASES))
def test_second_derivative_against_torch(name):
    fn, specs = CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    arrays = [_array(rng, s, k) for s, _, k in specs]
    (xs, y), (ts, yt) = _both(fn, arrays, [t for _, t, _ in specs])
    u = rng.standard_normal(yt.shape)
    vs = [rng.standard_normal(a.shape) for a in arrays]
    gs = tt.autograd.grad(y, xs, grad_outputs=tt.from_numpy(u), create_graph=True)
    gts = torch.autograd.grad(yt, ts, grad_outputs=torch.tensor(u), create_graph=True)
    for i, (g, gt) in enumerate(zip(gs, gts)):
        _close(g, gt.detach().numpy(), f"{name}: gradient of input {i}")
    s = sum((g * tt.from_numpy(v, g.tiles)).sum() for g, v in zip(gs, vs))
    st = sum((gt * torch.tensor(v)).sum() for gt, v in zip(gts, vs))
    hs = tt.autograd.grad(s, xs, allow_unused=True)
    hts = torch.autograd.grad(st, ts, allow_unused=True)
    for i, (h, ht) in enumerate(zip(hs, hts)):
        _close(h, np.zeros(arrays[i].shape) if ht is None else ht.numpy(), f"{name}: Hessian-vector product, input {i}")


@pytest.mark.parametrize("reduction,ignore", [("mean", -100), ("mean", 2), ("sum", 2), ("none", 2)])
def test_cross_entropy_second_derivative(reduction, ignore):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((5, 4))
    target = np.array([0, 2, 3, 1, 2])
    x = tt.from_numpy(a, (2, 3))
    x.requires_grad = True
    xt = torch.tensor(a, requires_grad=True)
    y = tt.functional.cross_entropy(x * x, tt.from_numpy(target), ignore_index=ignore, reduction=reduction)
    yt = torch.nn.functional.cross_entropy(xt * xt, torch.tensor(target), ignore_index=ignore, reduction=reduction)
    u = rng.standard_normal(yt.shape)
    (g,) = tt.autograd.grad(y, x, tt.from_numpy(u) if u.ndim else None, create_graph=True)
    (gt,) = torch.autograd.grad(yt, xt, torch.tensor(u) if u.ndim else None, create_graph=True)
    _close(g, gt.detach().numpy(), "gradient")
    v = rng.standard_normal(a.shape)
    (h,) = tt.autograd.grad((g * tt.from_numpy(v, g.tiles)).sum(), x)
    (ht,) = torch.autograd.grad((gt * torch.tensor(v)).sum(), xt)
    _close(h, ht.numpy(), "Hessian-vector product")


def test_affine_gelu_epilogue_second_derivative():
    """The fused linear + GELU (affine with gelu=, one node) against torch's gelu(linear)."""
    from tiletrain.ops.activations import affine
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((4, 3)), rng.standard_normal((5, 3)), rng.standard_normal(5)]
    for approx in ("none", "tanh"):
        xs = [tt.from_numpy(a, t) for a, t in zip(arrays, [(2, 3), (5, 3), (5,)])]
        for x in xs:
            x.requires_grad = True
        ts = [torch.tensor(a, requires_grad=True) for a in arrays]
        y = affine(xs[0], xs[1], xs[2], transposed=True, gelu=approx)
        assert y.grad_fn.name() == "AffineGeluBackward0"
        y = y * y
        yt = torch.nn.functional.gelu(torch.nn.functional.linear(*ts), approximate=approx) ** 2
        gs = tt.autograd.grad(y.sum(), xs, create_graph=True)
        gts = torch.autograd.grad(yt.sum(), ts, create_graph=True)
        s = sum((g * g).sum() for g in gs)
        st = sum((g * g).sum() for g in gts)
        for h, ht in zip(tt.autograd.grad(s, xs), torch.autograd.grad(st, ts)):
            _close(h, ht.numpy(), f"affine gelu={approx}")


def test_third_derivative_of_a_unary_chain():
    a = np.array([0.3, -1.2, 0.8, 2.0])
    x = tt.from_numpy(a, (3,))
    x.requires_grad = True
    xt = torch.tensor(a, requires_grad=True)
    y, yt = tt.functional.gelu(tt.tanh(x) * x).sum(), torch.nn.functional.gelu(torch.tanh(xt) * xt).sum()
    for _ in range(3):
        (y,) = tt.autograd.grad(y, x, create_graph=True)
        (yt,) = torch.autograd.grad(yt, xt, create_graph=True)
        _close(y, yt.detach().numpy(), "derivative")
        y, yt = y.sum(), yt.sum()


def _leaf(a, tiles=None):
    x = tt.from_numpy(np.asarray(a, dtype=np.float64), tiles)
    x.requires_grad = True
    return x


def test_grad_returns_a_tuple_and_leaves_grad_alone():
    x, w = _leaf([1.0, 2.0, 3.0]), _leaf([0.5, -1.0, 2.0])
    y = (x * w).sum()
    gx, gw = tt.autograd.grad(y, [x, w])
    np.testing.assert_array_equal(gx.numpy(), [0.5, -1.0, 2.0])
    np.testing.assert_array_equal(gw.numpy(), [1.0, 2.0, 3.0])
    assert x.grad is None and w.grad is None
    assert not gx.requires_grad  # create_graph=False: no graph
    assert isinstance(tt.autograd.grad((x * x).sum(), x), tuple)


def test_grad_of_a_non_leaf_input_and_an_output_input():
    x = _leaf([1.0, 2.0])
    h = x * x
    y = (h * 3.0).sum()
    (gh,) = tt.autograd.grad(y, h, retain_graph=True)
    np.testing.assert_array_equal(gh.numpy(), [3.0, 3.0])
    gx, gy = tt.autograd.grad(y, [x, y])
    np.testing.assert_array_equal(gx.numpy(), [6.0, 12.0])
    assert gy.numpy() == 1.0


def test_allow_unused():
    x, z = _leaf([1.0, 2.0]), _leaf([3.0])
    y = (x * x).sum()
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph.*allow_unused=True"):
        tt.autograd.grad(y, [x, z], retain_graph=True)
    gx, gz = tt.autograd.grad(y, [x, z], allow_unused=True, retain_graph=True)
    assert gz is None
    np.testing.assert_array_equal(gx.numpy(), [2.0, 4.0])
    gx, gz = tt.autograd.grad(y, [x, z], materialize_grads=True)
    np.testing.assert_array_equal(gz.numpy(), [0.0])


def test_retain_graph_and_released_graph():
    x = _leaf([1.0, 2.0])
    y = (tt.exp(x) * x).sum()
    tt.autograd.grad(y, x, retain_graph=True)
    (g,) = tt.autograd.grad(y, x)  # retain_graph default False (create_graph False): released now
    np.testing.assert_allclose(g.numpy(), np.exp([1.0, 2.0]) * (1.0 + np.array([1.0, 2.0])), rtol=1e-12)
    with pytest.raises(RuntimeError, match="already released.*retain_graph=True"):
        tt.autograd.grad(y, x)
    with pytest.raises(RuntimeError, match="already released"):
        y.backward()
    # create_graph=True retains by default; backward(retain_graph=True) twice accumulates
    y2 = (x * x).sum()
    y2.backward(retain_graph=True)
    y2.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 8.0])
    with pytest.raises(RuntimeError, match="already released"):
        y2.backward()


def test_grad_bad_arguments():
    x = _leaf([1.0, 2.0])
    c = tt.from_numpy(np.ones(2))
    with pytest.raises(RuntimeError, match="does not require grad"):
        tt.autograd.grad((x * 2.0).sum(), c)
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad"):
        tt.autograd.grad(c.sum(), x)
    with pytest.raises(RuntimeError, match="implicitly created only for scalar outputs"):
        tt.autograd.grad(x * 2.0, x)
    with pytest.raises(TypeError, match="inputs"):
        tt.autograd.grad((x * 2.0).sum(), [x, 3])


@backward_rule("double_backward_test_op")
def _first_order_only_bwd(node, g):
    return (g * 2.0,)


def _first_order_only(t):
    """2 t by an op with a first-order backward rule only (every op of tiletrain has a
    differentiable form; this one is the test's)."""
    with tt.no_grad():
        y = t * 2.0
    return record("double_backward_test_op", y, (t,))


def test_uncovered_op_raises_not_implemented():
    x = _leaf([1.0, -2.0, 3.0])
    with pytest.raises(NotImplementedError,
                       match="double backward through op 'double_backward_test_op' is not implemented"):
        tt.autograd.grad((_first_order_only(x * x) * x).sum(), x, create_graph=True)
    (g,) = tt.autograd.grad(_first_order_only(x * x).sum(), x)  # first order is fine
    np.testing.assert_array_equal(g.numpy(), [4.0, -8.0, 12.0])
    y = _first_order_only(x).sum() * x.sum()
    with pytest.raises(NotImplementedError, match="'double_backward_test_op'"):
        y.backward(create_graph=True)
    assert x.grad is None  # nothing accumulated


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")  # torch's reference-cycle note
def test_backward_create_graph_accumulates_grad_with_a_graph():
    a = np.array([0.5, -1.0, 2.0])
    x = _leaf(a)
    xt = torch.tensor(a, requires_grad=True)
    (x * x * x).sum().backward(create_graph=True)
    (xt * xt * xt).sum().backward(create_graph=True)
    assert x.grad.requires_grad and x.grad.grad_fn is not None
    np.testing.assert_allclose(x.grad.detach().numpy(), xt.grad.detach().numpy(), rtol=RTOL)
    (tt.sin(x)).sum().backward(create_graph=True)   # accumulates: .grad = .grad + new, with a graph
    torch.sin(xt).sum().backward(create_graph=True)
    np.testing.assert_allclose(x.grad.detach().numpy(), xt.grad.detach().numpy(), rtol=RTOL)
    (h,) = tt.autograd.grad(x.grad.sum(), x)
    (ht,) = torch.autograd.grad(xt.grad.sum(), xt)
    np.testing.assert_allclose(h.numpy(), ht.numpy(), rtol=RTOL)
    # the graph was kept (retain_graph defaults to create_graph): another pass works
    x.grad = None
    g0 = tt.autograd.grad((x * x).sum(), x, create_graph=True)[0]
    g0.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])


def test_autograd_backward_several_tensors():
    x = _leaf([1.0, 2.0])
    tt.autograd.backward([(x * x).sum(), (x * 3.0).sum()])
    np.testing.assert_array_equal(x.grad.numpy(), [5.0, 7.0])


def test_grad_runs_only_the_nodes_that_lead_to_the_inputs():
    """An op without a double backward on a branch that does not lead to the inputs is not
    run (torch computes only what the inputs need)."""
    x, w = _leaf([1.0, 2.0]), _leaf([3.0, -1.0, 0.5])
    y = _first_order_only(w).sum() * (x * x * x).sum()
    (g,) = tt.autograd.grad(y, x, create_graph=True)
    np.testing.assert_array_equal(g.detach().numpy(), [15.0, 60.0])
    gx, gw = tt.autograd.grad(g.sum(), [x, w], allow_unused=True)
    np.testing.assert_array_equal(gx.numpy(), [30.0, 60.0])
    np.testing.assert_array_equal(gw.numpy(), [30.0, 30.0, 30.0])   # through the op's first-order rule
    assert w.grad is None and x.grad is None


def test_embedding_second_derivative():
    rng = np.random.default_rng(5)
    table, ids = rng.standard_normal((6, 4)), np.array([[1, 4, 1], [0, 5, 2]])
    w = tt.from_numpy(table, (4, 2)).requires_grad_()
    wt = torch.tensor(table, requires_grad=True)
    y = tt.functional.embedding(tt.from_numpy(ids, (1, 2)), w) ** 3
    yt = torch.nn.functional.embedding(torch.tensor(ids), wt) ** 3
    u = rng.standard_normal(yt.shape)
    (g,) = tt.autograd.grad(y, w, tt.from_numpy(u, y.tiles), create_graph=True)
    (gt,) = torch.autograd.grad(yt, wt, torch.tensor(u), create_graph=True)
    _close(g, gt.detach().numpy(), "gradient")
    v = rng.standard_normal(table.shape)
    (h,) = tt.autograd.grad((g * tt.from_numpy(v, g.tiles)).sum(), w)
    (ht,) = torch.autograd.grad((gt * torch.tensor(v)).sum(), wt)
    _close(h, ht.numpy(), "Hessian-vector product")


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_checkpoint_second_derivative_against_torch():
    """grad(create_graph=True) and backward(create_graph=True) through activation
    checkpointing: the checkpointed functions are recomputed with a graph joined to the
    enclosing one (several outputs, a nested checkpoint, a weight read inside the function
    without being an argument), against torch without checkpointing."""
    from tiletrain.utils.checkpoint import checkpoint
    rng = np.random.default_rng(9)
    a, w = rng.standard_normal((4, 3)), rng.standard_normal((3, 5))

    def model(m, F, x, W, ck):
        def block(x):
            h = F.gelu(m.matmul(x, W))
            return h * h, m.tanh(h) * x.sum()
        y1, y2 = ck(block, x * x)
        y3 = ck(lambda y: ck(lambda z: m.sin(z) * z, y) * y, y2)
        return (y1 ** 3).sum() + (y3 * y3).sum()

    x, W = _leaf(a, (3, 2)), _leaf(w, (2, 3))
    xt, wt = torch.tensor(a, requires_grad=True), torch.tensor(w, requires_grad=True)
    gs = tt.autograd.grad(model(tt, tt.functional, x, W, checkpoint), [x, W], create_graph=True)
    gts = torch.autograd.grad(model(torch, torch.nn.functional, xt, wt, lambda f, *a: f(*a)), [xt, wt],
                              create_graph=True)
    for g, gt in zip(gs, gts):
        _close(g, gt.detach().numpy(), "gradient")
    s = (gs[0] * gs[0]).sum() + (gs[1] * tt.sin(W)).sum()
    st = (gts[0] * gts[0]).sum() + (gts[1] * torch.sin(wt)).sum()
    for h, ht in zip(tt.autograd.grad(s, [x, W]), torch.autograd.grad(st, [xt, wt])):
        _close(h, ht.numpy(), "Hessian-vector product")
    # backward(create_graph=True): .grad with a graph through the recomputed functions
    model(tt, tt.functional, x, W, checkpoint).backward(create_graph=True)
    model(torch, torch.nn.functional, xt, wt, lambda f, *a: f(*a)).backward(create_graph=True)
    _close(W.grad, wt.grad.detach().numpy(), "W.grad")
    (h,) = tt.autograd.grad(x.grad.sum(), x)
    (ht,) = torch.autograd.grad(xt.grad.sum(), xt)
    _close(h, ht.numpy(), "gradient of x.grad")


def test_checkpoint_grad_after_backward_released():
    from tiletrain.utils.checkpoint import checkpoint
    x = _leaf([0.5, -1.0, 2.0])
    y = checkpoint(lambda t: tt.sin(t) * t, x * x).sum()
    y.backward(retain_graph=True)   # the recompute's backward drops the function's arguments
    with pytest.raises(RuntimeError, match="arguments were released by an earlier backward"):
        tt.autograd.grad(y, x)
    z = checkpoint(lambda t: tt.sin(t) * t, x * x).sum()
    (g,) = tt.autograd.grad(z, x, retain_graph=True)   # first order through the rebuilt graph
    z.backward()                                        # and the ordinary backward afterwards
    a = np.array([0.5, -1.0, 2.0])
    want = (np.cos(a * a) * a * a + np.sin(a * a)) * 2 * a
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), 2 * want, rtol=1e-12)   # (the first backward's too)
