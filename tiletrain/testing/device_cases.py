"""Op and training-step cases shared by the device tests (tests/hetero/): each case builds
tensors from a seeded generator, runs public ops (forward and backward) and returns named
results, so that the same case can run with every kernel placed on one worker kind
(``placed(kinds)``) and be compared with the CPU-only run."""
import contextlib

import numpy as np

import tiletrain as tt
import tiletrain.functional as F
from tiletrain.ops.activations import affine  # x @ w + b, w (in, out): GPT-2's layout
from tiletrain.ops.elementwise import BINARY_OPS  # same-layout ops with the kernels' alpha, beta
from tiletrain.ops.softmax import cross_entropy_last  # (..., V) logits of a language model
from tiletrain.runtime.hetero import prefer
from tiletrain.utils.checkpoint import checkpoint


def placed(kinds):
    """prefer(kinds), or no preference for None (the scheduler mixes the kinds)"""
    return prefer(kinds) if kinds else contextlib.nullcontext()


# ---- op cases: name -> fn(rng, dtype) -> {result name: Tensor} ----
CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def _t(rng, shape, tiles, dtype, grad=False, scale=1.0, shift=0.0):
    t = tt.from_numpy((rng.standard_normal(shape) * scale + shift).astype(dtype), tiles)
    return t.requires_grad_() if grad else t


def _weighted_backward(y, rng):
    """backward of sum(y * g) for a fixed random g (so every gradient entry is exercised)"""
    g = tt.from_numpy(rng.standard_normal(y.shape).astype(y.dtype), y.tiles)
    tt.sum(tt.mul(y, g)).backward()


@case
def elementwise(rng, dt):
    x = _t(rng, (11, 7), (4, 3), dt)
    y = _t(rng, (11, 7), (4, 3), dt, shift=3.0)  # away from 0 for div
    z = tt.zeros((11, 7), tiles=(4, 3), dtype=dt)
    tt.ops.axpy_(z, x, alpha=0.5, beta=0.0)
    tt.ops.axpy_(z, y, alpha=2.0, beta=1.0)
    w = tt.full((11, 7), 1.5, tiles=(4, 3), dtype=dt)
    tt.ops.axpy_(w, x, alpha=1.0, beta=-0.5)
    return dict(add=BINARY_OPS["add"](x, y, alpha=2.0, beta=-0.5), sub=tt.sub(x, y),
                mul=BINARY_OPS["mul"](x, y, alpha=3.0),
                div=tt.div(x, y), scale=tt.scale(x, -1.25), add_scalar=tt.add_scalar(x, 2.0, alpha=0.5),
                rdiv=tt.rdiv_scalar(2.0, y), neg=tt.neg(x), copy=tt.copy(x),
                full=tt.full((5, 3), 2.5, tiles=(2, 2), dtype=dt),
                axpy=z, axpy_beta=w)


@case
def creation(rng, dt):
    """random tensors (the random kernel; keyed by element index, so any worker gives the same values)"""
    g = tt.Generator().manual_seed(int(rng.integers(2**31)))
    return dict(rand=tt.rand((5, 4, 6), generator=g, dtype=dt, tiles=(2, 3, 4)),
                randn=tt.randn((11, 7), generator=g, dtype=dt, tiles=(4, 3)),
                randint=tt.randint(-5, 9, (11, 7), generator=g, tiles=(4, 3)))


@case
def elementwise_math(rng, dt):
    """Every row of the element-wise op table forward and backward, comparisons, where,
    masked_fill, broadcasting (region_copy) and division by a number."""
    x = _t(rng, (11, 7), (4, 3), dt, grad=True)
    p = tt.from_numpy((np.abs(rng.standard_normal((11, 7))) + 0.5).astype(dt), (4, 3)).requires_grad_()
    row = _t(rng, (7,), (2,), dt, grad=True)
    mask = x > 0.3
    outs = dict(exp=tt.exp(x), log=tt.log(p), sqrt=tt.sqrt(p), rsqrt=tt.rsqrt(p), abs=tt.abs(x), sign=tt.sign(x),
                sin=tt.sin(x), cos=tt.cos(x), tanh=tt.tanh(x), sigmoid=tt.sigmoid(x), clamp=tt.clamp(x, -0.5, 0.5),
                pow_scalar=p ** 1.5, rpow_scalar=1.7 ** x, maximum=tt.maximum(x, row), minimum=tt.minimum(x, row),
                pow=tt.pow(p, x), where=tt.where(mask, x, row), masked_fill=x.masked_fill(x < -0.2, 2.0),
                div_scalar=x / 3.0, broadcast=x * row)
    for name, y in list(outs.items()):
        _weighted_backward(y, rng)
    outs.update(dx=x.grad, dp=p.grad, drow=row.grad,
                compare=tt.where(x >= row, 1.0, 0.0 * x.detach()), compare_scalar=tt.where(mask, 1.0, 0.0 * x.detach()),
                logical=tt.where((mask & (x < 0.9)) | ~(x > 0) ^ mask, 1.0, 0.0 * x.detach()))
    return outs


