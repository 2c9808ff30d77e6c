"""Head split/merge and flash attention against NumPy: forward over tile grids with one
tile, an even grid and a smaller last tile (T not divisible by its tile), causal and not,
float32 and float64; VJP checks in float64; the kernel bodies on every block kind; bad
input rejected before anything is submitted."""
import numpy as np
import pytest

import tiletrain as tt
import tiletrain.functional as F
from conftest import FLOATS
from tiletrain._ffi import lib
from tiletrain.testing.gradcheck import vjp_check
from tiletrain.testing.references import run_cpu_kernel
from tiletrain.testing.references_attention import _ATTN_BLOCKS, ATTN_MULTI_BLOCKS, REFERENCES


def attn_tol(dtype):
    return dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)


def ref_attention(q, k, v, causal, scale=None):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = scale * q @ np.swapaxes(k, -1, -2)
    if causal:
        T = q.shape[-2]
        s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return p @ v, p


def ref_attention_grads(q, k, v, do, causal, scale=None):
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    o, p = ref_attention(q, k, v, causal, scale)
    dv = np.swapaxes(p, -1, -2) @ do
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    return scale * ds @ k, scale * np.swapaxes(ds, -1, -2) @ q, dv


def _ntasks(kernel):
    return lib.tt_kernel_ntasks(kernel)


# (B, H, T, D), tiles: one tile; an even grid; T not divisible by its tile and smaller last
# tiles along B and H; one query row per tile; a single tile along T with several heads
ATTN_GRIDS = [
    ((1, 2, 5, 4), (1, 2, 5, 4)),
    ((2, 2, 8, 3), (1, 1, 4, 3)),
    ((3, 3, 7, 4), (2, 2, 3, 4)),
    ((1, 1, 5, 2), (1, 1, 1, 2)),
    ((2, 3, 6, 5), (2, 3, 6, 5)),
    ((1, 2, 9, 4), (1, 2, 4, 4)),
]


def _qkv(rng, shape, dtype):
    return [rng.standard_normal(shape).astype(dtype) for _ in range(3)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape,tiles", ATTN_GRIDS)
def test_attention_forward(rng, shape, tiles, causal, dtype):
    q, k, v = _qkv(rng, shape, dtype)
    Q, K, V = (tt.from_numpy(a, tiles) for a in (q, k, v))
    out = F.scaled_dot_product_attention(Q, K, V, is_causal=causal)
    assert out.shape == shape and out.tiles == Q.tiles and out.dtype == dtype
    np.testing.assert_allclose(out.numpy(), ref_attention(q, k, v, causal)[0], **attn_tol(dtype))


def test_attention_defaults_aliases_and_scale(rng):
    shape, tiles = (1, 2, 7, 4), (1, 1, 3, 4)
    q, k, v = _qkv(rng, shape, np.float64)
    Q, K, V = (tt.from_numpy(a, tiles) for a in (q, k, v))
    t = attn_tol(np.float64)
    causal, full = ref_attention(q, k, v, True)[0], ref_attention(q, k, v, False)[0]
    assert np.abs(causal - full).max() > 1e-3  # the mask matters on these inputs
    np.testing.assert_allclose(F.scaled_dot_product_attention(Q, K, V).numpy(), full, **t)  # torch's default
    np.testing.assert_allclose(F.scaled_dot_product_attention(Q, K, V, causal=True).numpy(), causal, **t)
    np.testing.assert_allclose(F.scaled_dot_product_attention(Q, K, V, causal=False).numpy(), full, **t)
    np.testing.assert_allclose(F.scaled_dot_product_attention(Q, K, V, None, 0.0, False).numpy(), full, **t)
    np.testing.assert_allclose(F.scaled_dot_product_attention(Q, K, V, is_causal=True, scale=0.3).numpy(),
                               ref_attention(q, k, v, True, 0.3)[0], **t)


def test_attention_large_scores_are_stable(rng):
    """Scores of several hundred: the online softmax must not overflow in float32."""
    shape, tiles = (1, 1, 9, 4), (1, 1, 4, 4)
    q, k, v = _qkv(rng, shape, np.float32)
    q *= 60.0
    Q, K, V = (tt.from_numpy(a, tiles) for a in (q, k, v))
    out = F.scaled_dot_product_attention(Q, K, V, is_causal=False).numpy()
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, ref_attention(q, k, v, False)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("causal", [True, False])
def test_attention_tasks_per_tile_pair(rng, causal):
    """One task per (query tile, key tile) pair; causal skips the tiles above the diagonal."""
    shape, tiles = (2, 2, 7, 3), (1, 2, 3, 3)  # 2 batch-head tiles x 3 time tiles
    Q, K, V = (tt.from_numpy(a, tiles) for a in _qkv(rng, shape, np.float64))
    for t in (Q, K, V):
        t.requires_grad_()
    tt.wait()
    fwd0, norm0, bwd0 = (_ntasks(k) for k in (lib.TT_K_ATTN_FWD, lib.TT_K_ATTN_FWD_NORM, lib.TT_K_ATTN_BWD))
    out = F.scaled_dot_product_attention(Q, K, V, is_causal=causal)
    pairs = 2 * (6 if causal else 9)
    assert _ntasks(lib.TT_K_ATTN_FWD) - fwd0 == pairs
    assert _ntasks(lib.TT_K_ATTN_FWD_NORM) - norm0 == 2 * 3
    out.backward(tt.ones(shape, tiles=tiles, dtype=np.float64))
    assert _ntasks(lib.TT_K_ATTN_BWD) - bwd0 == pairs
    tt.wait()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape,tiles", [((1, 2, 5, 3), (1, 2, 5, 3)), ((2, 3, 7, 4), (1, 2, 3, 4)),
                                         ((1, 1, 8, 2), (1, 1, 2, 2))])
