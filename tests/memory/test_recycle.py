"""Reuse of freed tiles (csrc/tile.c, "reuse of freed tiles"): one mechanism, one cap, one
switch.  A freed tensor's tile handles go to lists per tile size -- idle (no task left: kept with
their buffers) or pending (tasks left: their buffers go back to the buffer pool when the last
task ends, and the handle is reused only then) -- and the next tensor with tiles of that size
takes them instead of registering new ones.  No handles are kept under a memory limit or MPI;
no buffers under a memory limit; everything kept counts against one cap (reuse_mb,
TILETRAIN_REUSE_MB); a wait unregisters the kept handles (their tasks are done: without
StarPU's dependency machinery) and so does shutdown."""
import numpy as np
import pytest

import tiletrain as tt
from tiletrain._ffi import check, ffi, lib

HANDLE_COST = 6 << 10  # what the cap counts per kept handle (csrc/tile.c HANDLE_COST)


def reuse():
    """The C library's counts: idle, idle_bytes, pending, pending_bytes, taken, buffer_bytes,
    kept_bytes, cap_bytes, handles, buffers."""
    s = ffi.new("tt_reuse_stats *")
    check(lib.tt_reuse_get_stats(s))
    return {k: getattr(s, k) for k in ("idle", "idle_bytes", "pending", "pending_bytes", "taken", "buffer_bytes",
                                       "kept_bytes", "cap_bytes", "handles", "buffers")}


def kept():
    """(idle handles, their bytes, tiles taken since init)"""
    r = reuse()
    return r["idle"], r["idle_bytes"], r["taken"]


@pytest.fixture
def fresh():
    """Each test starts its own runtime (nothing kept yet); the suite's default one comes back
    afterwards."""
    tt.shutdown()
    tt.init(ncpu=2)
    yield
    tt.shutdown()


def test_a_freed_tensors_tiles_go_to_the_next_tensor_of_their_size(fresh):
    x = np.arange(64 * 48, dtype=np.float32).reshape(64, 48)
    a, b = tt.from_numpy(x, (16, 16)), tt.from_numpy(x + 1, (16, 16))
    assert kept() == (0, 0, 0)
    c = a + b
    tt.wait()
    del c
    assert kept() == (12, 12 * 256 * 4, 0)
    assert reuse()["kept_bytes"] == 12 * (256 * 4 + HANDLE_COST)
    d = a * b  # 12 tiles of 256 float32: every one taken from the list
    assert kept() == (0, 0, 12) and reuse()["kept_bytes"] == 0
    np.testing.assert_array_equal(d.numpy(), x * (x + 1))
    del d
    e = tt.from_numpy(np.ones((16, 16), np.float64), (16, 16))  # 256 float64: another size
    assert kept()[0] == 12 and kept()[2] == 12
    f = tt.from_numpy(np.full((32, 32), 3, np.float32), (16, 16))  # 4 of the 12
    assert kept() == (8, 8 * 1024, 16)
    np.testing.assert_array_equal(f.numpy(), 3)
    np.testing.assert_array_equal(e.numpy(), 1)


def test_a_wait_unregisters_the_kept_tiles_and_frees_their_memory(fresh):
    """Handles freed before a wait have no task left once it returns: it unregisters them, so
    StarPU gives their buffers back (to the buffer pool)."""
    rt = tt.current()
    x = tt.from_numpy(np.ones((64, 64), np.float64), (32, 32))
    tt.wait()
    before = rt.memory()["allocated_bytes"]
    y = x + x  # 4 new tiles of 8 KiB, allocated when the adds write them
    tt.wait()
    if before is not None:
        assert rt.memory()["allocated_bytes"] - before == 64 * 64 * 8
    del y
    assert kept()[:2] == (4, 64 * 64 * 8)
    tt.wait()
    assert kept()[:2] == (0, 0) and reuse()["pending"] == 0
    if before is not None:
        assert rt.memory()["allocated_bytes"] == before
        assert reuse()["buffer_bytes"] == 64 * 64 * 8  # the pool keeps them, under the same cap
        assert reuse()["kept_bytes"] == 64 * 64 * 8
    z = x * x  # registers new handles (its buffers: the pool's)
    assert kept() == (0, 0, 0)
    np.testing.assert_array_equal(z.numpy(), 1.0)