@case
def inverse_trig(rng, dt):
    """asin, acos, atan, atan2 (broadcast), erfinv and erfc (its tail too), forward and backward."""
    u = tt.from_numpy((np.tanh(rng.standard_normal((11, 7))) * 0.95).astype(dt), (4, 3)).requires_grad_()
    x = _t(rng, (11, 7), (4, 3), dt, grad=True, scale=3.0)
    b = _t(rng, (7,), (3,), dt, grad=True)
    outs = dict(asin=tt.asin(u), acos=tt.acos(u), atan=tt.atan(x), atan2=tt.atan2(x, b), erfinv=tt.erfinv(u),
                erfc=tt.erfc(x))
    for y in list(outs.values()):
        _weighted_backward(y, rng)
    return dict(outs, du=u.grad, dx=x.grad, db=b.grad)


@case
def special_functions(rng, dt):
    """lgamma, digamma, polygamma, i0/i0e/i1/i1e, erfcx (forward and backward), igamma/igammac
    and zeta (and their gradients in the second argument)."""
    p = tt.from_numpy((np.abs(rng.standard_normal((11, 7))) * 3 + 0.2).astype(dt), (4, 3)).requires_grad_()
    x = _t(rng, (11, 7), (4, 3), dt, grad=True, scale=3.0)
    a = tt.from_numpy((np.abs(rng.standard_normal((11, 7))) * 4 + 0.3).astype(dt), (4, 3))
    outs = dict(lgamma=tt.lgamma(p), digamma=tt.digamma(p), polygamma=tt.polygamma(2, p), i0=tt.i0(x),
                i0e=tt.special.i0e(x), i1=tt.special.i1(x), i1e=tt.special.i1e(x), erfcx=tt.special.erfcx(x),
                igamma=tt.igamma(a, p), igammac=tt.igammac(a, p), zeta=tt.special.zeta(a + 1.5, p))
    for y in list(outs.values()):
        _weighted_backward(y, rng)
    return dict(outs, dp=p.grad, dx=x.grad)


@case
def torch_activations(rng, dt):
    """The activation and rounding rows of the element-wise table (leaky_relu, elu/selu/celu,
    softplus, hardtanh/relu6, hardsigmoid, hardswish, log1p, expm1, erf, floor/ceil/round/trunc),
    forward and backward."""
    x = _t(rng, (11, 7), (4, 3), dt, grad=True, scale=3.0)
    p = tt.from_numpy((np.abs(rng.standard_normal((11, 7))) + 0.5).astype(dt), (4, 3)).requires_grad_()
    outs = dict(leaky_relu=F.leaky_relu(x, 0.2), elu=F.elu(x, 0.7), selu=F.selu(x), celu=F.celu(x, 0.5),
                softplus=F.softplus(x, 2.0, 4.0), hardtanh=F.hardtanh(x, -0.5, 0.8), relu6=F.relu6(x),
                hardsigmoid=F.hardsigmoid(x), hardswish=F.hardswish(x), log1p=tt.log1p(p), expm1=tt.expm1(x),
                erf=tt.erf(x), floor=tt.floor(x), ceil=tt.ceil(x), round=tt.round(x), trunc=tt.trunc(x))
    for y in list(outs.values()):
        _weighted_backward(y, rng)
    return dict(outs, dx=x.grad, dp=p.grad)


@case
def reductions(rng, dt):
    x = _t(rng, (5, 4, 6), (2, 3, 4), dt)
    b = _t(rng, (5, 6), (2, 4), dt)
    return dict(sum0=tt.sum(x, dim=0), sum1=tt.sum(x, dim=1) * 0.5, sum2=tt.sum(x, dim=2),
                sum01=tt.sum(x, dim=(0, 1)), sum_all=tt.sum(x), max1=tt.amax(x, dim=1), max2=tt.amax(x, dim=2),
                add_bcast=tt.add_broadcast(x, b, 1, alpha=2.0, beta=0.5),
                bcast=tt.broadcast(b, x.traits, 1, alpha=3.0))