def test_attention_gradients_against_numpy(rng, shape, tiles, causal, dtype):
    q, k, v = _qkv(rng, shape, dtype)
    do = rng.standard_normal(shape).astype(dtype)
    Q, K, V = (tt.from_numpy(a, tiles).requires_grad_() for a in (q, k, v))
    F.scaled_dot_product_attention(Q, K, V, is_causal=causal).backward(tt.from_numpy(do, tiles))
    for got, exp in zip((Q.grad, K.grad, V.grad), ref_attention_grads(q, k, v, do, causal)):
        assert got.dtype == dtype and got.tiles == Q.tiles
        np.testing.assert_allclose(got.numpy(), exp, **attn_tol(dtype))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape,tiles", [((1, 2, 4, 3), (1, 2, 4, 3)), ((2, 2, 5, 3), (1, 1, 2, 3))])
def test_vjp_attention(rng, shape, tiles, causal):
    q, k, v = _qkv(rng, shape, np.float64)
    vjp_check(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=causal, scale=0.8),
              [q, k, v], [tiles] * 3)


def test_vjp_attention_one_input_needs_grad(rng):
    shape, tiles = (1, 1, 5, 2), (1, 1, 2, 2)
    q, k, v = _qkv(rng, shape, np.float64)
    K, V = tt.from_numpy(k, tiles), tt.from_numpy(v, tiles)
    vjp_check(lambda a: F.scaled_dot_product_attention(a, K, V, is_causal=True), [q], [tiles])
    Q = tt.from_numpy(q, tiles)
    vjp_check(lambda c: F.scaled_dot_product_attention(Q, K, c, is_causal=False), [v], [tiles])
    vjp_check(lambda a: F.scaled_dot_product_attention(a, a, a, is_causal=True), [q], [tiles])  # one tensor as q, k, v


# -- head split / merge ------------------------------------------------------------------

# (B, T, nparts*C), tiles of x, n_head, nparts
SPLIT_GRIDS = [
    ((2, 3, 12), (2, 3, 12), 4, 1),    # one tile
    ((2, 4, 12), (1, 2, 6), 4, 1),     # even grid
    ((3, 5, 12), (2, 2, 9), 4, 1),     # smaller last tile on every axis (last head tile: 1 head)
    ((2, 5, 36), (1, 3, 6), 4, 3),     # fused q|k|v, two tiles per part
    ((3, 4, 24), (2, 3, 8), 2, 3),     # one tile per part (whole part per tile)
    ((1, 3, 24), (1, 3, 3), 4, 2),     # one head per tile
    ((3, 1, 36), (2, 1, 12), 3, 3),    # one position (a decode step): views, no task
    ((2, 1, 24), (1, 1, 8), 2, 3),     # one position, a part in one tile of its two heads
    ((3, 1, 16), (2, 1, 8), 4, 1),     # one position, one part over two tiles
]