def test_ragged_tiles_are_kept_by_size(fresh):
    """A (70, 50) tensor in (32, 32) tiles has tiles of 1024, 576, 192 and 108 elements."""
    x = np.random.default_rng(0).standard_normal((70, 50)).astype(np.float32)
    a = tt.from_numpy(x, (32, 32))
    y = a * 2.0
    tt.wait()
    del y
    assert kept()[:2] == (6, 4 * (2 * 1024 + 2 * 576 + 192 + 108))
    b = tt.from_numpy(x[:38, :18].copy(), (32, 18))  # tiles of 576 and 108 elements
    assert kept()[0] == 4 and kept()[2] == 2
    c = tt.from_numpy(x.T.copy(), (32, 32))  # (50, 70): 2 x 1024, 2 x 576, 192, 108 elements
    assert kept()[0] == 0 and kept()[2] == 6
    z = c * 1.0
    np.testing.assert_array_equal(b.numpy(), x[:38, :18])
    np.testing.assert_array_equal(z.numpy(), x.T)


def test_a_tensor_freed_with_tasks_left_is_reused_when_its_last_task_ends(fresh):
    """A 0.4 s task still reads x when it is freed: x's tile goes to the pending list; a new
    tensor of its size made meanwhile registers a tile of its own (it does not wait behind the
    task); once the task has ended, x's buffer is back (in the buffer pool) and the next new
    tensor of its size takes x's handle."""
    rt = tt.current()
    x, b, d = (tt.from_numpy(np.full((64, 64), v), (64, 64)) for v in (1.0, 2.0, 4.0))
    c = tt.zeros((64, 64), dtype=tt.float64, tiles=(64, 64))
    tt.wait()
    check(lib.tt_spin(x._handle(), b._handle(), c._handle(), d._handle(), 400_000, 1, 1))  # reads x, b, d; writes c
    del x
    z = tt.full((64, 64), 5.0, dtype=tt.float64, tiles=(64, 64))
    assert kept()[2] == 0  # x's tile was not taken: its task still runs
    np.testing.assert_array_equal(z.numpy(), 5.0)  # (written without waiting for the spin)
    c.numpy()  # the spin has ended
    r = reuse()
    assert (r["pending"], r["pending_bytes"]) == (1, 64 * 64 * 8), r
    if rt.memory()["allocated_bytes"] is not None:
        assert r["buffer_bytes"] >= 64 * 64 * 8  # x's buffer: in the pool
    w = tt.full((64, 64), 7.0, dtype=tt.float64, tiles=(64, 64))
    assert reuse()["pending"] == 0 and kept()[2] == 1  # x's handle
    np.testing.assert_array_equal(w.numpy(), 7.0)
    np.testing.assert_array_equal(b.numpy() + d.numpy(), 6.0)