@case
def torch_reductions(rng, dt):
    """tiletrain/ops/reduce.py and the losses, forward and backward (every reduction kernel)."""
    x = _t(rng, (5, 4, 6), (2, 3, 4), dt, grad=True)
    t = _t(rng, (5, 4, 6), (2, 3, 4), dt, grad=True)
    v, i = tt.max(x, 1, keepdim=True)
    outs = dict(amin=tt.amin(x, (0, 2)), max_v=v, max_i=i, argmin=tt.argmin(x), var=tt.var(x, (0, 2)),
                std=tt.std(x, 1), lse=tt.logsumexp(x, (1, 2)), norm3=tt.norm(x, 3.0, 0), norm2=tt.norm(x),
                mse=F.mse_loss(x, t), l1=F.l1_loss(x, t, reduction="sum"),
                bce=F.binary_cross_entropy_with_logits(x, t, reduction="none"))
    loss = tt.sum(outs["bce"]) + outs["mse"] + outs["l1"] + tt.sum(outs["var"]) + tt.sum(outs["std"])
    for k in ("amin", "max_v", "lse", "norm3", "norm2"):
        loss = loss + tt.sum(outs[k])
    loss.backward()
    return dict(outs, loss=loss, dx=x.grad, dt=t.grad)


@case
def matmul(rng, dt):
    a = _t(rng, (11, 7), (4, 3), dt)
    b = _t(rng, (7, 9), (3, 4), dt)
    at = _t(rng, (7, 11), (3, 4), dt)
    bt = _t(rng, (9, 7), (4, 3), dt)
    a3 = _t(rng, (3, 5, 7), (2, 2, 3), dt)
    b3 = _t(rng, (3, 7, 6), (2, 3, 4), dt)
    x3 = _t(rng, (3, 5, 7), (2, 2, 3), dt)
    return dict(ab=tt.matmul(a, b), atb=tt.matmul(at, b, transpose_a=True), abt=tt.matmul(a, bt, transpose_b=True),
                batched=tt.matmul(a3, b3), flat=tt.matmul(a3, b), leading=tt.ops.matmul_leading(a3, x3))


@case
def activations(rng, dt):
    out = {}
    for name, fn in (("gelu", lambda x: F.gelu(x)), ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
                     ("relu", F.relu), ("silu", F.silu), ("dropout", lambda x: F.dropout(x, p=0.3, seed=11))):
        x = _t(rng, (6, 10), (4, 4), dt, grad=True)
        y = fn(x)
        _weighted_backward(y, rng)
        out[name], out[name + "_grad"] = y, x.grad
    return out


@case
def norms(rng, dt):
    out = {}
    x = _t(rng, (3, 5, 12), (2, 3, 5), dt, grad=True, shift=0.5)
    w = _t(rng, (12,), (5,), dt, grad=True, shift=1.0)
    b = _t(rng, (12,), (5,), dt, grad=True)
    y = F.layer_norm(x, x.shape[-1:], w, b)
    _weighted_backward(y, rng)
    out.update(ln=y, ln_dx=x.grad, ln_dw=w.grad, ln_db=b.grad)
    x = _t(rng, (3, 5, 12), (2, 3, 5), dt, grad=True, shift=0.5)
    w = _t(rng, (12,), (5,), dt, grad=True, shift=1.0)
    y = F.rms_norm(x, x.shape[-1:], w, 1e-6)
    _weighted_backward(y, rng)
    out.update(rms=y, rms_dx=x.grad, rms_dw=w.grad)
    return out


