"""Index and scatter ops (tiletrain/ops/index.py) against torch: index_select, gather, scatter,
scatter_add, index_add, scatter_reduce (sum, mean, amax, amin, include_self), forward in
float32 and float64 and backward in float64 against torch's autograd, on tilings with one
tile, even grids and smaller last tiles (operands tiled differently from each other); bad
input rejected before any task."""
import numpy as np
import pytest
import torch

import tiletrain as tt
from conftest import FLOATS, submits_nothing, tol
from tiletrain.tensors import DEFAULT_TILE

# (input shape, input tiles, dim, index length or index shape, index tiles)
SELECT = [
    ((6, 5), (6, 5), 0, 4, 4),              # one tile each
    ((8, 6), (4, 3), 0, 10, 5),             # even grids, repeats
    ((11, 7), (4, 3), 1, 9, 4),             # smaller last tiles, along dim 1
    ((5, 4, 6), (2, 3, 4), 1, 7, 3),        # 3-D, middle axis
    ((3, 2, 5, 4), (2, 2, 3, 3), 3, 5, 2),  # 4-D, last axis
]


def _g(a, requires_grad=False):
    return torch.from_numpy(a.copy()).requires_grad_(requires_grad)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,tiles,dim,n,itile", SELECT)
def test_index_select_and_index_add(rng, shape, tiles, dim, n, itile, dtype):
    x = rng.standard_normal(shape).astype(dtype)
    idx = rng.integers(0, shape[dim], n).astype(np.int64)
    idx[0] = idx[-1] = shape[dim] - 1  # the last tile, repeated
    X, I = tt.from_numpy(x, tiles), tt.from_numpy(idx, (itile,))
    np.testing.assert_array_equal(tt.index_select(X, dim, I).numpy(), np.take(x, idx, axis=dim))
    assert X.index_select(dim, I).shape == np.take(x, idx, axis=dim).shape
    src_shape = tuple(n if d == dim else s for d, s in enumerate(shape))
    src = rng.standard_normal(src_shape).astype(dtype)
    ref = torch.from_numpy(x).index_add(dim, torch.from_numpy(idx), torch.from_numpy(src), alpha=0.5)
    got = tt.index_add(X, dim, I, tt.from_numpy(src), alpha=0.5)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), **tol(dtype))


