"""embedding(ids, table): forward against NumPy over tile grids of ids and of the table
(one tile; even; smaller last tiles, the table split along V and C), float32 and float64;
the scatter-add backward (repeated ids, determinism, tied use in a matmul) and its VJP
check; out-of-range ids and other bad input."""
import numpy as np
import pytest

import tiletrain as tt
import tiletrain.functional as F
from conftest import FLOATS, total_tasks
from tiletrain._ffi import check, lib
from tiletrain.testing.gradcheck import vjp_check
from tiletrain.tensors.tensor import value_range_of
from tiletrain.ops.softmax import cross_entropy_last  # the fused op, classes on the last axis


# (ids shape, ids tiles, (V, C), table tiles)
GRIDS = [
    ((4, 5), (4, 5), (9, 6), (9, 6)),          # one tile each
    ((4, 6), (2, 3), (12, 6), (4, 3)),         # even grids
    ((5, 7), (2, 3), (11, 7), (4, 3)),         # smaller last tile on every axis, table split on V and C
    ((7,), (3,), (10, 5), (3, 2)),             # 1-D ids
    ((3, 4, 5), (2, 3, 2), (13, 4), (5, 4)),   # 3-D ids, table split along V only
    ((2, 3), (1, 2), (6, 9), (6, 4)),          # table split along C only
]