def _np_split(x, n_head, part, nparts):
    B, T, W = x.shape
    C = W // nparts
    return x[..., part * C:(part + 1) * C].reshape(B, T, n_head, C // n_head).transpose(0, 2, 1, 3)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,tiles,n_head,nparts", SPLIT_GRIDS)
def test_split_merge_heads(rng, shape, tiles, n_head, nparts, dtype):
    x = rng.standard_normal(shape).astype(dtype)
    X = tt.from_numpy(x, tiles)
    D = shape[2] // nparts // n_head
    for part in range(nparts):
        Y = F.split_heads(X, n_head, part, nparts)
        assert Y.shape == (shape[0], n_head, shape[1], D)
        assert Y.tiles == (tiles[0], min(tiles[2] // D, n_head), tiles[1], D)
        ref = _np_split(x, n_head, part, nparts)
        np.testing.assert_array_equal(Y.numpy(), ref)
        M = F.merge_heads(Y)
        assert M.shape == (shape[0], shape[1], shape[2] // nparts)
        assert M.tiles == (tiles[0], tiles[1], min(tiles[2], shape[2] // nparts))
        np.testing.assert_array_equal(M.numpy(), x[..., part * M.shape[2]:(part + 1) * M.shape[2]])


@pytest.mark.parametrize("dtype", FLOATS)
def test_merge_heads_smaller_last_head_tile(rng, dtype):
    y = rng.standard_normal((3, 5, 4, 2)).astype(dtype)
    M = F.merge_heads(tt.from_numpy(y, (2, 2, 3, 2)))
    assert M.shape == (3, 4, 10) and M.tiles == (2, 3, 4)
    np.testing.assert_array_equal(M.numpy(), y.transpose(0, 2, 1, 3).reshape(3, 4, 10))
    Y = F.split_heads(M, 5)
    assert Y.tiles == (2, 2, 3, 2)
    np.testing.assert_array_equal(Y.numpy(), y)


@pytest.mark.parametrize("shape,tiles,n_head,nparts", SPLIT_GRIDS)
def test_vjp_split_heads(rng, shape, tiles, n_head, nparts):
    x = rng.standard_normal(shape)
    for part in range(nparts):
        vjp_check(lambda t, part=part: F.split_heads(t, n_head, part, nparts), [x], [tiles])


def test_split_heads_backward_zeros_other_parts(rng):
    x = rng.standard_normal((2, 3, 18))
    X = tt.from_numpy(x, (1, 2, 3)).requires_grad_()
    g = rng.standard_normal((2, 2, 3, 3))
    F.split_heads(X, 2, 1, 3).backward(tt.from_numpy(g, (1, 1, 2, 3)))
    expect = np.zeros_like(x)
    expect[..., 6:12] = g.transpose(0, 2, 1, 3).reshape(2, 3, 6)
    np.testing.assert_array_equal(X.grad.numpy(), expect)


@pytest.mark.parametrize("use", ["all", "two", "twice", "dense_too"])
def test_vjp_split_parts_written_into_a_pending_gradient(rng, use):
    """split_heads' part gradients go straight into a non-leaf input's pending gradient;
    blocks no part wrote are zeroed, a repeated part or a dense contribution still adds."""
    x = rng.standard_normal((2, 5, 3 * 6))

    def f(t):
        h = t * 1.5                                    # a non-leaf: the engine's pending path
        parts = {"all": (0, 1, 2), "two": (2, 0), "twice": (1, 0, 1), "dense_too": (0, 1, 2)}[use]
        ys = [F.merge_heads(F.split_heads(h, 2, p, 3)) * float(i + 1) for i, p in enumerate(parts)]
        out = ys[0]
        for y in ys[1:]:
            out = out + y
        if use == "dense_too":
            return tt.sum(h * h, dim=2) + tt.sum(out, dim=2)
        return out

    vjp_check(f, [x], [(1, 2, 6)])


def test_one_position_split_merge_are_views(rng):
    """T = 1 (a decode step): split_heads and merge_heads share the input's tiles (no task, no
    new tile); values equal the permute tasks', writing through the source shows in the view."""
    from tiletrain.runtime.kernels import kernel_id
    from tiletrain._ffi import lib
    x = rng.standard_normal((3, 1, 36))
    X = tt.from_numpy(x, (2, 1, 12))
    before = [lib.tt_kernel_ntasks(kernel_id(k)) for k in ("heads_split", "heads_merge")]
    parts = [F.split_heads(X, 3, p, 3) for p in range(3)]
    merged = [F.merge_heads(q) for q in parts]
    assert [lib.tt_kernel_ntasks(kernel_id(k)) for k in ("heads_split", "heads_merge")] == before
    assert all(t._base is not None for t in parts + merged)
    for p, (q, m) in enumerate(zip(parts, merged)):
        np.testing.assert_array_equal(q.numpy(), _np_split(x, 3, p, 3))
        np.testing.assert_array_equal(m.numpy(), x[..., 12 * p:12 * (p + 1)])
    with tt.no_grad():  # more than one position: the permute tasks
        Y = F.split_heads(tt.from_numpy(np.concatenate([x, x], 1), (2, 1, 12)), 3, 1, 3)
    assert Y._base is None and lib.tt_kernel_ntasks(kernel_id("heads_split")) > before[0]


def test_vjp_merge_heads(rng):
    y = rng.standard_normal((3, 5, 4, 2))
    vjp_check(F.merge_heads, [y], [(2, 2, 3, 2)])
    vjp_check(F.merge_heads, [y], [(3, 5, 4, 2)])
    vjp_check(F.merge_heads, [y[:, :, :1]], [(2, 2, 1, 2)])  # one position: a view


@pytest.mark.parametrize("causal", [True, False])
def test_vjp_fused_qkv_attention_block(rng, causal):
    """x (B, T, 3C) -> q, k, v heads -> attention -> merge: the three split gradients
    accumulate into x's gradient."""
    n_head = 2
    x = rng.standard_normal((2, 5, 3 * 6))

    def block(t):
        q, k, v = (F.split_heads(t, n_head, p, 3) for p in range(3))
        return F.merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=causal))

    vjp_check(block, [x], [(1, 2, 3)])
    # forward of the same block against NumPy
    q, k, v = (_np_split(x, n_head, p, 3) for p in range(3))
    ref = ref_attention(q, k, v, causal)[0].transpose(0, 2, 1, 3).reshape(2, 5, 6)
    with tt.no_grad():
        np.testing.assert_allclose(block(tt.from_numpy(x, (1, 2, 3))).numpy(), ref, rtol=1e-12, atol=1e-12)


# -- head tiles narrowed for the workers -----------------------------------------------------

def test_parallel_head_tile():
    """The head tile split_heads uses when a backward follows: the largest divisor of the
    natural one that gives the attention as many (batch, head, time) tiles as workers; and
    merge_heads' inverse (the widest tile split_heads narrows to it)."""
    from tiletrain.ops.attention import _merged_head_tile, parallel_head_tile
    from tiletrain.tensors import TensorTraits
    cases = [  # (B, H, T, tiles of the heads without narrowing, workers, head tile)
        ((8, 8, 256), (8, 8, 256), 2, 4),    # one tile: two of 4 heads
        ((8, 8, 256), (8, 8, 256), 4, 2),
        ((8, 8, 256), (8, 8, 256), 16, 1),   # never enough: one head per tile
        ((8, 8, 256), (8, 8, 128), 2, 8),    # two time tiles: already enough
        ((8, 8, 256), (1, 8, 256), 2, 8),    # eight batch tiles
        ((1, 12, 64), (1, 12, 64), 4, 3),
        ((1, 12, 64), (1, 12, 64), 5, 2),    # 6 tiles (12 / 5 heads is not a divisor)
        ((2, 6, 5), (1, 6, 3), 8, 3),        # smaller last tiles along B and T: 2 x 2 x 2
    ]
    for (B, H, T), tiles, workers, want in cases:
        assert parallel_head_tile(B, H, T, tiles, workers) == want, (B, H, T, tiles, workers)
        y = TensorTraits((B, H, T, 4), (tiles[0], want, tiles[2], 4))
        assert _merged_head_tile(y, workers) == tiles[1], (B, H, T, tiles, workers)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("nparts", [1, 3])
def test_one_query_tile_is_split_over_the_workers(rng, nparts, causal):
    """(B, T, C) in one tile and a backward to follow (2 workers): split_heads makes two head
    tiles of 2 heads (two attention tasks each way, both reading the one tile of x) and
    merge_heads writes both into one (B, T, C) tile; results and gradients equal the untiled
    NumPy reference; without gradients nothing is narrowed."""
    from tiletrain.runtime.kernels import kernel_id
    assert lib.tt_nworkers() == 2  # tests/conftest.py: ncpu=2
    B, T, H, D = 2, 5, 4, 3
    C = H * D
    x = rng.standard_normal((B, T, nparts * C))
    X = tt.from_numpy(x, (B, T, C)).requires_grad_()
    if nparts == 1:
        qkv = [F.split_heads(X * s, H) for s in (1.0, 0.5, -1.0)]
        xs = [x * s for s in (1.0, 0.5, -1.0)]
    else:
        qkv = [F.split_heads(X, H, p, 3) for p in range(3)]
        xs = [x[..., p * C:(p + 1) * C] for p in range(3)]
    assert all(t.tiles == (B, 2, T, D) for t in qkv)
    n0 = _ntasks(kernel_id("attn_fwd")), _ntasks(kernel_id("attn_bwd")), _ntasks(kernel_id("heads_merge"))
    o = F.scaled_dot_product_attention(*qkv, is_causal=causal)
    M = F.merge_heads(o)
    assert M.tiles == (B, T, C)
    q, k, v = (a.reshape(B, T, H, D).transpose(0, 2, 1, 3) for a in xs)
    ref = ref_attention(q, k, v, causal)[0]
    np.testing.assert_allclose(M.detach().numpy(), ref.transpose(0, 2, 1, 3).reshape(B, T, C), rtol=1e-12, atol=1e-12)
    do = rng.standard_normal((B, T, C))
    M.backward(tt.from_numpy(do, (B, T, C)))
    n1 = _ntasks(kernel_id("attn_fwd")), _ntasks(kernel_id("attn_bwd")), _ntasks(kernel_id("heads_merge"))
    # 2 attention tasks each way; merges: the output, and (one part) the gradients of x
    assert (n1[0] - n0[0], n1[1] - n0[1]) == (2, 2)
    assert n1[2] - n0[2] == 2 + 3 * 2
    dq, dk, dv = ref_attention_grads(q, k, v, do.reshape(B, T, H, D).transpose(0, 2, 1, 3), causal)
    dq, dk, dv = (d.transpose(0, 2, 1, 3).reshape(B, T, C) for d in (dq, dk, dv))
    want = np.concatenate([dq, dk, dv], axis=-1) if nparts == 3 else dq + 0.5 * dk - dv
    assert X.grad.tiles == (B, T, C)
    np.testing.assert_allclose(X.grad.numpy(), want, rtol=1e-10, atol=1e-12)
    with tt.no_grad():  # inference: not narrowed (a key/value cache keeps the prefill's tiles)
        assert F.split_heads(X, H, 0, nparts).tiles == (B, H, T, D)


def test_vjp_narrowed_heads(rng):
    """The narrowed split/merge in float64: one tile of 4 heads (two of 2 for the attention);
    one of 3 heads (three of 1)."""
    x = rng.standard_normal((1, 3, 3 * 8))
    vjp_check(lambda t: F.merge_heads(F.scaled_dot_product_attention(
        *(F.split_heads(t, 4, p, 3) for p in range(3)))), [x], [(1, 3, 8)])

    def two_parts(t):  # a non-leaf input: two of three parts' gradients written into its pending one
        h = t * 1.5
        return F.merge_heads(F.split_heads(h, 4, 2, 3)) + F.merge_heads(F.split_heads(h, 4, 0, 3))

    vjp_check(two_parts, [x], [(1, 3, 8)])
    y = rng.standard_normal((1, 3, 4, 2))
    vjp_check(lambda t: F.merge_heads(F.split_heads(t, 3) * 2.0), [y.transpose(0, 2, 1, 3).reshape(1, 4, 6)],
              [(1, 4, 6)])


# -- kernel bodies on every block kind (the registry test draws them at random) -----------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("block", _ATTN_BLOCKS + ATTN_MULTI_BLOCKS)
@pytest.mark.parametrize("name", ["attn_fwd", "attn_bwd"])
def test_attention_kernel_blocks(name, block, dtype, monkeypatch):
    import tiletrain.testing.references_attention as ra
    monkeypatch.setattr(ra, "_ATTN_BLOCKS", [block])
    code = lib.TT_F32 if dtype == np.float32 else lib.TT_F64
    rng = np.random.default_rng(sum(block))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    seen = set()
    for _ in range(16):
        fields, buffers = REFERENCES[name].case(rng, dtype)
        seen.add(tuple(fields.get(f, 0) for f in ("init", "initq", "initkv")))
        expected = REFERENCES[name].ref(fields, *[b.copy() for b in buffers])
        run_cpu_kernel(name, fields, buffers, code)
        for i, exp in expected.items():
            # float32 dk, dv of a tall tile sum a few hundred rows: rounding grows with the sum
            atol = tol if block in _ATTN_BLOCKS else tol * max(1.0, float(np.abs(exp).max()))
            np.testing.assert_allclose(buffers[i], np.asarray(exp, dtype), rtol=tol, atol=atol)
    assert len(seen) == (2 if name == "attn_fwd" else 4)


# -- bad input -----------------------------------------------------------------------------

def test_any_tiling_is_retiled(rng):
    """Tilings the kernels cannot take are re-tiled first: the results equal a well-tiled run."""
    import torch
    a = rng.standard_normal((2, 3, 18))
    for tiles, n_head, nparts in (((1, 3, 6), 3, 1), ((1, 3, 4), 3, 3), ((1, 2, 5), 1, 3)):
        x = tt.from_numpy(a, tiles).requires_grad_()
        parts = [F.split_heads(x, n_head, p, nparts) for p in range(nparts)]
        C = 18 // nparts
        for p, y in enumerate(parts):
            want = a[:, :, p * C:(p + 1) * C].reshape(2, 3, n_head, C // n_head).transpose(0, 2, 1, 3)
            np.testing.assert_array_equal(y.detach().numpy(), want)
        tt.sum(tt.stack(parts).sum() * 1.0).backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.ones_like(a))
    y = rng.standard_normal((2, 2, 3, 4))
    np.testing.assert_array_equal(F.merge_heads(tt.from_numpy(y, (1, 1, 3, 2))).numpy(),
                                  y.transpose(0, 2, 1, 3).reshape(2, 3, 8))
    q, k, v = (rng.standard_normal((1, 2, 5, 4)) for _ in range(3))
    got = F.scaled_dot_product_attention(tt.from_numpy(q, (1, 1, 2, 2)), tt.from_numpy(k, (1, 2, 3, 4)),
                                         tt.from_numpy(v, (1, 1, 5, 1)), is_causal=True)
    want = torch.nn.functional.scaled_dot_product_attention(*map(torch.tensor, (q, k, v)), is_causal=True)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


def test_split_merge_bad_input(rng, nothing_submitted):
    x = tt.from_numpy(rng.standard_normal((2, 3, 12)), (1, 3, 6))
    with pytest.raises(ValueError, match="n_head=5 does not divide the width C=12"):
        F.split_heads(x, 5)
    xf = tt.from_numpy(rng.standard_normal((2, 3, 18)), (1, 3, 4))
    with pytest.raises(ValueError, match="not divisible by nparts=4"):
        F.split_heads(xf, 1, 0, 4)
    with pytest.raises(ValueError, match="part 3 out of range"):
        F.split_heads(xf, 3, 3, 3)
    with pytest.raises(ValueError, match="n_head must be >= 1"):
        F.split_heads(x, 0)
    with pytest.raises(TypeError, match="n_head must be an int"):
        F.split_heads(x, 2.0)
    with pytest.raises(ValueError, match=r"must be \(B, T, C\)"):
        F.split_heads(tt.from_numpy(rng.standard_normal((3, 12)), (3, 6)), 2)
    with pytest.raises(TypeError, match="x must be a tiletrain Tensor"):
        F.split_heads(rng.standard_normal((2, 3, 12)), 2)
    with pytest.raises(ValueError, match=r"must be \(B, H, T, D\)"):
        F.merge_heads(x)


def test_attention_bad_input(rng, nothing_submitted):
    sdpa = F.scaled_dot_product_attention
    shape, tiles = (1, 2, 5, 4), (1, 1, 2, 4)
    q, k, v = (tt.from_numpy(a, tiles) for a in _qkv(rng, shape, np.float64))
    with pytest.raises(ValueError, match=r"key has shape \(1, 2, 6, 4\)"):
        sdpa(q, tt.from_numpy(rng.standard_normal((1, 2, 6, 4)), tiles), v)
    with pytest.raises(TypeError, match="dtype mismatch"):
        sdpa(q, k, tt.from_numpy(rng.standard_normal(shape).astype(np.float32), tiles))
    with pytest.raises(ValueError, match=r"query must have at least 2 dims"):
        sdpa(*(tt.from_numpy(rng.standard_normal((4,))) for _ in range(3)))
    with pytest.raises(TypeError, match="attn_mask must be None, a tiletrain Tensor"):
        sdpa(q, k, v, True)
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\)"):
        sdpa(q, k, v, dropout_p=1.5)
    with pytest.raises(TypeError, match="scale must be a finite real"):
        sdpa(q, k, v, scale=float("nan"))
    with pytest.raises(TypeError, match="is_causal must be a bool"):
        sdpa(q, k, v, is_causal="yes")
    with pytest.raises(TypeError, match="key must be a tiletrain Tensor"):
        sdpa(q, np.zeros(shape), v)


def test_c_expanders_revalidate(rng, nothing_submitted):
    """The C side rejects what Python would have: a straddling tile, mismatched layouts."""
    from tiletrain._ffi import check
    x = tt.from_numpy(rng.standard_normal((1, 2, 18)), (1, 2, 4))
    y = tt.empty((1, 3, 2, 2), tiles=(1, 2, 2, 2), dtype=np.float64)
    with pytest.raises(ValueError, match="straddle parts"):
        check(lib.tt_heads_split(x._ptr, 0, 3, y._ptr))
    shape, tiles = (1, 1, 5, 4), (1, 1, 2, 4)
    q, k = (tt.from_numpy(a, tiles) for a in _qkv(rng, shape, np.float64)[:2])
    v = tt.from_numpy(rng.standard_normal(shape), (1, 1, 3, 4))
    o, lse = tt.empty(shape, tiles=tiles, dtype=np.float64), tt.empty((1, 1, 5), tiles=(1, 1, 2), dtype=np.float64)
    with pytest.raises(ValueError, match="value and the key/value gradients must have key's shape"):
        check(lib.tt_attention_fwd(q._ptr, k._ptr, v._ptr, 0.5, 1, o._ptr, lse._ptr))


# -- grouped-query attention and rotary embeddings (Llama) ---------------------------------

# (B, H, Hkv, T, D), query tiles: heads per tile a multiple of the group, a divisor of it, and
# a tile that is neither (re-tiled); T with a smaller last tile
GQA_CASES = [((2, 8, 2, 13, 6), (1, 8, 5, 6)), ((2, 8, 2, 13, 6), (2, 2, 4, 6)), ((1, 6, 3, 9, 4), (1, 1, 9, 4)),
             ((2, 8, 2, 7, 4), (1, 3, 3, 4))]


@pytest.mark.parametrize("shape,tiles", GQA_CASES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_gqa_matches_torch(rng, shape, tiles, dtype):
    import torch
    B, H, Hkv, T, D = shape
    G = H // Hkv
    q = rng.standard_normal((B, H, T, D)).astype(dtype)
    k, v = (rng.standard_normal((B, Hkv, T, D)).astype(dtype) for _ in range(2))
    kv_tiles = (tiles[0], max(tiles[1] // G, 1)) + tiles[2:]
    Q, K, V = tt.from_numpy(q, tiles), tt.from_numpy(k, kv_tiles), tt.from_numpy(v, kv_tiles)
    for t in (Q, K, V):
        t.requires_grad = True
    y = F.scaled_dot_product_attention(Q, K, V, is_causal=True, enable_gqa=True)
    do = rng.standard_normal(y.shape).astype(dtype)
    (y * tt.from_numpy(do, y.tiles)).sum().backward()
    tq, tk, tv = (torch.tensor(a.astype(np.float64), requires_grad=True) for a in (q, k, v))
    ty = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True, enable_gqa=True)
    ty.backward(torch.tensor(do.astype(np.float64)))
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), **attn_tol(dtype))
    for got, want in ((Q, tq), (K, tk), (V, tv)):
        np.testing.assert_allclose(got.grad.numpy(), want.grad.numpy(), **attn_tol(dtype))
    # the same as plain attention on kv heads repeated for their query heads
    o, _ = ref_attention(q, np.repeat(k, G, axis=1), np.repeat(v, G, axis=1), True)
    np.testing.assert_allclose(y.detach().numpy(), o, **attn_tol(dtype))


def test_vjp_gqa(rng):
    q = rng.standard_normal((1, 4, 7, 4))
    k, v = rng.standard_normal((1, 2, 7, 4)), rng.standard_normal((1, 2, 7, 4))
    vjp_check(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True, enable_gqa=True),
              [q, k, v], [(1, 1, 3, 4), (1, 1, 3, 4), (1, 1, 3, 4)])


def ref_prefix_attention(q, k, v, do):
    """Lower-right causal attention (the queries are the last Tq of Tk positions) and its
    gradients, over kv heads repeated for their query heads."""
    G = q.shape[1] // k.shape[1]
    kr, vr = np.repeat(k, G, axis=1), np.repeat(v, G, axis=1)
    Tq, Tk, scale = q.shape[2], k.shape[2], 1.0 / np.sqrt(q.shape[-1])
    s = np.where(np.tril(np.ones((Tq, Tk), bool), Tk - Tq), scale * q @ np.swapaxes(kr, -1, -2), -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    dp = do @ np.swapaxes(vr, -1, -2)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    dk, dv = scale * np.swapaxes(ds, -1, -2) @ q, np.swapaxes(p, -1, -2) @ do
    fold = (lambda a: a.reshape(k.shape[:1] + (k.shape[1], G) + a.shape[2:]).sum(axis=2))
    return p @ vr, scale * ds @ kr, fold(dk), fold(dv)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("Hkv,Tq,Tk,tile", [(2, 5, 9, 3), (1, 4, 8, 4), (2, 3, 3, 2), (1, 1, 6, 4)])
def test_attention_over_a_key_value_prefix(rng, Hkv, Tq, Tk, tile, dtype):
    """attn_mask=causal_lower_right(Tq, Tk): queries at the last Tq positions (the prefix
    length not a multiple of the tile in the first case), forward and backward, against
    NumPy and against the last rows of the full causal attention."""
    q = rng.standard_normal((2, 2, Tq, 4)).astype(dtype)
    k, v = (rng.standard_normal((2, Hkv, Tk, 4)).astype(dtype) for _ in range(2))
    do = rng.standard_normal(q.shape).astype(dtype)
    Q = tt.from_numpy(q, (1, 2, tile, 4)).requires_grad_()
    K, V = (tt.from_numpy(a, (1, 1, tile, 4)).requires_grad_() for a in (k, v))
    y = F.scaled_dot_product_attention(Q, K, V, attn_mask=F.causal_lower_right(Tq, Tk), enable_gqa=True)
    y.backward(tt.from_numpy(do, y.tiles))
    o, dq, dk, dv = ref_prefix_attention(*(a.astype(np.float64) for a in (q, k, v, do)))
    for got, want in ((y, o), (Q.grad, dq), (K.grad, dk), (V.grad, dv)):
        np.testing.assert_allclose(got.detach().numpy(), want, **attn_tol(dtype))
    G = 2 // Hkv
    full = ref_attention(np.concatenate([np.zeros((2, 2, Tk - Tq, 4)), q], axis=2),
                         np.repeat(k, G, axis=1), np.repeat(v, G, axis=1), True)[0]
    np.testing.assert_allclose(y.detach().numpy(), full[:, :, Tk - Tq:], **attn_tol(dtype))


def test_vjp_prefix_attention(rng):
    q = rng.standard_normal((1, 2, 3, 4))
    k, v = rng.standard_normal((1, 1, 7, 4)), rng.standard_normal((1, 1, 7, 4))
    vjp_check(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, attn_mask=F.causal_lower_right(3, 7),
                                                             enable_gqa=True),
              [q, k, v], [(1, 1, 2, 4), (1, 1, 2, 4), (1, 1, 2, 4)])


def test_prefix_attention_bad_input(rng, nothing_submitted):
    q = tt.from_numpy(rng.standard_normal((1, 2, 3, 2)))
    kv = tt.from_numpy(rng.standard_normal((1, 2, 5, 2)))
    with pytest.raises(ValueError, match="attn_mask is causal_lower_right\\(3, 6\\) but query has 3 positions "
                                         "and key 5"):
        F.scaled_dot_product_attention(q, kv, kv, attn_mask=F.causal_lower_right(3, 6))
    with pytest.raises(ValueError, match="seq_len_q <= seq_len_kv"):
        F.causal_lower_right(5, 3)
    with pytest.raises(TypeError, match="attn_mask must be None, a tiletrain Tensor"):
        F.scaled_dot_product_attention(q, kv, kv, attn_mask=np.ones((3, 5), bool))


def test_gqa_bad_input(rng, nothing_submitted):
    q = tt.from_numpy(rng.standard_normal((1, 4, 5, 2)))
    kv = tt.from_numpy(rng.standard_normal((1, 2, 5, 2)))
    kv3 = tt.from_numpy(rng.standard_normal((1, 3, 5, 2)))
    with pytest.raises(ValueError, match="key has shape .* they must be equal"):
        F.scaled_dot_product_attention(q, kv, kv)  # heads differ without enable_gqa
    with pytest.raises(ValueError, match="number of heads dividing query's"):
        F.scaled_dot_product_attention(q, kv3, kv3, enable_gqa=True)
    with pytest.raises(ValueError, match="value has shape"):
        F.scaled_dot_product_attention(q, kv, q, enable_gqa=True)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("tiles", [(2, 3, 5, 8), (1, 1, 13, 8), (2, 2, 4, 4)])
def test_rotary_embedding_matches_transformers_convention(rng, dtype, tiles):
    from tiletrain.testing.references_attention import rope_apply
    x = rng.standard_normal((2, 3, 13, 8)).astype(dtype)
    y = F.rotary_embedding(tt.from_numpy(x, tiles), 500.0).numpy()
    np.testing.assert_allclose(y, rope_apply(x, np.arange(13), 500.0), **attn_tol(dtype))
    # transformers' formula: x * cos + rotate_half(x) * sin with cos, sin of (T, D)
    import torch
    inv = 1.0 / (500.0 ** (torch.arange(0, 8, 2, dtype=torch.float) / 8))
    ang = torch.arange(13).float()[:, None] * inv
    emb = torch.cat((ang, ang), dim=-1).double()
    xt = torch.tensor(x.astype(np.float64))
    rot = torch.cat((-xt[..., 4:], xt[..., :4]), dim=-1)
    np.testing.assert_allclose(y, (xt * emb.cos() + rot * emb.sin()).numpy(), **attn_tol(dtype))


def test_vjp_rotary_embedding(rng):
    vjp_check(lambda a: F.rotary_embedding(a, 10000.0), [rng.standard_normal((2, 2, 7, 6))], [(1, 2, 3, 6)])


def test_rotary_embedding_bad_input(rng, nothing_submitted):
    with pytest.raises(ValueError, match="must be \\(B, H, T, D\\)"):
        F.rotary_embedding(tt.from_numpy(rng.standard_normal((2, 3, 4))))
    with pytest.raises(ValueError, match="D=5 must be even"):
        F.rotary_embedding(tt.from_numpy(rng.standard_normal((1, 1, 2, 5))))
    with pytest.raises(ValueError, match="theta must be a positive"):
        F.rotary_embedding(tt.from_numpy(rng.standard_normal((1, 1, 2, 4))), -1.0)
