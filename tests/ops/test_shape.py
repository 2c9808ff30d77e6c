"""Shape ops (tiletrain/ops/shape.py) against torch: forward, backward (float64, 1e-10) and a
VJP check per case, on grids with a smaller last tile along every axis and inputs tiled
differently from each other; bad input rejected before any task; task counts of re-tiling
and of the zero-copy views."""
import gc

import numpy as np
import pytest
import torch

import tiletrain as tt
from conftest import submits_nothing, total_tasks
from tiletrain.ops import shape as S
from tiletrain.ops.reduce import sum_to  # (the backward of expand_to)
from tiletrain.testing.gradcheck import vjp_check

# name -> (tiletrain fn, torch fn, [(shape, tiles) per input])
CASES = {
    "retile": (lambda x: S.retile(x, (3, 5)), lambda x: x.clone(), [((11, 7), (4, 3))]),
    "retile_3d": (lambda x: S.retile(x, (2, 4, 3)), lambda x: x.clone(), [((5, 4, 6), (2, 3, 4))]),
    "reshape_view": (lambda x: S.reshape(x, 66), lambda x: x.reshape(66), [((11, 6), (4, 6))]),
    "reshape_copy": (lambda x: S.reshape(x, 6, 11), lambda x: x.reshape(6, 11), [((11, 6), (4, 4))]),
    "reshape_split": (lambda x: S.reshape(x, (5, 2, 2, 6)), lambda x: x.reshape(5, 2, 2, 6),
                      [((5, 4, 6), (2, 3, 4))]),
    "reshape_infer": (lambda x: S.reshape(x, -1, 6), lambda x: x.reshape(-1, 6), [((5, 4, 6), (2, 3, 4))]),
    "reshape_odd": (lambda x: S.reshape(x, 6, 35), lambda x: x.reshape(6, 35),
                    [((3, 2, 5, 7), (2, 2, 3, 3))]),
    "view": (lambda x: S.view(x, 4, 5, 6), lambda x: x.view(4, 5, 6), [((5, 4, 6), (2, 3, 4))]),
    "flatten": (lambda x: S.flatten(x, 1), lambda x: x.flatten(1), [((3, 2, 5, 4), (2, 2, 3, 3))]),
    "flatten_all": (lambda x: S.flatten(x), lambda x: x.flatten(), [((5, 4, 6), (2, 3, 4))]),
    "flatten_mid": (lambda x: S.flatten(x, 1, 2), lambda x: x.flatten(1, 2), [((3, 2, 5, 4), (2, 2, 3, 3))]),
    "unsqueeze": (lambda x: S.unsqueeze(x, 1), lambda x: x.unsqueeze(1), [((11, 7), (4, 3))]),
    "unsqueeze_last": (lambda x: S.unsqueeze(x, -1), lambda x: x.unsqueeze(-1), [((11, 7), (4, 3))]),
    "squeeze_all": (lambda x: S.squeeze(x), lambda x: x.squeeze(), [((1, 7, 1, 5), (1, 3, 1, 2))]),
    "squeeze_dims": (lambda x: S.squeeze(x, (0, 1)), lambda x: x.squeeze((0, 1)),
                     [((1, 7, 1, 5), (1, 3, 1, 2))]),
    "squeeze_int": (lambda x: S.squeeze(x, 2), lambda x: x.squeeze(2), [((1, 7, 1, 5), (1, 3, 1, 2))]),
    "permute": (lambda x: S.permute(x, 2, 0, 3, 1), lambda x: x.permute(2, 0, 3, 1),
                [((3, 2, 5, 4), (2, 2, 3, 3))]),
    "permute_ones": (lambda x: S.permute(x, (1, 0, 2)), lambda x: x.permute(1, 0, 2),
                     [((1, 7, 5), (1, 3, 2))]),
    "permute_6d": (lambda x: S.permute(x, 5, 3, 1, 4, 2, 0), lambda x: x.permute(5, 3, 1, 4, 2, 0),
                   [((2, 3, 2, 3, 2, 3), (1, 2, 1, 2, 1, 2))]),  # 6 axes after merging: tasks per pair
    "transpose": (lambda x: S.transpose(x, 0, -1), lambda x: x.transpose(0, -1), [((5, 4, 6), (2, 3, 4))]),
    "t": (S.t, lambda x: x.t(), [((11, 7), (4, 3))]),
    "expand": (lambda x: S.expand(x, 3, 5, 4, 6), lambda x: x.expand(3, 5, 4, 6), [((5, 1, 6), (2, 1, 4))]),
    "expand_keep": (lambda x: S.expand(x, -1, 9), lambda x: x.expand(-1, 9), [((7, 1), (3, 1))]),
    "broadcast_to": (lambda x: S.broadcast_to(x, (2, 11, 7)), lambda x: x.broadcast_to((2, 11, 7)),
                     [((1, 7), (1, 3))]),
    "expand_scalar": (lambda x: S.expand(x, 3, 4), lambda x: x.expand(3, 4), [((), ())]),
    "getitem_scalar": (lambda x: S.getitem(x, (1, -2)), lambda x: x[1, -2], [((3, 4), (2, 3))]),
    "unsqueeze_scalar": (lambda x: S.unsqueeze(x, 0), lambda x: x.unsqueeze(0), [((), ())]),
    "getitem_int": (lambda x: S.getitem(x, 5), lambda x: x[5], [((11, 7), (4, 3))]),
    "getitem_neg": (lambda x: S.getitem(x, (-1, slice(2, 6))), lambda x: x[-1, 2:6], [((11, 7), (4, 3))]),
    "getitem_step": (lambda x: S.getitem(x, (slice(1, None, 3), slice(None, None, 2))),
                     lambda x: x[1::3, ::2], [((11, 7), (4, 3))]),
    "getitem_none": (lambda x: S.getitem(x, (None, slice(3, 9), None, 4)), lambda x: x[None, 3:9, None, 4],
                     [((11, 7), (4, 3))]),
    "getitem_ellipsis": (lambda x: S.getitem(x, (Ellipsis, slice(1, 5, 2))), lambda x: x[..., 1:5:2],
                         [((5, 4, 6), (2, 3, 4))]),
    "getitem_mixed": (lambda x: S.getitem(x, (1, Ellipsis, None, slice(-3, None))),
                      lambda x: x[1, ..., None, -3:], [((3, 2, 5, 4), (2, 2, 3, 3))]),
    "cat0": (lambda a, b: S.cat([a, b]), lambda a, b: torch.cat([a, b]),
             [((11, 7), (4, 3)), ((5, 7), (2, 4))]),
    "cat1": (lambda a, b, c: S.cat((a, b, c), dim=-1), lambda a, b, c: torch.cat((a, b, c), dim=-1),
             [((5, 4, 3), (2, 3, 2)), ((5, 4, 6), (5, 2, 4)), ((5, 4, 1), (3, 4, 1))]),
    "stack": (lambda a, b: S.stack([a, b], 1), lambda a, b: torch.stack([a, b], 1),
              [((11, 7), (4, 3)), ((11, 7), (5, 5))]),
    "stack_last": (lambda a, b: S.stack([a, b], -1), lambda a, b: torch.stack([a, b], -1),
                   [((5, 4, 6), (2, 3, 4)), ((5, 4, 6), (5, 4, 6))]),
    "split": (lambda x: S.split(x, 4, 1)[1], lambda x: x.split(4, 1)[1], [((5, 11), (2, 3))]),
    "split_sections": (lambda x: S.split(x, [2, 6, 3])[2], lambda x: x.split([2, 6, 3])[2],
                       [((11, 7), (4, 3))]),
    "split_aligned": (lambda x: S.split(x, 4, 1)[2], lambda x: x.split(4, 1)[2], [((5, 11), (2, 4))]),
    "getitem_aligned": (lambda x: S.getitem(x, (slice(2, 4), None, slice(4, None))), lambda x: x[2:4, None, 4:],
                        [((5, 11), (2, 4))]),
    "getitem_aligned_int": (lambda x: S.getitem(x, (Ellipsis, 6)), lambda x: x[..., 6], [((5, 4, 7), (2, 3, 3))]),
    "chunk": (lambda x: S.chunk(x, 3, -1)[2], lambda x: x.chunk(3, -1)[2], [((5, 4, 7), (2, 3, 4))]),
}


