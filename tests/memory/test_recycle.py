"""Recycled tile handles (csrc/tile.c): a freed tensor's registered tile handles with no task
left go to a free list per tile size and the next tensor with tiles of that size takes them
instead of registering new ones; handles with tasks left are unregistered as before (reusing
them would order the new tensor's writers after those tasks); not under a memory limit or MPI;
bounded by TILETRAIN_TILE_RECYCLE_MB (read once per process); a wait unregisters them (their
tasks are done: without StarPU's dependency machinery) and so does shutdown."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tiletrain as tt
from tiletrain._ffi import check, ffi, lib

ROOT = Path(__file__).resolve().parents[2]


def recycled():
    """(handles in the lists, their bytes, tiles new tensors took from them since init)"""
    nbytes, hits = ffi.new("int64_t *"), ffi.new("int64_t *")
    n = lib.tt_tiles_recycled(nbytes, hits)
    return n, nbytes[0], hits[0]


@pytest.fixture
def fresh():
    """Each test starts its own runtime (no recycled handles yet); the suite's default one
    comes back afterwards."""
    tt.shutdown()
    tt.init(ncpu=2)
    yield
    tt.shutdown()


def test_a_freed_tensors_tiles_go_to_the_next_tensor_of_their_size(fresh):
    x = np.arange(64 * 48, dtype=np.float32).reshape(64, 48)
    a, b = tt.from_numpy(x, (16, 16)), tt.from_numpy(x + 1, (16, 16))
    assert recycled() == (0, 0, 0)
    c = a + b
    tt.wait()
    del c
    assert recycled() == (12, 12 * 256 * 4, 0)
    d = a * b  # 12 tiles of 256 float32: every one taken from the list
    assert recycled() == (0, 0, 12)
    np.testing.assert_array_equal(d.numpy(), x * (x + 1))
    del d
    e = tt.from_numpy(np.ones((16, 16), np.float64), (16, 16))  # 256 float64: another size
    assert recycled()[0] == 12 and recycled()[2] == 12
    f = tt.from_numpy(np.full((32, 32), 3, np.float32), (16, 16))  # 4 of the 12
    assert recycled() == (8, 8 * 1024, 16)
    np.testing.assert_array_equal(f.numpy(), 3)
    np.testing.assert_array_equal(e.numpy(), 1)


def test_a_wait_unregisters_the_recycled_tiles_and_frees_their_memory(fresh):
    """Handles freed before a wait have no task left once it returns: it unregisters them, so
    their buffers are given back as before recycling."""
    rt = tt.current()
    x = tt.from_numpy(np.ones((64, 64), np.float64), (32, 32))
    tt.wait()
    before = rt.memory()["allocated_bytes"]
    y = x + x  # 4 new tiles of 8 KiB, allocated when the adds write them
    tt.wait()
    if before is not None:
        assert rt.memory()["allocated_bytes"] - before == 64 * 64 * 8
    del y
    assert recycled()[:2] == (4, 64 * 64 * 8)
    tt.wait()
    assert recycled() == (0, 0, 0)
    if before is not None:
        assert rt.memory()["allocated_bytes"] == before
    z = x * x  # registers new handles
    assert recycled() == (0, 0, 0)
    np.testing.assert_array_equal(z.numpy(), 1.0)


def test_ragged_tiles_are_kept_by_size(fresh):
    """A (70, 50) tensor in (32, 32) tiles has tiles of 1024, 576, 192 and 108 elements."""
    x = np.random.default_rng(0).standard_normal((70, 50)).astype(np.float32)
    a = tt.from_numpy(x, (32, 32))
    y = a * 2.0
    tt.wait()
    del y
    assert recycled()[:2] == (6, 4 * (2 * 1024 + 2 * 576 + 192 + 108))
    b = tt.from_numpy(x[:38, :18].copy(), (32, 18))  # tiles of 576 and 108 elements
    assert recycled()[0] == 4 and recycled()[2] == 2
    c = tt.from_numpy(x.T.copy(), (32, 32))  # (50, 70): 2 x 1024, 2 x 576, 192, 108 elements
    assert recycled()[0] == 0 and recycled()[2] == 6
    z = c * 1.0
    np.testing.assert_array_equal(b.numpy(), x[:38, :18])
    np.testing.assert_array_equal(z.numpy(), x.T)


def test_a_tensor_freed_with_tasks_left_is_not_recycled(fresh):
    """A 0.4 s task still reads x when it is freed: its tile is unregistered after the task, not
    handed to the next tensor of its size."""
    x, b, c, d = (tt.from_numpy(np.full((64, 64), v), (64, 64)) for v in (1.0, 2.0, 3.0, 4.0))
    tt.wait()
    check(lib.tt_spin(x._handle(), b._handle(), c._handle(), d._handle(), 400_000, 1, 0))  # reads all four
    del x
    assert recycled() == (0, 0, 0)
    z = tt.full((64, 64), 5.0, dtype=tt.float64, tiles=(64, 64))
    assert recycled() == (0, 0, 0)
    np.testing.assert_array_equal(z.numpy(), 5.0)
    tt.wait()
    del c  # its task is done
    assert recycled() == (1, 64 * 64 * 8, 0)
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


def test_no_recycling_under_a_memory_limit(fresh):
    tt.shutdown()
    tt.init(ncpu=2, mem_limit="64M")
    x = tt.from_numpy(np.ones((64, 64), np.float32), (16, 16))
    y = x + x
    tt.wait()
    del y
    assert recycled() == (0, 0, 0)
    assert float((x + x).sum()) == 2 * 64 * 64


def test_shutdown_empties_the_lists(fresh):
    x = tt.from_numpy(np.ones((64, 64), np.float32), (16, 16))
    y = x + x
    tt.wait()
    del y
    assert recycled()[0] == 16
    tt.shutdown()
    tt.init(ncpu=2)
    assert recycled() == (0, 0, 0)
    x = tt.from_numpy(np.ones((64, 64), np.float32), (16, 16))
    assert float((x + x).sum()) == 2 * 64 * 64


def _run(env_value: str) -> list[int]:
    script = textwrap.dedent("""
        import numpy as np, tiletrain as tt
        from tiletrain._ffi import ffi, lib
        tt.init(ncpu=2)
        x = tt.from_numpy(np.ones((1024, 1024), np.float32), (256, 256))  # 16 tiles of 256 KiB
        y = x + x
        tt.wait()
        del y
        nbytes, hits = ffi.new("int64_t *"), ffi.new("int64_t *")
        n = lib.tt_tiles_recycled(nbytes, hits)
        b = nbytes[0]
        z = x * x
        left = lib.tt_tiles_recycled(nbytes, hits)
        print("RESULT", n, b, left, hits[0])
        assert float(z.sum()) == 1024 * 1024
        tt.shutdown()
    """)
    env = dict(os.environ, TILETRAIN_TILE_RECYCLE_MB=env_value)
    env.setdefault("STARPU_HOME", str(ROOT / "build" / "starpu-home-test"))
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")]
    assert p.returncode == 0 and lines, p.stdout + p.stderr
    return [int(v) for v in lines[0].split()[1:]]


def test_the_lists_are_bounded_by_TILETRAIN_TILE_RECYCLE_MB():
    assert _run("1") == [4, 1 << 20, 0, 4]  # 4 of the 16 tiles fit in 1 MiB; z takes them
    assert _run("0") == [0, 0, 0, 0]        # 0: no recycling
    assert _run("") == [16, 4 << 20, 0, 16]  # the default, 256 MiB