@pytest.mark.parametrize("shape,tiles,dim,n,itile", SELECT)
def test_index_select_and_index_add_backward(rng, shape, tiles, dim, n, itile):
    x = rng.standard_normal(shape)
    idx = rng.integers(0, shape[dim], n).astype(np.int64)
    idx[0] = idx[1]
    src = rng.standard_normal(tuple(n if d == dim else s for d, s in enumerate(shape)))
    g = rng.standard_normal(src.shape)
    X = tt.from_numpy(x, tiles).requires_grad_()
    tt.index_select(X, dim, tt.from_numpy(idx, (itile,))).backward(tt.from_numpy(g, tuple(
        itile if d == dim else t for d, t in enumerate(tiles))))
    xt = _g(x, True)
    torch.index_select(xt, dim, torch.from_numpy(idx)).backward(torch.from_numpy(g))
    np.testing.assert_allclose(X.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-12)

    X = tt.from_numpy(x, tiles).requires_grad_()
    S = tt.from_numpy(src).requires_grad_()
    gy = rng.standard_normal(shape)
    (tt.index_add(X, dim, tt.from_numpy(idx, (itile,)), S, alpha=-1.5) * tt.from_numpy(gy, tiles)).sum().backward()
    xt, st = _g(x, True), _g(src, True)
    (xt.index_add(dim, torch.from_numpy(idx), st, alpha=-1.5) * torch.from_numpy(gy)).sum().backward()
    np.testing.assert_allclose(X.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(S.grad.numpy(), st.grad.numpy(), rtol=1e-12, atol=1e-12)


# (input shape, input tiles, dim, index shape, index tiles)
GATHER = [
    ((6, 5), (6, 5), 0, (6, 5), (6, 5)),
    ((8, 6), (4, 3), 0, (12, 6), (5, 4)),          # index longer along dim, other tiling
    ((11, 7), (4, 3), 1, (11, 9), (3, 4)),          # smaller last tiles
    ((11, 7), (4, 3), 1, (6, 4), (4, 3)),           # index smaller than input off dim
    ((5, 4, 6), (2, 3, 4), 2, (5, 4, 3), (2, 2, 2)),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,tiles,dim,ishape,itiles", GATHER)
def test_gather_forward_backward(rng, shape, tiles, dim, ishape, itiles, dtype):
    x = rng.standard_normal(shape).astype(dtype)
    idx = rng.integers(0, shape[dim], ishape).astype(np.int64)
    X = tt.from_numpy(x, tiles).requires_grad_(dtype == np.float64)
    Y = tt.gather(X, dim, tt.from_numpy(idx, itiles))
    xt = _g(x, dtype == np.float64)
    yt = torch.gather(xt, dim, torch.from_numpy(idx))
    assert Y.shape == tuple(ishape) and Y.tiles == tuple(itiles)
    np.testing.assert_array_equal(Y.detach().numpy(), yt.detach().numpy())
    if dtype == np.float64:
        g = rng.standard_normal(ishape)
        Y.backward(tt.from_numpy(g, itiles))
        yt.backward(torch.from_numpy(g))
        np.testing.assert_allclose(X.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-12)


# (self shape, self tiles, dim, index shape, index tiles, src shape)
SCATTER = [
    ((6, 5), (6, 5), 0, (6, 5), (6, 5), (6, 5)),
    ((8, 6), (4, 3), 0, (12, 6), (5, 4), (12, 6)),
    ((11, 7), (4, 3), 1, (11, 9), (3, 4), (11, 10)),     # src larger than index
    ((11, 7), (4, 3), 0, (6, 4), (4, 3), (6, 5)),        # index smaller than self off dim
    ((5, 4, 6), (2, 3, 4), 1, (5, 7, 6), (2, 3, 4), (5, 7, 6)),
]
REDUCES = [("sum", True), ("sum", False), ("mean", True), ("mean", False), ("amax", True), ("amax", False),
           ("amin", True), ("amin", False)]


def _ties(rng, a, k=3):
    """Round to a few values so that amax/amin have ties (torch splits their gradient)."""
    return np.round(a * k) / k


@pytest.mark.parametrize("reduce,include_self", REDUCES)
@pytest.mark.parametrize("shape,tiles,dim,ishape,itiles,sshape", SCATTER)
def test_scatter_reduce(rng, shape, tiles, dim, ishape, itiles, sshape, reduce, include_self):
    x, src = _ties(rng, rng.standard_normal(shape)), _ties(rng, rng.standard_normal(sshape))
    idx = rng.integers(0, shape[dim], ishape).astype(np.int64)
    X, S = tt.from_numpy(x, tiles).requires_grad_(), tt.from_numpy(src).requires_grad_()
    Y = tt.scatter_reduce(X, dim, tt.from_numpy(idx, itiles), S, reduce, include_self=include_self)
    xt, st = _g(x, True), _g(src, True)
    # (torch's backward takes no src larger than the index: give it the part that is used)
    yt = xt.scatter_reduce(dim, torch.from_numpy(idx), st[tuple(slice(0, n) for n in ishape)], reduce,
                           include_self=include_self)
    np.testing.assert_allclose(Y.detach().numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(shape)
    Y.backward(tt.from_numpy(g, tiles))
    yt.backward(torch.from_numpy(g))
    np.testing.assert_allclose(X.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(S.grad.numpy(), st.grad.numpy(), rtol=1e-10, atol=1e-10)
    # float32 forward
    Y32 = tt.scatter_reduce(tt.from_numpy(x.astype(np.float32), tiles), dim, tt.from_numpy(idx, itiles),
                            tt.from_numpy(src.astype(np.float32)), reduce, include_self=include_self)
    np.testing.assert_allclose(Y32.numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5)


def _unique_index(rng, shape, dim, ishape):
    """An index whose targets along dim are distinct for each position off dim (torch leaves
    the winner among duplicates unspecified)."""
    other = tuple(s for d, s in enumerate(ishape) if d != dim)
    rows = np.stack([rng.permutation(shape[dim])[:ishape[dim]] for _ in range(int(np.prod(other)))])
    return np.ascontiguousarray(np.moveaxis(rows.reshape(other + (ishape[dim],)), -1, dim)).astype(np.int64)


@pytest.mark.parametrize("shape,tiles,dim,ishape,itiles,sshape", SCATTER)
def test_scatter_and_scatter_add(rng, shape, tiles, dim, ishape, itiles, sshape):
    x, src, g = rng.standard_normal(shape), rng.standard_normal(sshape), rng.standard_normal(shape)
    cases = [(rng.integers(0, shape[dim], ishape).astype(np.int64), lambda X, I, S: tt.scatter_add(X, dim, I, S),
              lambda x, i, s: x.scatter_add(dim, i, s))]
    if ishape[dim] <= shape[dim]:
        idx = _unique_index(rng, shape, dim, ishape)
        cases += [(idx, lambda X, I, S: tt.scatter(X, dim, I, S), lambda x, i, s: x.scatter(dim, i, s)),
                  (idx, lambda X, I, S: X.scatter(dim, I, value=2.5), lambda x, i, s: x.scatter(dim, i, 2.5))]
    for idx, fn, tfn in cases:
        X, S = tt.from_numpy(x, tiles).requires_grad_(), tt.from_numpy(src).requires_grad_()
        Y = fn(X, tt.from_numpy(idx, itiles), S)
        xt, st = _g(x, True), _g(src, True)
        yt = tfn(xt, torch.from_numpy(idx), st[tuple(slice(0, n) for n in ishape)])
        np.testing.assert_allclose(Y.detach().numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-12)
        (Y * tt.from_numpy(g, tiles)).sum().backward()
        (yt * torch.from_numpy(g)).sum().backward()
        np.testing.assert_allclose(X.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-12)
        if st.grad is not None:
            np.testing.assert_allclose(S.grad.numpy(), st.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_scatter_add_is_deterministic(rng):
    idx = np.zeros(5000, np.int64)
    src = rng.standard_normal((5000, 3)).astype(np.float32)
    I = tt.from_numpy(np.broadcast_to(idx[:, None], (5000, 3)).copy(), (500, 3))
    out = [tt.scatter_add(tt.zeros(4, 3), 0, I, tt.from_numpy(src, (500, 3))).numpy() for _ in range(3)]
    assert all(np.array_equal(out[0], o) for o in out)


def test_bad_input_is_rejected_before_any_task(rng):
    X = tt.from_numpy(rng.standard_normal((5, 4)))
    I = tt.from_numpy(np.array([0, 4, 2], np.int64))
    bad = tt.from_numpy(np.array([0, 5, 2], np.int64))
    neg = tt.from_numpy(np.array([0, -1, 2], np.int64))
    X32 = X.float()
    tt.wait()
    with submits_nothing():
        with pytest.raises(IndexError, match="out of range"):
            tt.index_select(X, 0, bad)
        with pytest.raises(IndexError, match=r"index\[1\] = -1"):
            tt.index_select(X, 0, neg)
        with pytest.raises(TypeError, match="int64"):
            tt.index_select(X, 0, tt.from_numpy(np.array([0.0, 1.0])))
        with pytest.raises(ValueError, match="1-D"):
            tt.index_select(X, 0, tt.from_numpy(np.zeros((2, 2), np.int64)))
        with pytest.raises(IndexError, match="dim"):
            tt.index_select(X, 2, I)
        with pytest.raises(ValueError, match="source has shape"):
            tt.index_add(X, 0, I, tt.from_numpy(rng.standard_normal((2, 4))))
        with pytest.raises(ValueError, match="dimension"):
            tt.gather(X, 0, I)
        with pytest.raises(IndexError, match="out of range"):
            tt.gather(X, 1, tt.from_numpy(np.full((5, 4), 4, np.int64)))
        with pytest.raises(ValueError, match="no larger"):
            tt.scatter_add(X, 0, tt.from_numpy(np.zeros((5, 4), np.int64)), tt.from_numpy(np.zeros((5, 3))))
        with pytest.raises(ValueError, match="reduce must be"):
            tt.scatter_reduce(X, 0, tt.from_numpy(np.zeros((5, 4), np.int64)), X, "max")
        with pytest.raises(TypeError, match="must match"):
            tt.scatter_add(X, 0, tt.from_numpy(np.zeros((5, 4), np.int64)), X32)


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_and_index_put__equal_torch(accumulate):
    """torch.index_put / Tensor.index_put(_)(indices, values, accumulate): one index tensor per
    leading dimension (a tuple or a list), repeated positions adding up with accumulate, the
    gradients to the tensor and the values, int64 tensors too."""
    import torch
    a = np.arange(12.0).reshape(3, 4)
    for idx, vals in ((([0, 0, 2],), np.ones((3, 4))), (([0, 0, 2], [1, 1, 3]), np.array([1.0, 2.0, 3.0])),
                      (([2, 1], [0, 3]), np.array(5.0))):
        out = []
        for m in (torch, tt):
            x, v = m.tensor(a, requires_grad=True), m.tensor(vals, requires_grad=True)
            y = m.index_put(x, tuple(m.tensor(i) for i in idx), v, accumulate=accumulate)
            (y * y).sum().backward()
            z = m.tensor(a).index_put_([m.tensor(i) for i in idx], m.tensor(vals), accumulate=accumulate)
            ints = m.tensor([1, 2, 3]).index_put_((m.tensor([0, 0]),), m.tensor([5, 6]), accumulate=accumulate)
            out.append([y.detach().numpy(), x.grad.numpy(), v.grad.numpy(), z.numpy(), ints.numpy()])
        for u, w in zip(*out):
            np.testing.assert_allclose(w, u, rtol=1e-15)


def test_index_select_numpy_index_takes_the_input_tiles_when_larger(rng):
    """A NumPy index is tiled like the input along dim where the input's tiles are larger than
    the default (rows gathered from a tensor tiled by 1000 rows come in tiles of 1000); values
    and gradients as torch's either way, repeats and the last (smaller) tile included."""
    x = rng.standard_normal((2300, 3))
    idx = rng.integers(0, 2300, 1700).astype(np.int64)
    idx[:3] = 2299
    for tiles, want in (((1000, 3), 1000), ((100, 3), DEFAULT_TILE)):
        X = tt.from_numpy(x, tiles).requires_grad_()
        y = tt.index_select(X, 0, idx)
        assert y.tiles[0] == want
        np.testing.assert_array_equal(y.detach().numpy(), x[idx])
        w = rng.standard_normal(y.shape)
        (y * tt.from_numpy(w)).sum().backward()
        T = _g(x, True)
        (T.index_select(0, torch.from_numpy(idx)) * torch.from_numpy(w)).sum().backward()
        np.testing.assert_allclose(X.grad.numpy(), T.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_tile_pairs_by_count_and_by_sort_agree(rng):
    from tiletrain.ops.index import _pairs
    for top in (50, 10 ** 9):  # a small key range (counted) and a wide one (sorted)
        keys = rng.integers(0, top, 300).astype(np.int64)
        i, j = _pairs(keys, 7)
        u = np.unique(keys)
        np.testing.assert_array_equal(i, u // 7)
        np.testing.assert_array_equal(j, u % 7)
    i, j = _pairs(np.zeros(0, np.int64), 7)
    assert len(i) == len(j) == 0