def _inputs(rng, specs):
    return [rng.standard_normal(shape) for shape, _ in specs]


@pytest.mark.parametrize("name", CASES)
def test_forward_backward_vs_torch(rng, name):
    fn, tfn, specs = CASES[name]
    arrays = _inputs(rng, specs)
    xs = [tt.from_numpy(a, tiles).requires_grad_() for a, (_, tiles) in zip(arrays, specs)]
    ts = [torch.from_numpy(a).requires_grad_() for a in arrays]
    y, ty = fn(*xs), tfn(*ts)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())
    g = rng.standard_normal(y.shape)
    y.backward(tt.from_numpy(g, y.tiles))
    ty.backward(torch.from_numpy(g))
    for x, t in zip(xs, ts):
        assert x.grad.shape == x.shape and x.grad.tiles == x.tiles
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", CASES)
def test_vjp(rng, name):
    fn, _, specs = CASES[name]
    vjp_check(fn, _inputs(rng, specs), [tiles for _, tiles in specs])


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("name", ["retile", "reshape_copy", "permute", "permute_6d", "expand", "getitem_step",
                                  "cat1", "stack"])
def test_other_dtypes(rng, name, dtype):
    fn, tfn, specs = CASES[name]
    arrays = [(rng.standard_normal(shape) * 100).astype(dtype) for shape, _ in specs]
    y = fn(*[tt.from_numpy(a, tiles) for a, (_, tiles) in zip(arrays, specs)])
    assert y.dtype == dtype
    np.testing.assert_array_equal(y.numpy(), tfn(*[torch.from_numpy(a) for a in arrays]).numpy())