@case
def fused(rng, dt):
    """The fused kernels: a linear layer's chains with a bias (gemm_bias, then gemm), GELU
    epilogues (gemm_gelu at the end of a chain of 3 with a backward: c becomes gelu'; and as a
    chain's only task without one), whole-row norms (layer_norm_row, rms_norm_row) and the
    decode-time residual add + norm (add_layer_norm_row, add_rms_norm_row)."""
    x = _t(rng, (2, 5, 12), (1, 3, 5), dt, grad=True)  # `in` = 12 in 3 tiles: chains of 3 tasks
    w = _t(rng, (12, 10), (5, 4), dt, grad=True)
    b = _t(rng, (10,), (4,), dt, grad=True)
    y = affine(x, w, b)
    h = affine(x, w, b, gelu="tanh")
    _weighted_backward(y, rng)
    _weighted_backward(h, rng)
    out = dict(affine=y, affine_gelu=h, affine_dx=x.grad, affine_dw=w.grad, affine_db=b.grad)
    w1 = _t(rng, (12, 6), (12, 3), dt)  # `in` in one tile: one gemm_gelu task per output tile
    b1 = _t(rng, (6,), (3,), dt)
    out["affine_gelu_erf"] = affine(x.detach(), w1, b1, gelu="none")
    xr = _t(rng, (3, 5, 12), (2, 3, 12), dt, grad=True, shift=0.5)  # whole rows per tile
    lw, lb = _t(rng, (12,), (12,), dt, grad=True, shift=1.0), _t(rng, (12,), (12,), dt, grad=True)
    ln, rms = F.layer_norm(xr, xr.shape[-1:], lw, lb), F.rms_norm(xr, xr.shape[-1:], lw, 1e-6)
    _weighted_backward(ln, rng)
    _weighted_backward(rms, rng)
    out.update(ln_row=ln, rms_row=rms, row_dx=xr.grad, row_dw=lw.grad, row_db=lb.grad)
    xa, ra = _t(rng, (3, 5, 12), (2, 3, 12), dt), _t(rng, (3, 5, 12), (2, 3, 12), dt)
    s, y = F.add_layer_norm(xa, ra, lw.detach(), lb.detach())
    s2, y2 = F.add_rms_norm(xa, ra, lw.detach())
    out.update(add_ln_s=s, add_ln=y, add_rms_s=s2, add_rms=y2)
    return out


@case
def softmax(rng, dt):
    out = {}
    for name, fn, dim in (("softmax", F.softmax, -1), ("log_softmax", F.log_softmax, -1),
                          ("softmax_dim1", F.softmax, 1)):
        x = _t(rng, (4, 3, 13), (3, 2, 5), dt, grad=True, scale=3.0)
        y = fn(x, dim=dim)
        _weighted_backward(y, rng)
        out[name], out[name + "_grad"] = y, x.grad
    x = _t(rng, (4, 6, 13), (3, 4, 5), dt, grad=True, scale=3.0)
    tgt = rng.integers(0, 13, (4, 6))
    tgt[1, 2] = -100
    loss = cross_entropy_last(x, tt.from_numpy(tgt, (3, 4)))
    loss.backward()
    out.update(ce=loss, ce_grad=x.grad)
    return out


@case
def embedding(rng, dt):
    ids = tt.from_numpy(rng.integers(0, 11, (3, 7)), (2, 4))
    table = _t(rng, (11, 6), (4, 4), dt, grad=True)
    y = F.embedding(ids, table)
    _weighted_backward(y, rng)
    return dict(emb=y, emb_grad=table.grad)


@case
def attention(rng, dt):
    out = {}
    for causal in (True, False):
        qkv = _t(rng, (2, 7, 3 * 8), (1, 3, 4), dt, grad=True)  # C = 8, 2 heads of 4
        q, k, v = (F.split_heads(qkv, 2, part=i, nparts=3) for i in range(3))
        y = F.merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        _weighted_backward(y, rng)
        out[f"attn_{causal}"], out[f"attn_grad_{causal}"] = y, qkv.grad
    return out


@case
def llama_attention(rng, dt):
    """Rotary embeddings and grouped-query attention (4 query heads share 2 key/value heads)."""
    q = _t(rng, (2, 4, 7, 4), (1, 2, 3, 4), dt, grad=True)
    kv = _t(rng, (2, 2, 7, 4), (1, 1, 3, 4), dt, grad=True)
    rq, rk = F.rotary_embedding(q, 10000.0), F.rotary_embedding(kv, 10000.0)
    y = F.scaled_dot_product_attention(rq, rk, kv, is_causal=True, enable_gqa=True)
    _weighted_backward(y, rng)
    return dict(rope=rq, gqa=y, gqa_dq=q.grad, gqa_dkv=kv.grad)


@case
def prefix_attention(rng, dt):
    """Causal attention of 5 queries over 9 keys (a key/value prefix of 4: causal_lower_right)."""
    q = _t(rng, (2, 2, 5, 4), (1, 2, 3, 4), dt, grad=True)
    kv = _t(rng, (2, 1, 9, 4), (1, 1, 3, 4), dt, grad=True)
    y = F.scaled_dot_product_attention(q, kv, kv, attn_mask=F.causal_lower_right(5, 9), enable_gqa=True)
    _weighted_backward(y, rng)
    return dict(prefix=y, prefix_dq=q.grad, prefix_dkv=kv.grad)