def _case(rng, ids_shape, V, C, dtype):
    ids = rng.integers(0, V, ids_shape).astype(np.int64)
    ids.flat[0], ids.flat[-1] = 0, V - 1                     # both ends of the table
    return ids, rng.standard_normal((V, C)).astype(dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ids_shape,ids_tiles,vc,table_tiles", GRIDS)
def test_embedding_forward(rng, ids_shape, ids_tiles, vc, table_tiles, dtype):
    ids, table = _case(rng, ids_shape, *vc, dtype)
    Y = F.embedding(tt.from_numpy(ids, ids_tiles), tt.from_numpy(table, table_tiles))
    assert Y.shape == ids_shape + (vc[1],) and Y.tiles == ids_tiles + (table_tiles[1],) and Y.dtype == dtype
    np.testing.assert_array_equal(Y.numpy(), table[ids])  # a gather is exact


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ids_shape,ids_tiles,vc,table_tiles", GRIDS)
def test_embedding_backward_scatter_add(rng, ids_shape, ids_tiles, vc, table_tiles, dtype):
    V, C = vc
    ids, table = _case(rng, ids_shape, V, C, dtype)
    ids.flat[1] = ids.flat[0]                                # a repeated id accumulates
    dy = rng.standard_normal(ids_shape + (C,)).astype(dtype)
    T = tt.from_numpy(table, table_tiles).requires_grad_()
    I = tt.from_numpy(ids, ids_tiles)
    F.embedding(I, T).backward(tt.from_numpy(dy, ids_tiles + (table_tiles[1],)))
    expected = np.zeros((V, C))
    np.add.at(expected, ids.reshape(-1), dy.reshape(-1, C).astype(np.float64))
    assert T.grad.shape == (V, C) and T.grad.tiles == T.tiles
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(T.grad.numpy(), expected, rtol=rtol, atol=rtol)
    assert I.grad is None and not I.requires_grad


def test_embedding_backward_is_deterministic(rng):
    ids = rng.integers(0, 3, (16, 16)).astype(np.int64)     # many collisions in few rows
    dy = rng.standard_normal((16, 16, 8)).astype(np.float32) * np.float32(1e3)
    I = tt.from_numpy(ids, (4, 4))
    grads = []
    for _ in range(3):
        T = tt.from_numpy(np.zeros((3, 8), np.float32), (2, 3)).requires_grad_()
        F.embedding(I, T).backward(tt.from_numpy(dy, (4, 4, 3)))
        grads.append(T.grad.numpy())
    for g in grads[1:]:
        np.testing.assert_array_equal(g, grads[0])


@pytest.mark.parametrize("table_tiles", [(7, 5), (3, 2)])
def test_vjp_embedding(rng, table_tiles):
    ids = rng.integers(0, 7, (4, 6)).astype(np.int64)
    I = tt.from_numpy(ids, (3, 4))
    table = rng.standard_normal((7, 5))
    vjp_check(lambda T: F.embedding(I, T), [table], [table_tiles])
    # through a following op, with the table tiles smaller along C than a matmul needs
    w = rng.standard_normal((5, 3))
    vjp_check(lambda T, W: F.embedding(I, T) @ W, [table, w], [table_tiles, (table_tiles[1], 2)])


def test_tied_embedding_gradients_accumulate(rng):
    # GPT-style weight tying: the table embeds the ids and projects back to logits
    V, C = 9, 6
    ids = rng.integers(0, V, (2, 5)).astype(np.int64)
    table = rng.standard_normal((V, C))
    v = rng.standard_normal((2, 5, V))
    I = tt.from_numpy(ids, (1, 3))
    T = tt.from_numpy(table, (4, 4)).requires_grad_()
    h = F.embedding(I, T)                                    # (2, 5, C)
    logits = F.matmul(h, T, transpose_b=True)                # (2, 5, V)
    logits.backward(tt.from_numpy(v, (1, 3, 4)))
    h_np = table[ids]
    expected = np.einsum("btv,btc->vc", v, h_np)             # through the matmul's weight
    np.add.at(expected, ids.reshape(-1), (v @ table).reshape(-1, C))  # through the gather
    np.testing.assert_allclose(T.grad.numpy(), expected, rtol=1e-12, atol=1e-12)
    vjp_check(lambda T_: F.matmul(F.embedding(I, T_), T_, transpose_b=True), [table], [(4, 4)])


def test_ids_tensor_reused_and_0d(rng):
    table = rng.standard_normal((5, 3))
    T = tt.from_numpy(table, (2, 2))
    y = F.embedding(tt.from_numpy(np.array(4, np.int64)), T)  # a single id: the result is (C,)
    assert y.shape == (3,) and y.tiles == (2,)
    np.testing.assert_array_equal(y.numpy(), table[4])


def test_detached_ids(rng):
    """A detached view of the ids (no known value range of its own) looks them up alike (it
    raised AttributeError: the view had no value_range)."""
    table = rng.standard_normal((5, 3))
    ids = tt.from_numpy(np.array([[1, 4]]))
    y = F.embedding(ids.detach(), tt.from_numpy(table, (2, 2)))
    np.testing.assert_array_equal(y.numpy(), table[[[1, 4]]])


# ---------------------------------------------------------------- bad input

def test_out_of_range_ids(rng, nothing_submitted):
    T = tt.from_numpy(rng.standard_normal((6, 4)), (4, 2))
    ids = np.zeros((3, 4), np.int64)
    ids[1, 2] = 6
    ids[2, 3] = 17
    with pytest.raises(ValueError, match=r"embedding: ids\[1, 2\] = 6 is out of range for a table of 6 rows "
                                         r"\(valid ids: 0\.\.5\); 2 id\(s\) out of range"):
        F.embedding(tt.from_numpy(ids, (2, 2)), T)
    ids[:] = 0
    ids[0, 1] = -1
    with pytest.raises(ValueError, match=r"embedding: ids\[0, 1\] = -1 is out of range"):
        F.embedding(tt.from_numpy(ids, (2, 2)), T)
    with pytest.raises(ValueError, match=r"embedding: ids = 9 is out of range"):
        F.embedding(tt.from_numpy(np.array(9, np.int64)), T)


def test_bad_input(rng, nothing_submitted):
    T = tt.from_numpy(rng.standard_normal((6, 4)), (4, 2))
    ids = tt.from_numpy(np.zeros((2, 3), np.int64))
    with pytest.raises(TypeError, match="embedding: ids must be an int64 tensor, got float64"):
        F.embedding(tt.from_numpy(np.zeros((2, 3))), T)
    with pytest.raises(TypeError, match="embedding: ids must be a tiletrain Tensor, got ndarray"):
        F.embedding(np.zeros((2, 3), np.int64), T)
    with pytest.raises(TypeError, match="embedding: table has dtype int64"):
        F.embedding(ids, tt.from_numpy(np.zeros((6, 4), np.int64)))
    with pytest.raises(TypeError, match="embedding: table must be a tiletrain Tensor"):
        F.embedding(ids, np.zeros((6, 4)))
    with pytest.raises(ValueError, match=r"embedding: table must be 2-D \(V, C\), got shape \(6,\)"):
        F.embedding(ids, tt.from_numpy(np.zeros(6)))
    with pytest.raises(ValueError, match="embedding: ids has 8 axes; at most 7"):
        F.embedding(tt.from_numpy(np.zeros((1,) * 8, np.int64)), T)
    with pytest.raises(TypeError, match="gradients need a float tensor"):
        ids.requires_grad_()


def test_expanders_revalidate_and_kernels_skip_out_of_range_ids(rng):
    """Calling C directly (no Python range check): bad layouts are rejected, and ids outside
    the table are skipped by the kernels: zero rows forward, no contribution backward."""
    table = rng.standard_normal((6, 4))
    T = tt.from_numpy(table, (4, 3))
    ids = np.array([[0, 6, 5], [-1, 3, 1 << 40]], np.int64)
    I = tt.from_numpy(ids, (1, 2))
    y = tt.empty((2, 3, 4), tiles=(1, 2, 3), dtype=np.float64)
    check(lib.tt_embedding(I._ptr, T._ptr, y._ptr))
    ok = (ids >= 0) & (ids < 6)
    expected = np.zeros((2, 3, 4))
    expected[ok] = table[ids[ok]]
    np.testing.assert_array_equal(y.numpy(), expected)
    dy = rng.standard_normal((2, 3, 4))
    DY = tt.from_numpy(dy, (1, 2, 3))
    dT = tt.empty((6, 4), tiles=(4, 3), dtype=np.float64)
    check(lib.tt_embedding_backward(I._ptr, DY._ptr, dT._ptr))
    exp_grad = np.zeros((6, 4))
    np.add.at(exp_grad, ids[ok], dy[ok])
    np.testing.assert_allclose(dT.numpy(), exp_grad, rtol=1e-12)

    # (keep every tensor referenced while C holds its pointer)
    y_tiles = tt.empty((2, 3, 4), tiles=(1, 2, 2), dtype=np.float64)
    y32 = tt.empty((2, 3, 4), tiles=(1, 2, 3), dtype=np.float32)
    unwritten = tt.empty((6, 4), tiles=(4, 3), dtype=np.float64)
    dy_tiles = tt.from_numpy(dy, (1, 2, 2))
    tt.wait()
    before = total_tasks()
    with pytest.raises(ValueError, match="ids must be int64"):
        check(lib.tt_embedding(T._ptr, T._ptr, y._ptr))
    with pytest.raises(ValueError, match=r"output must have the shape and tiles of ids followed by \(4,\) "
                                         r"tiled 3"):
        check(lib.tt_embedding(I._ptr, T._ptr, y_tiles._ptr))
    with pytest.raises(ValueError, match="table and output must share a float dtype"):
        check(lib.tt_embedding(I._ptr, T._ptr, y32._ptr))
    with pytest.raises(ValueError, match="never been written"):
        check(lib.tt_embedding(I._ptr, unwritten._ptr, y._ptr))
    with pytest.raises(ValueError, match="output gradient must have the shape and tiles of ids"):
        check(lib.tt_embedding_backward(I._ptr, dy_tiles._ptr, dT._ptr))
    assert total_tasks() == before


@pytest.mark.parametrize("ids", [[[9]], [[4, 7], [5, 6]], [[3, 8]]])
def test_forward_submits_tasks_only_for_table_tiles_holding_ids(rng, ids):
    """ids inside one or two of the table's row tiles (a decode step's token): one task per
    ids tile, column tile and table tile that holds an id, not one per table tile; the
    rows still equal the table's."""
    table = rng.standard_normal((12, 6))
    T = tt.from_numpy(table, (3, 3))                 # 4 row tiles, 2 column tiles
    ids = np.array(ids, np.int64)
    I = tt.from_numpy(ids, ids.shape)
    tt.wait()
    before = total_tasks()
    y = F.embedding(I, T)
    tt.wait()
    row_tiles = ids.max() // 3 - ids.min() // 3 + 1
    assert total_tasks() - before == 2 * row_tiles
    np.testing.assert_array_equal(y.numpy(), table[ids])


def test_rows_expander_rejects_a_range_outside_the_table(rng):
    T = tt.from_numpy(rng.standard_normal((6, 4)), (3, 4))
    I = tt.from_numpy(np.array([[1]], np.int64), (1, 1))
    y = tt.empty((1, 1, 4), tiles=(1, 1, 4), dtype=np.float64)
    tt.wait()
    before = total_tasks()
    for lo, hi in ((-1, 2), (2, 1), (0, 6)):
        with pytest.raises(ValueError, match=r"id range \[.*\] is not within the table's 6 rows"):
            check(lib.tt_embedding_rows(I._ptr, T._ptr, y._ptr, lo, hi))
    assert total_tasks() == before


def test_argmax_ids_are_embedded_without_reading_them(rng, monkeypatch):
    """An argmax's indices over at most V values are in range by construction: embedding
    takes them without reading (waiting for) them — a decode step embeds the token the
    previous step's tasks are still choosing; written in place, they are checked again."""
    logits = tt.from_numpy(rng.standard_normal((3, 2, 10)), tiles=(2, 2, 4))
    table = tt.from_numpy(rng.standard_normal((10, 5)), tiles=(4, 5))
    ids = tt.argmax(logits, dim=-1)
    assert ids.value_range == (0, 9) and tt.argmax(logits).value_range == (0, 59)
    reads = []
    real = tt.Tensor.numpy
    monkeypatch.setattr(tt.Tensor, "numpy", lambda self, *a, **k: reads.append(self) or real(self, *a, **k))
    y = F.embedding(ids, table)
    assert not any(r is ids for r in reads)
    monkeypatch.undo()
    want = table.numpy()[logits.numpy().argmax(-1)]
    np.testing.assert_array_equal(y.numpy(), want)
    big = np.zeros((3, 12))
    big[0, 11] = 1.0                                              # argmax over 12 values: 11 is beyond the table
    with pytest.raises(ValueError, match="out of range"):
        F.embedding(tt.argmax(tt.from_numpy(big), dim=-1), table)
    tt.fill_(ids, 11)                                             # written in place: read and checked
    assert ids.value_range is None
    with pytest.raises(ValueError, match="out of range"):
        F.embedding(ids, table)


def test_ids_and_targets_from_numpy_are_not_read_back(rng, monkeypatch):
    """from_numpy records an integer array's range (value_range): embedding and cross_entropy
    check it instead of reading the ids back (which waits -- under MPI for another rank's
    worker); a range outside the table still reads them, for the exact message; a write in
    place forgets the range."""
    table = tt.from_numpy(rng.standard_normal((10, 4)), (4, 4))
    a = rng.integers(2, 8, size=(2, 6))
    ids = tt.from_numpy(a, (1, 3))
    assert ids.value_range == (int(a.min()), int(a.max()))
    assert tt.from_numpy(np.zeros((2, 2))).value_range is None            # floats: no range
    logits = tt.from_numpy(rng.standard_normal((2, 6, 10)), (1, 3, 5))
    reads = []
    real = tt.Tensor.numpy
    monkeypatch.setattr(tt.Tensor, "numpy", lambda self, *a, **k: reads.append(self) or real(self, *a, **k))
    y = F.embedding(ids, table)
    loss = cross_entropy_last(logits, ids)
    assert not any(r is ids for r in reads)
    monkeypatch.undo()
    np.testing.assert_array_equal(y.numpy(), table.numpy()[a])
    lg = logits.numpy()
    p = np.exp(lg - lg.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    want = -np.log(np.take_along_axis(p, a[..., None], -1)).mean()
    np.testing.assert_allclose(float(loss), want, rtol=1e-12)
    bad = a.copy()
    bad[1, 4] = 10
    with pytest.raises(ValueError, match=r"ids\[1, 4\] = 10 is out of range for a table of 10 rows"):
        F.embedding(tt.from_numpy(bad, (1, 3)), table)
    with pytest.raises(ValueError, match=r"target 10 at position \(1, 4\) is out of range"):
        cross_entropy_last(logits, tt.from_numpy(bad, (1, 3)))
    ignored = a.copy()
    ignored[0, 0] = -100                                 # ignore_index: read, then accepted
    cross_entropy_last(logits, tt.from_numpy(ignored, (1, 3)))
    tt.fill_(ids, 12)
    assert ids.value_range is None
    with pytest.raises(ValueError, match="out of range"):
        F.embedding(ids, table)


def test_views_of_ids_embed_and_writes_through_a_view_forget_the_range(rng):
    """A view (slice, reshape) of an ids tensor has no range of its own (it takes its base's)
    and embeds like its base; filling a view in place forgets its base's range, so the base is
    read -- and its out-of-range ids refused -- at its next use."""
    table = tt.from_numpy(rng.standard_normal((10, 3)), (10, 3))
    a = np.arange(12, dtype=np.int64).reshape(3, 4) % 10
    ids = tt.from_numpy(a, (1, 4))
    flat = ids.reshape((12,))
    assert flat.value_range is None
    np.testing.assert_array_equal(F.embedding(flat, table).numpy(), table.numpy()[a.reshape(-1)])
    row = ids[1:2]
    np.testing.assert_array_equal(F.embedding(row, table).numpy(), table.numpy()[a[1:2]])
    tt.fill_(row, 40)
    assert ids.value_range is None
    with pytest.raises(ValueError, match=r"ids\[1, 0\] = 40 is out of range"):
        F.embedding(ids, table)


def test_a_batch_sliced_and_stacked_from_ids_keeps_their_range(rng, monkeypatch):
    """nanoGPT's get_batch: slices of a token stream stacked into a batch (region copies)
    keep the stream's range, and a view of the batch its base's, so embedding and
    cross_entropy do not read the batch back (a wait for the copies and for every task
    queued before them, once per step); a write into the batch or through its view forgets
    the range, and an id out of range is then read and refused."""
    table = tt.from_numpy(rng.standard_normal((10, 4)), (10, 4))
    stream = rng.integers(1, 9, size=100)
    tokens = tt.from_numpy(stream)
    starts = [3, 40, 71]
    x = tt.stack([tokens[i:i + 6] for i in starts])
    y = tt.stack([tokens[i + 1:i + 7] for i in starts])
    assert value_range_of(x) == (int(stream.min()), int(stream.max()))
    assert value_range_of(y.view(-1)) == value_range_of(y)
    logits = tt.from_numpy(rng.standard_normal((18, 10)))
    reads = []
    real = tt.Tensor.numpy
    monkeypatch.setattr(tt.Tensor, "numpy", lambda self, *a, **k: reads.append(self) or real(self, *a, **k))
    e = F.embedding(x, table)
    loss = F.cross_entropy(logits, y.view(-1))
    assert reads == []
    monkeypatch.undo()
    want_x = np.stack([stream[i:i + 6] for i in starts])
    want_y = np.stack([stream[i + 1:i + 7] for i in starts]).reshape(-1)
    np.testing.assert_array_equal(e.numpy(), table.numpy()[want_x])
    lg = logits.numpy()
    lse = np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1)) + lg.max(-1)
    np.testing.assert_allclose(float(loss), np.mean(lse - lg[np.arange(18), want_y]), rtol=1e-12)
    x[1, 2] = 10                                          # a write into the batch: read and refused
    assert value_range_of(x) is None
    with pytest.raises(ValueError, match=r"ids\[1, 2\] = 10 is out of range for a table of 10 rows"):
        F.embedding(x, table)
    flat = y.view(-1)
    flat[5] = 11                                          # through the view: the batch forgets too
    assert value_range_of(y) is None and value_range_of(flat) is None
    with pytest.raises(ValueError, match="out of range"):
        F.embedding(y, table)
    both = tt.stack([tokens[0:2], tt.from_numpy(np.array([20, 30]))])  # the hull of the sources' ranges
    assert value_range_of(both) == (int(stream.min()), 30)   # a slice keeps its whole source's range
    assert value_range_of(tt.stack([tokens[0:2], x[0, 0:2]])) is None  # one source of unknown range