def test_split_and_chunk_pieces(rng):
    a = rng.standard_normal((11, 7))
    x = tt.from_numpy(a, (4, 3))
    for pieces, ref in [(S.split(x, 3), torch.from_numpy(a).split(3)),
                        (S.split(x, [1, 4, 2], dim=1), torch.from_numpy(a).split([1, 4, 2], dim=1)),
                        (S.chunk(x, 4, 1), torch.from_numpy(a).chunk(4, 1)),
                        (S.chunk(x, 20), torch.from_numpy(a).chunk(20))]:
        assert len(pieces) == len(ref)
        for p, r in zip(pieces, ref):
            np.testing.assert_array_equal(p.numpy(), r.numpy())


@pytest.mark.parametrize("use", ["all", "two", "twice", "dense_too", "two_splits", "unaligned"])
def test_split_pieces_written_into_a_pending_gradient(rng, use):
    """Pieces of split() on tile boundaries write their gradients straight into the input's
    pending gradient (pieces no gradient reached are zeroed, a piece used twice or a dense
    contribution still adds, two different splits of one tensor are summed); equal to torch."""
    a = rng.standard_normal((4, 5, 12))
    sizes = [3, 5, 4] if use == "unaligned" else 4
    parts = {"two": (2, 0), "twice": (1, 0, 1)}.get(use, (0, 1, 2))
    weights = [rng.standard_normal((4, 5, 6)) for _ in parts]
    w2 = rng.standard_normal((4, 5, 6))

    def loss(m, x):
        h = x * 1.5                                    # a non-leaf: the engine's pending path
        pieces = h.split(sizes, dim=2)
        out = h.sum() * 0.25 if use == "dense_too" else 0.0
        for i, (p, w) in enumerate(zip(parts, weights)):
            piece = pieces[p]
            out = out + (piece * m.tensor(w[..., :piece.shape[2]]) * float(i + 1)).sum()
        if use == "two_splits":
            out = out + (h.split(6, dim=2)[1] * m.tensor(w2)).sum()
        return out

    x = tt.tensor(a, tiles=(2, 5, 4), requires_grad=True)
    loss(tt, x).backward()
    t = torch.tensor(a, requires_grad=True)
    loss(torch, t).backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_reshape_tilings(rng):
    """Reshapes whose tiles line up are views (their tiles derived from the input's); others
    copy into a tiling that lines up; values are torch's in every case."""
    a = rng.standard_normal((6, 4, 10))
    for tiles in [(6, 4, 10), (2, 4, 10), (5, 3, 7), (1, 1, 1), (4, 4, 3)]:
        x = tt.from_numpy(a, tiles)
        for shape in [(24, 10), (6, 40), (240,), (3, 2, 2, 2, 10), (10, 24), (4, 6, 10), (1, 240, 1),
                      (8, 30)]:
            np.testing.assert_array_equal(S.reshape(x, shape).numpy(), a.reshape(shape))