@case
def recompute(rng, dt):
    """A checkpointed function: its recomputation waits for the output gradient (`after`)."""
    x = _t(rng, (6, 5), (4, 3), dt, grad=True)
    h = tt.scale(x, 0.5)  # an activation (computed by an op), as checkpointed blocks take
    y = checkpoint(lambda a: tt.mul(tt.tanh(a), a), h)
    _weighted_backward(y, rng)
    return dict(checkpointed=y, checkpointed_grad=x.grad)


@case
def optimizers(rng, dt):
    out = {}
    p1 = _t(rng, (9, 5), (4, 2), dt, grad=True)
    p2 = _t(rng, (5,), (2,), dt, grad=True)
    opt = tt.optim.AdamW([p1, p2], lr=0.1, weight_decay=0.1)
    sgd_p = _t(rng, (9, 5), (4, 2), dt, grad=True)
    sgd = tt.optim.SGD([sgd_p], lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
    plain_p = _t(rng, (7,), (3,), dt, grad=True)
    plain = tt.optim.SGD([plain_p], lr=0.1, weight_decay=0.01)
    comp_p = _t(rng, (9, 5), (4, 2), dt, grad=True)  # pipelined backpropagation's AdamW (adamw_comp)
    comp = tt.optim.AdamW([comp_p], lr=0.1, weight_decay=0.1, compensation="sc+lwp", delay=2)
    opts = (opt, sgd, plain, comp)
    for step in range(2):
        for o in opts:
            o.zero_grad()
        _weighted_backward(tt.add(p1, tt.broadcast(p2, p1.traits, 0)), rng)
        _weighted_backward(sgd_p, rng)
        _weighted_backward(plain_p, rng)
        _weighted_backward(comp_p, rng)
        norm = tt.optim.clip_grad_norm_([p1, p2], 0.5)
        for o in opts:
            o.step()
        out[f"norm{step}"] = norm
    out.update(p1=p1, p2=p2, sgd=sgd_p, plain=plain_p, comp=comp_p, comp_predicted=comp.predict()[0])
    return out


@case
def cnn3d_spatial(rng, dt):
    """conv3d (stride 2, dilation), batch norm, max and avg pools on activations tiled along
    D/H/W (halo windows, negative window padding, region_add scatters), forward and backward."""
    x = _t(rng, (2, 2, 7, 6, 5), (1, 2, 3, 4, 3), dt, grad=True)
    w = _t(rng, (3, 2, 3, 2, 3), (3, 2, 3, 2, 3), dt, grad=True, scale=0.3)
    b = _t(rng, (3,), (3,), dt, grad=True)
    gw, gb = _t(rng, (3,), (3,), dt, grad=True, shift=1.0), _t(rng, (3,), (3,), dt, grad=True)
    y = F.conv3d(x, w, b, stride=(2, 1, 1), padding=1, dilation=(1, 2, 1))
    z = F.batch_norm(y, None, None, gw, gb, training=True)
    m = F.max_pool3d(z, 2, 1, 1)
    a = F.avg_pool3d(m, 3, 2, 1, ceil_mode=True, count_include_pad=False)
    out = dict(y=y, z=z, m=m, a=a)
    _weighted_backward(a, rng)
    out.update(dx=x.grad, dw=w.grad, db=b.grad, dgw=gw.grad, dgb=gb.grad)
    return out


@case
def graph_ops(rng, dt):
    """index_select, gather, scatter_add, scatter_reduce (mean without self: the counting
    scatter) and a CSR sparse-dense product with gradients for X and A's values (int64
    index tensors), forward and backward."""
    x = _t(rng, (9, 5), (4, 3), dt, grad=True)
    sel = tt.index_select(x, 0, tt.from_numpy(np.array([3, 0, 8, 3, 5, 1], np.int64), (4,)))
    gi = tt.from_numpy(rng.integers(0, 9, (6, 5)).astype(np.int64), (4, 3))
    g = tt.gather(x, 0, gi)
    src = _t(rng, (6, 5), (4, 3), dt, grad=True)
    sa = tt.scatter_add(tt.zeros((9, 5), tiles=(4, 3), dtype=dt), 0, gi, src)
    sr = tt.scatter_reduce(x, 0, gi, src, "mean", include_self=False)
    vals = tt.from_numpy(rng.standard_normal(6).astype(dt)).requires_grad_()
    A = tt.sparse_csr_tensor(np.array([0, 2, 3, 3, 6]), np.array([0, 4, 2, 1, 3, 8]), vals, (4, 9), blocks=(2, 4))
    p = A @ x
    for y in (sel, g, sa, sr, p):
        _weighted_backward(y, rng)
    return dict(sel=sel, g=g, sa=sa, sr=sr, p=p, dx=x.grad, dsrc=src.grad, dvals=vals.grad)


# ---- training steps: (losses, parameters) after a few optimizer steps, float32 ----
F32 = np.float32


def _param(rng, shape, tiles, scale=0.3, shift=0.0):
    return tt.from_numpy((rng.standard_normal(shape) * scale + shift).astype(F32), tiles).requires_grad_()


def mlp_steps(kinds, steps=3):
    """A two-layer MLP, linear + gelu + linear, sum loss, AdamW."""
    rng = np.random.default_rng(0)
    with placed(kinds):
        x = tt.from_numpy(rng.standard_normal((12, 10)).astype(F32), (5, 4))
        w1, b1 = _param(rng, (10, 16), (4, 8)), _param(rng, (16,), 8)
        w2, b2 = _param(rng, (16, 6), (8, 3)), _param(rng, (6,), 3)
        params = [w1, b1, w2, b2]
        opt = tt.optim.AdamW(params, lr=1e-2, weight_decay=0.01)
        losses = []
        for _ in range(steps):
            opt.zero_grad()
            y = affine(F.gelu(affine(x, w1, b1)), w2, b2)
            loss = tt.sum(y)
            loss.backward()
            opt.step()
            losses.append(float(loss))
        return losses, [p.numpy(force=True) for p in params]


def block_lm_loss(ids, targets, wte, ln_w, ln_b, w_qkv, w1, b1, w2, n_head):
    """A small pre-LN transformer block with a tied LM head and cross-entropy: embedding,
    layer norm, fused q|k|v projection, causal attention, tanh-GELU MLP (shared with
    tests/ops/test_memory.py, which checks that its activations are freed)."""
    x = F.embedding(ids, wte)                                        # (B, T, C)
    qkv = affine(F.layer_norm(x, x.shape[-1:], ln_w, ln_b), w_qkv)
    q, k, v = (F.split_heads(qkv, n_head, part=i, nparts=3) for i in range(3))
    x = x + F.merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True))
    h = F.gelu(affine(x, w1, b1), approximate="tanh")
    y = affine(h, w2) + x
    return cross_entropy_last(tt.matmul(y, wte, transpose_b=True), targets)  # tied LM head