def test_tensors_freed_with_gemms_left_on_their_tiles(fresh):
    """Frees while gemms still read the freed tiles, then new tensors of that size filled at
    once: the gemms see the old values, the new tensors theirs."""
    rng = np.random.default_rng(1)
    xs, ws = rng.standard_normal((256, 256)), rng.standard_normal((256, 1024))
    w = tt.from_numpy(ws, (128, 128))
    for _ in range(3):
        tt.wait()
        x = tt.from_numpy(xs, (128, 128))
        ys = [x @ w for _ in range(3)]  # 3 x 16 gemm tasks reading x's tiles
        del x
        z = tt.full((256, 256), 7.0, dtype=tt.float64, tiles=(128, 128))
        for y in ys:
            np.testing.assert_allclose(y.numpy(), xs @ ws, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(z.numpy(), 7.0)
        del ys, z


def test_a_tensor_freed_before_its_gemms_ran(fresh):
    """A tensor freed before its producing gemms ran: the new tensor's fill comes after them."""
    rng = np.random.default_rng(2)
    a = tt.from_numpy(rng.standard_normal((512, 512)), (128, 128))
    for _ in range(3):
        tt.wait()
        p = a @ a  # 16 tiles, each written by 4 gemm tasks
        del p      # never read
        z = tt.full((512, 512), -1.5, dtype=tt.float64, tiles=(128, 128))
        np.testing.assert_array_equal(z.numpy(), -1.5)
        del z


def test_a_decode_loop_reuses_its_temporaries(fresh):
    """The pattern generation has (tiletrain.inference.generate): each round makes the same
    temporaries and reads a value; from the second round on, they take the tiles of the
    rounds before instead of registering new ones, and the results are those without reuse."""
    rng = np.random.default_rng(3)
    x_np, w_np = rng.standard_normal((8, 64)), rng.standard_normal((64, 64)) * 0.1
    x, w = tt.from_numpy(x_np, (8, 32)), tt.from_numpy(w_np, (32, 32))
    want = x_np
    for step in range(6):
        h = (x @ w).tanh()
        x = h * 0.5 + 1.0
        want = np.tanh(want @ w_np) * 0.5 + 1.0
        np.testing.assert_allclose(x.numpy(), want, rtol=1e-12)
        if step == 0:
            first = kept()[2]
    assert kept()[2] > first + 4 * 4  # each later round took tiles kept by the ones before


def test_nothing_is_kept_under_a_memory_limit(fresh):
    tt.shutdown()
    tt.init(ncpu=2, mem_limit="64M")
    r = reuse()
    assert (r["handles"], r["buffers"]) == (0, 0)
    x = tt.from_numpy(np.ones((64, 64), np.float32), (16, 16))
    y = x + x
    tt.wait()
    del y
    assert kept() == (0, 0, 0) and reuse()["kept_bytes"] == 0
    assert float((x + x).sum()) == 2 * 64 * 64


def test_shutdown_empties_the_lists(fresh):
    x = tt.from_numpy(np.ones((64, 64), np.float32), (16, 16))
    y = x + x
    tt.wait()
    del y
    assert kept()[0] == 16
    tt.shutdown()
    tt.init(ncpu=2)
    assert kept() == (0, 0, 0) and reuse()["kept_bytes"] == 0
    x = tt.from_numpy(np.ones((64, 64), np.float32), (16, 16))
    assert float((x + x).sum()) == 2 * 64 * 64


def _kept_after_a_free(**init) -> tuple[int, int, int, int]:
    tt.shutdown()
    tt.init(ncpu=2, **init)
    x = tt.from_numpy(np.ones((1024, 1024), np.float32), (256, 256))  # 16 tiles of 256 KiB
    y = x + x
    tt.wait()
    del y
    n, nbytes, _ = kept()
    z = x * x
    left, _, taken = kept()
    assert float(z.sum()) == 1024 * 1024
    return n, nbytes, left, taken


def test_one_cap_bounds_what_is_kept(fresh, monkeypatch):
    per_tile = (256 << 10) + HANDLE_COST
    assert reuse()["cap_bytes"] == tt.config.REUSE_MB << 20
    assert _kept_after_a_free(reuse_mb=1) == (3, 3 << 18, 0, 3)  # 3 of the 16 tiles fit in 1 MiB
    assert reuse()["cap_bytes"] == 1 << 20 and 3 * per_tile <= 1 << 20 < 4 * per_tile
    assert _kept_after_a_free(reuse_mb=0) == (0, 0, 0, 0)  # 0: nothing kept
    assert (reuse()["handles"], reuse()["buffers"]) == (0, 0)
    monkeypatch.setenv("TILETRAIN_REUSE_MB", "2")
    assert _kept_after_a_free() == (7, 7 << 18, 0, 7)
    monkeypatch.delenv("TILETRAIN_REUSE_MB")
    assert _kept_after_a_free() == (16, 4 << 20, 0, 16)  # the default, 1024 MiB


def test_the_old_cap_variables_are_refused(monkeypatch):
    for name in ("TILETRAIN_TILE_RECYCLE_MB", "TILETRAIN_BUFFER_POOL_MB"):
        monkeypatch.setenv(name, "64")
        with pytest.raises(ValueError, match=f"{name} is gone: one cap, TILETRAIN_REUSE_MB"):
            tt.config.RuntimeConfig.resolve()
        monkeypatch.delenv(name)