def test_expand_to_and_sum_to(rng):
    a = rng.standard_normal((5, 1, 6))
    x = tt.from_numpy(a, (2, 1, 4))
    assert S.expand_to(x, (5, 1, 6), (2, 1, 4)) is x
    y = S.expand_to(x, (3, 5, 7, 6), (2, 3, 4, 5))
    assert y.tiles == (2, 3, 4, 5)
    np.testing.assert_array_equal(y.numpy(), np.broadcast_to(a, (3, 5, 7, 6)))
    np.testing.assert_array_equal(S.expand_to(x, (5, 1, 6), (3, 1, 5)).numpy(), a)
    g = rng.standard_normal((3, 5, 7, 6))
    G = tt.from_numpy(g, (2, 3, 4, 5))
    assert sum_to(G, (3, 5, 7, 6)) is G
    for shape in [(5, 1, 6), (1, 6), (7, 1), (), (3, 1, 1, 6)]:
        np.testing.assert_allclose(sum_to(G, shape).numpy(), torch.from_numpy(g).sum_to_size(shape).numpy(),
                                   rtol=1e-10, atol=1e-10)
    vjp_check(lambda t: S.expand_to(t, (3, 5, 7, 6), (2, 3, 4, 5)), [a], [(2, 1, 4)])


def test_retile_task_count(rng):
    x = tt.from_numpy(rng.standard_normal((8, 6)), (4, 3))
    assert S.retile(x, (4, 3)) is x
    tt.wait()
    before = total_tasks()
    y = S.retile(x, (2, 6))  # each (2, 6) tile: one x tile along rows, two along columns
    tt.wait()
    assert total_tasks() - before == 4 * 2
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    before = total_tasks()
    S.retile(x, (3, 5)).numpy()  # rows: 0-2 | 3 | 4-5 | 6-7 (6 segments); columns: 0-2 | 3-4 | 5
    assert total_tasks() - before == 4 * 3