def gpt_steps(kinds, steps=2):
    """A small GPT block: embedding, layer norm, causal attention, MLP, tied LM head,
    cross-entropy, gradient clipping, AdamW."""
    rng = np.random.default_rng(1)
    B, T, C, V, H = 2, 8, 16, 11, 2
    with placed(kinds):
        ids = tt.from_numpy(rng.integers(0, V, (B, T)), (1, 4))
        targets = tt.from_numpy(rng.integers(0, V, (B, T)), (1, 4))
        wte = _param(rng, (V, C), (V, 8), scale=0.1)
        ln_w, ln_b = _param(rng, (C,), 8, 0.1, 1.0), _param(rng, (C,), 8, 0.1)
        w_qkv = _param(rng, (C, 3 * C), (8, 8), scale=0.1)
        w1, b1 = _param(rng, (C, 32), (8, 16), scale=0.1), _param(rng, (32,), 16, scale=0.1)
        w2 = _param(rng, (32, C), (16, 8), scale=0.1)
        params = [wte, ln_w, ln_b, w_qkv, w1, b1, w2]
        opt = tt.optim.AdamW(params, lr=3e-3, weight_decay=0.1)
        losses = []
        for _ in range(steps):
            opt.zero_grad()
            loss = block_lm_loss(ids, targets, *params, n_head=H)
            loss.backward()
            tt.optim.clip_grad_norm_(params, 1.0)
            opt.step()
            losses.append(float(loss))
        return losses, [p.numpy(force=True) for p in params]


def run_case(name, dtype, kinds):
    """Run op case `name` with its kernels placed on `kinds` and read its results back."""
    rng = np.random.default_rng(3)
    with placed(kinds):
        res = CASES[name](rng, dtype)
        return {k: v.numpy(force=True) for k, v in res.items()}


TRAINING = {"mlp": mlp_steps, "gpt_block": gpt_steps}