def test_stack_tiles_a_batch_of_small_items_per_worker(rng, monkeypatch):
    """stack's new axis holds as many items as fit in DEFAULT_TILE**2 elements, leaving one
    tile per worker: a batch of token rows is a few tiles (the ops after it make one task per
    tile), a batch of large items one item per tile; a batch whose share per worker would
    hold fewer than MIN_STACK_SHARE elements stays one tile."""
    from tiletrain.tensors.traits import DEFAULT_TILE
    m = S.MIN_STACK_SHARE
    monkeypatch.setattr(S, "nworkers", lambda: 2)
    rows = [tt.from_numpy(rng.integers(0, 9, m // 4)) for _ in range(8)]
    y = S.stack(rows)
    assert y.tiles == (4, m // 4)   # 4 rows per worker: a share of MIN_STACK_SHARE elements
    np.testing.assert_array_equal(y.numpy(), np.stack([r.numpy() for r in rows]))
    short = [tt.from_numpy(rng.integers(0, 9, m // 8)) for _ in range(8)]
    assert S.stack(short).tiles == (8, m // 8)   # half the share per worker: one tile
    monkeypatch.setattr(S, "nworkers", lambda: 4)
    assert S.stack(rows).tiles == (8, m // 4)    # 2 rows per worker: too few, one tile
    monkeypatch.setattr(S, "nworkers", lambda: 2)
    half = [tt.from_numpy(rng.standard_normal((DEFAULT_TILE, DEFAULT_TILE // 2))) for _ in range(3)]
    assert S.stack(half, 1).tiles == (DEFAULT_TILE, 2, DEFAULT_TILE // 2)  # two fit in the volume
    big = tt.from_numpy(rng.standard_normal((DEFAULT_TILE, DEFAULT_TILE)))
    assert S.stack([big, big, big]).tiles == (1, DEFAULT_TILE, DEFAULT_TILE)


def test_tile_aligned_views_submit_nothing(rng):
    a = rng.standard_normal((11, 7))
    x = tt.from_numpy(a, (4, 3))
    x41 = tt.from_numpy(a, (4, 1))
    with submits_nothing():
        u = S.unsqueeze(x, 0)
        s = S.squeeze(S.unsqueeze(u, -1))
        v = S.reshape(tt.from_numpy(a, (4, 7)), 77)  # whole rows per tile: a view
        n = S.getitem(x, (None, Ellipsis, None))
        p = S.permute(u, 1, 0, 2)
        pieces = S.chunk(tt.from_numpy(a, (4, 7)), 3)  # rows 0-3 | 4-7 | 8-10: whole tiles
        sub = S.getitem(x, (slice(4, 8), slice(3, None)))
        col = S.getitem(x41, (slice(None), 5))
    assert u.shape == (1, 11, 7) and u.tiles == (1, 4, 3) and s.shape == (11, 7)
    np.testing.assert_array_equal(u.numpy(), a[None])
    np.testing.assert_array_equal(s.numpy(), a)
    np.testing.assert_array_equal(v.numpy(), a.reshape(77))
    np.testing.assert_array_equal(n.numpy(), a[None, ..., None])
    np.testing.assert_array_equal(p.numpy(), a[:, None])
    for piece, ref in zip(pieces, np.split(a, [4, 8])):
        np.testing.assert_array_equal(piece.numpy(), ref)
    np.testing.assert_array_equal(sub.numpy(), a[4:8, 3:])
    assert sub.tiles == (4, 3) and col.shape == (11,) and col.tiles == (4,)
    np.testing.assert_array_equal(col.numpy(), a[:, 5])


def test_view_keeps_its_base_alive(rng):
    a = rng.standard_normal((6, 4))
    v = S.reshape(tt.from_numpy(a, (2, 4)), 24)
    w = S.unsqueeze(v, 0)
    del v
    gc.collect()
    np.testing.assert_array_equal(w.numpy(), a.reshape(1, 24))
    np.testing.assert_array_equal(S.retile(w, (1, 5)).numpy(), a.reshape(1, 24))
    col = S.getitem(tt.from_numpy(a, (2, 1)), (slice(2, 4), 3))  # a reshape view of a tile view
    gc.collect()
    np.testing.assert_array_equal(col.numpy(), a[2:4, 3])


@pytest.mark.parametrize("dtype", [tt.float16, tt.bfloat16, np.bool_])
def test_copies_take_half_and_bool_dtypes(rng, dtype):
    a = (rng.standard_normal((9, 7)) > 0) if dtype == np.bool_ else rng.standard_normal((9, 7)).astype(dtype)
    x = tt.from_numpy(a, (4, 3))
    np.testing.assert_array_equal(S.retile(x, (2, 5)).numpy(), a)
    np.testing.assert_array_equal(S.permute(x, 1, 0).numpy(), a.T)
    np.testing.assert_array_equal(x[1:8:3, ::2].numpy(), a[1:8:3, ::2])
    np.testing.assert_array_equal(S.cat([x, x], 1).numpy(), np.concatenate([a, a], 1))
    np.testing.assert_array_equal(S.expand(x[:, :1], 9, 4).numpy(), np.broadcast_to(a[:, :1], (9, 4)))


def test_unsqueeze_squeeze_take_half_dtypes(rng):
    h = tt.from_numpy(rng.standard_normal((5, 3)).astype(np.float16), (2, 2))
    np.testing.assert_array_equal(S.squeeze(S.unsqueeze(h, 1), 1).numpy(), h.numpy())


def _bad_calls():
    x = tt.from_numpy(np.zeros((11, 7)), (4, 3))
    y = tt.from_numpy(np.zeros((5, 6)), (2, 4))
    return [
        (lambda: S.retile(x, (0, 3)), ValueError, "tiles"),
        (lambda: S.retile("x", (2, 3)), TypeError, "x must be a tiletrain Tensor"),
        (lambda: S.retile(x, (1, 1, 1)), ValueError, "tiles"),
        (lambda: S.reshape(x, 10, 7), ValueError, "invalid for a tensor of size 77"),
        (lambda: S.reshape(x, -1, -1), ValueError, "only one dimension"),
        (lambda: S.reshape(x, 7, 2.0), TypeError, "shape"),
        (lambda: S.flatten(x, 1, 0), ValueError, "start_dim"),
        (lambda: S.flatten(x, 2), IndexError, "start_dim"),
        (lambda: S.unsqueeze(x, 3), IndexError, "dim=3"),
        (lambda: S.squeeze(x, -3), IndexError, "dim=-3"),
        (lambda: S.permute(x, 0, 0), ValueError, "not a permutation"),
        (lambda: S.permute(x, 0), ValueError, "dims"),
        (lambda: S.transpose(x, 0, 2), IndexError, "dim1"),
        (lambda: S.t(tt.from_numpy(np.zeros((2, 3, 4))),), ValueError, "<= 2 dimensions"),
        (lambda: S.expand(x, 11), ValueError, "number of sizes"),
        (lambda: S.expand(x, 11, 8), ValueError, "size 8 at dimension 1"),
        (lambda: S.expand(x, -1, 11, 7), ValueError, "leading"),
        (lambda: S.broadcast_to(y, (5, 5)), ValueError, "dimension 1"),
        (lambda: S.expand_to(x, (11, 8), (4, 4)), ValueError, "size 8"),
        (lambda: sum_to(x, (2, 7)), ValueError, "does not broadcast"),
        (lambda: S.getitem(x, 11), IndexError, "index 11 is out of bounds for dimension 0 with size 11"),
        (lambda: S.getitem(x, (0, -8)), IndexError, "dimension 1 with size 7"),
        (lambda: S.getitem(x, slice(None, None, -1)), ValueError, "step must be greater than zero"),
        (lambda: S.getitem(x, (0, 0, 0)), IndexError, "too many indices"),
        (lambda: S.getitem(x, (Ellipsis, Ellipsis)), IndexError, "single ellipsis"),
        (lambda: S.getitem(x, [0, 1]), TypeError, "not supported"),
        (lambda: S.getitem(x, True), TypeError, "not supported"),
        (lambda: S.getitem(x, slice(5, 2)), ValueError, "selects nothing"),
        (lambda: S.cat([x, y]), ValueError, "sizes must match"),
        (lambda: S.cat([x, x], dim=2), IndexError, "dim=2"),
        (lambda: S.cat([]), ValueError, "non-empty"),
        (lambda: S.cat(x), TypeError, "list or tuple"),
        (lambda: S.cat([x, tt.from_numpy(np.zeros((1, 7), np.float32))]), TypeError, "float32"),
        (lambda: S.stack([x, tt.from_numpy(np.zeros((10, 7)))]), ValueError, "equal shape"),
        (lambda: S.split(x, 0), ValueError, "split_size"),
        (lambda: S.split(x, [5, 5]), ValueError, "add up"),
        (lambda: S.chunk(x, 0), ValueError, "chunks"),
    ]


@pytest.mark.parametrize("case", range(37))
def test_bad_input_rejected_before_submission(case, nothing_submitted):
    call, exc, match = _bad_calls()[case]  # tensors made by from_numpy: no task
    with pytest.raises(exc, match=match):
        call()


def test_bad_input_cases_counted():
    assert len(_bad_calls()) == 37
