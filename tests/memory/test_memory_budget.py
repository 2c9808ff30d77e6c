"""The memory budget (README "Memory budget"): tt.init(mem_limit=..., ooc_dir=...) caps
StarPU's CPU memory; tiles evicted under the cap go to a disk memory node.  A GPT whose
weights + gradients + AdamW state are >= 4x the cap trains out of core with the in-memory
losses and StarPU never holds more tile bytes than the cap; what cannot work raises a clear
error instead of hanging."""
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import tiletrain as tt
from tiletrain._ffi import lib
from tiletrain.config import RuntimeConfig, parse_bytes

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh():
    """Each test starts its own runtimes; the suite's default one comes back afterwards."""
    tt.shutdown()
    yield
    tt.shutdown()


def _gpt_steps(steps=3, **init):
    """Losses of `steps` AdamW steps of a 2-layer GPT (1.66 M parameters: weights + grads +
    AdamW state 26.6 MB), StarPU's used bytes for tiles (less the tiles' structures) sampled
    every 2 ms, the pool's exact peak of tile bytes, and the live tensor bytes at the end."""
    from tiletrain.nn import GPT, GPTConfig
    from tiletrain.nn.gpt import Tiling
    rt = tt.init(ncpu=2, **init)
    try:
        cfg = GPTConfig(vocab_size=256, block_size=64, n_layer=2, n_head=4, n_embd=256)
        model = GPT(cfg, tiling=Tiling(width=128, hidden=256, vocab=256, batch=4, time=64), seed=0)
        opt = tt.optim.AdamW(model.parameters(), lr=1e-3)
        rng = np.random.default_rng(0)
        x, y = (rng.integers(0, 256, (4, 64)) for _ in range(2))
        peak, on_disk, done = [0], [0], threading.Event()
        disk = rt.memory()["disk_node"]

        def sample():
            while not done.is_set():
                m = rt.memory()  # StarPU's used bytes count the tiles' structures and the rest too
                peak[0] = max(peak[0], (m["starpu_used_bytes"] or 0) - (m["tile_structures_bytes"] or 0)
                              - (m["other_process_bytes"] or 0))
                if disk is not None:
                    on_disk[0] = max(on_disk[0], lib.tt_memory_used(disk))
                time.sleep(0.002)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        losses = []
        for _ in range(steps):
            loss = model.loss(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(float(loss))
        tt.wait()
        done.set()
        sampler.join()
        m = rt.memory()
        m["peak_on_disk"] = on_disk[0]
        # weights, gradients, AdamW's two moments
        m["state_bytes"] = 4 * sum(p.detach().numpy().nbytes for p in model.parameters())
        return np.array(losses), peak[0], m
    finally:
        tt.shutdown()


def test_gpt_trains_out_of_core_with_the_in_memory_losses(fresh, tmp_path):
    ref, _, m_ref = _gpt_steps()
    limit = 6 << 20
    assert m_ref["state_bytes"] >= 4 * limit, m_ref
    got, sampled, m = _gpt_steps(mem_limit="6M", ooc_dir=tmp_path)
    assert m["disk_node"] is not None and m["starpu_limit_bytes"] == limit
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=0)
    assert 0 < sampled <= limit, sampled
    # the hooks see every tile buffer StarPU allocates in main memory: the exact peak
    assert m["peak_allocated_bytes"] is not None and m["peak_allocated_bytes"] <= limit, m
    assert m["live_tensor_bytes"] >= 3 * limit  # weights + AdamW state now: most of it lives on disk
    assert m["peak_on_disk"] >= 2 * limit, m  # StarPU's own count of the bytes on the disk node
    assert not any(tmp_path.iterdir())  # StarPU removed its files at shutdown


def test_mem_limit_sizes_and_bad_values():
    assert parse_bytes("512M") == 512 << 20
    assert parse_bytes("2G") == 2 << 30
    assert parse_bytes("1.5GiB") == 3 << 29
    assert parse_bytes(" 64 mb ") == 64 << 20
    assert parse_bytes(4 << 20) == 4 << 20
    for bad in ("lots", "2X", "-1G", ""):
        with pytest.raises(ValueError, match="not a size"):
            parse_bytes(bad)
    with pytest.raises(ValueError, match="at least 1 MiB"):
        parse_bytes(1000)
    with pytest.raises(TypeError, match="mem_limit must be"):
        parse_bytes(2.5)
    with pytest.raises(ValueError, match="needs a memory limit"):
        RuntimeConfig.resolve(ooc_dir="/tmp")
    with pytest.raises(ValueError, match="not an existing directory"):
        RuntimeConfig.resolve(memory_limit_mb=64, ooc_dir="/nonexistent/tiletrain-ooc")


def test_mem_limit_and_memory_limit_mb_must_agree(fresh):
    with pytest.raises(ValueError, match="disagree"):
        tt.init(mem_limit="2G", memory_limit_mb=1024)


def test_a_task_whose_tiles_exceed_the_limit_is_refused(fresh, tmp_path):
    rt = tt.init(ncpu=2, mem_limit="16M", ooc_dir=tmp_path)
    try:
        a = tt.from_numpy(np.ones((1024, 2048), np.float32), (1024, 2048))  # one 8 MiB tile
        b = tt.from_numpy(np.ones((2048, 1024), np.float32), (2048, 1024))
        with pytest.raises(MemoryError, match=r"gemm: one task needs 20971520 bytes of tiles .* above the "
                                              r"memory limit of 16777216 bytes .*float32 tensor of shape "
                                              r"\((1024, 2048|2048, 1024)\)"):
            a @ b  # 8 + 8 MiB of operand tiles and a 4 MiB output tile: one task cannot fit
        with pytest.raises(MemoryError, match=r"one tile of a float32 tensor of shape \(4096, 2048\) in "
                                              r"tiles of \(4096, 2048\) is 33554432 bytes"):
            tt.zeros(4096, 2048, tiles=(4096, 2048))
        assert float((a @ tt.from_numpy(np.ones((2048, 8), np.float32), (256, 8))).sum()) == 1024 * 8 * 2048
        del rt
    finally:
        tt.shutdown()


def test_without_a_disk_node_live_tensors_beyond_the_limit_are_refused(fresh):
    tt.init(ncpu=2, mem_limit="8M")
    keep = tt.zeros(1024, 1024, tiles=(256, 256))  # 4 MiB
    with pytest.raises(MemoryError, match=r"needs 8388608 bytes; live tensors hold 4194304 bytes and StarPU's "
                                          r"structures for their tiles \d+, and the memory limit is 8388608 bytes "
                                          r".* no disk node"):
        tt.zeros(2048, 1024, tiles=(256, 256))
    assert float(keep.sum()) == 0.0


def test_the_tiles_structures_count_against_the_limit(fresh, tmp_path):
    """StarPU's structures for each registered tile (several KiB, whatever the tile's size)
    are counted in its used bytes under a cap, from registration to unregistration: out of
    core, thousands of evicted tiles would otherwise hold tens of MiB beyond the cap.  Tensors
    whose structures would leave no room for a task's tiles are refused (StarPU would wait for
    memory forever)."""
    rt = tt.init(ncpu=2, mem_limit="8M", ooc_dir=tmp_path)
    try:
        assert rt.memory()["tile_structures_bytes"] == 0
        x = tt.zeros(64, 64, tiles=(8, 8))  # 64 tiles of 256 bytes, not yet allocated
        per_tile = rt.memory()["tile_structures_bytes"] / 64
        assert per_tile > 1024 and per_tile == int(per_tile), per_tile  # measured at init: ~7 KiB here
        float(x.sum())
        m = rt.memory()
        assert m["starpu_used_bytes"] >= m["allocated_bytes"] + 64 * per_tile, m
        del x
        tt.wait()
        assert rt.memory()["tile_structures_bytes"] == 0
    finally:
        tt.shutdown()
    tt.init(ncpu=2, mem_limit="1M")
    keep = tt.zeros(64, 64, tiles=(64, 64))  # 16 KiB in one tile: its structures are counted too
    n = int(2 * (1 << 20) / per_tile)  # tiles whose structures alone take 2 MiB, for a few KiB of data
    with pytest.raises(MemoryError, match=rf"shape \({n}, 1\) .* would bring StarPU's structures for the registered "
                                          rf"tiles \({n + 1} tiles, \d+ bytes each\) to \d+ bytes, .* "
                                          rf"passes the memory limit of 1048576 bytes"):
        tt.zeros(n, 1, tiles=(1, 1), dtype="float64")
    assert float(keep.sum()) == 0.0


REST_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tiletrain as tt
    rt = tt.init(ncpu=2, mem_limit="64M", ooc_dir=sys.argv[1] if len(sys.argv) > 1 else None)
    own = np.ones(12 << 18, np.float32)  # 12 MiB of the program's own, resident
    xs = [tt.full((512, 512), float(i), tiles=(128, 128)) for i in range(24)]  # 24 MiB of tiles
    for x in xs:
        float(x.sum())
    first = rt.memory()
    ys = [x + 1.0 for x in xs]  # 24 MiB more: past the cap with the rest counted, tiles go to disk
    sums = [float(y.sum()) for y in ys]
    print(json.dumps({"first": first, "then": rt.memory(), "sums": sums, "own": float(own.sum())}))
    tt.shutdown()
""")


def test_out_of_core_the_rest_of_the_process_counts_against_the_limit(tmp_path):
    """With a disk node (one process), what the process holds beyond its size at init, its
    tile buffers and their structures -- here a 12 MiB array of the program's own -- is
    counted against the cap, at most a quarter of it: StarPU keeps fewer tile bytes in
    memory.  Without a disk node (nothing could make room) it is not.  (A fresh interpreter:
    one that ran other tests reuses freed pages, and its RSS does not grow.)"""
    def run(*args):
        p = subprocess.run([sys.executable, "-c", REST_SCRIPT, *args], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        return json.loads(p.stdout.strip().splitlines()[-1])
    got = run(str(tmp_path))
    m = got["first"]
    assert 10 << 20 <= m["other_process_bytes"] <= 16 << 20, m  # the 12 MiB; a quarter of 64 MiB at most
    m = got["then"]
    assert got["sums"] == [512 * 512 * (i + 1.0) for i in range(24)]
    assert m["allocated_bytes"] <= m["starpu_limit_bytes"] - m["other_process_bytes"], m
    assert run()["then"]["other_process_bytes"] == 0


def test_a_full_disk_node_is_an_error_before_the_step(fresh, tmp_path):
    """The disk node's size (ooc_size) cannot hold what must live beyond the limit."""
    from tiletrain.nn import GPT, GPTConfig
    from tiletrain.nn.gpt import Tiling
    tt.init(ncpu=2, mem_limit="4M", ooc_dir=tmp_path, ooc_size="16M")
    cfg = GPTConfig(vocab_size=256, block_size=64, n_layer=4, n_head=4, n_embd=512)
    with pytest.raises(RuntimeError, match=r"disk node full: \d+ bytes of tiles must live beyond the memory "
                                           r"limit, the disk node in .* takes 14680064 \(7/8 of its 16777216 "
                                           r"bytes, ooc_size\): raise ooc_size or mem_limit"):
        GPT(cfg, tiling=Tiling(width=128, hidden=256, vocab=256), seed=0)  # 12.7 M parameters: 51 MB


def test_a_disk_node_directory_that_disappears_is_a_clear_error_and_the_checkpoint_stays(tmp_path):
    """The out-of-core directory is removed between steps: the next step raises instead of
    hanging, and the checkpoint written before is intact.  (StarPU 1.3 then aborts the
    process at shutdown, when it reopens the lost tiles' files: a message says why.)"""
    ooc = tmp_path / "ooc"
    ooc.mkdir()
    script = textwrap.dedent(f"""
        import shutil, numpy as np
        import tiletrain as tt, tiletrain.checkpoint as ck
        from tiletrain.nn import GPT, GPTConfig
        from tiletrain.nn.gpt import Tiling
        tt.init(ncpu=2, mem_limit="6M", ooc_dir={str(ooc)!r})
        cfg = GPTConfig(vocab_size=256, block_size=64, n_layer=2, n_head=4, n_embd=256)
        model = GPT(cfg, tiling=Tiling(width=128, hidden=256, vocab=256, batch=4, time=64), seed=0)
        opt = tt.optim.AdamW(model.parameters(), lr=1e-3)
        x = np.random.default_rng(0).integers(0, 256, (4, 64))
        def step():
            loss = model.loss(x, x); loss.backward(); opt.step(); opt.zero_grad(); return float(loss)
        step()
        ck.save({str(tmp_path / "ckpt.safetensors")!r}, model.state_dict(), {{"step": 1}})
        tt.wait()
        shutil.rmtree({str(ooc)!r})
        try:
            step()
        except RuntimeError as e:
            print("ERROR:", e, flush=True)
    """)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("STARPU_HOME", str(ROOT / "build" / "starpu-home-test"))
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    out = p.stdout + p.stderr
    assert f"ERROR: disk node: its directory {ooc} is gone" in out, out
    import tiletrain.checkpoint as ck
    arrays, meta = ck.load(tmp_path / "ckpt.safetensors")
    assert meta["step"] == 1 and len(arrays) > 10 and all(np.isfinite(a).all() for a in arrays.values())


def test_train_cli_takes_mem_limit_and_ooc_dir(tmp_path):
    from tiletrain.train import TrainArgs
    TrainArgs(mem_limit="2G", ooc_dir=str(tmp_path)).validate()
    with pytest.raises(ValueError, match="--ooc-dir needs --mem-limit"):
        TrainArgs(ooc_dir=str(tmp_path)).validate()
    with pytest.raises(ValueError, match="--mem-limit='lots' is not a size"):
        TrainArgs(mem_limit="lots").validate()


def test_train_cli_over_the_cap_says_so_in_one_line(tmp_path):
    """A cap too small for the model, no disk node: one error line naming the tensor and the
    bytes and exit status 1, not a traceback."""
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "tiletrain", "train", "--ckpt-dir", str(tmp_path / "run"),
                        "--mem-limit", "1M", "--steps", "2", "--n-layer", "1", "--n-embd", "256", "--no-progress",
                        "--ncpu", "1"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith("tiletrain: error: tensor_new: a float32 tensor of shape"), p.stderr
    assert "memory limit is 1048576 bytes" in p.stderr and "--ooc-dir" in p.stderr, p.stderr


@pytest.mark.parametrize("async_free", ["1", "0"])
def test_dropped_tensors_are_freed_by_the_next_wait(fresh, monkeypatch, async_free):
    """Dropping a tensor hands its tiles to the reaper thread (TILETRAIN_ASYNC_FREE=0: the
    caller unregisters them); either way wait() returns with them unregistered: StarPU's
    used bytes (which include its cache of freed buffers, reused) stay about flat round after
    round instead of growing by a tensor each time.  (Without the wait in each round the
    reaper may still hold one round's y when the next is allocated, and StarPU's cache then
    keeps both: a 1 MiB step that depends on thread timing, not a leak.)"""
    monkeypatch.setenv("TILETRAIN_ASYNC_FREE", async_free)
    rt = tt.init(ncpu=2, mem_limit="64M")
    x = tt.from_numpy(np.ones((512, 512), np.float32), (64, 64))

    def rounds(n):
        for _ in range(n):
            y = x * 2.0  # 64 tiles of 16 KiB
            assert float(y.sum()) == 2 * 512 * 512
            del y
            tt.wait()  # the reaper has unregistered y: the next round's y reuses its buffers
        return rt.memory()

    first = rounds(3)
    later = rounds(10)
    assert later["live_tensor_bytes"] == first["live_tensor_bytes"] == 512 * 512 * 4
    # a leak would add 1 MiB a round (10 MiB); StarPU's cache may keep a few more buffers
    assert later["starpu_used_bytes"] - first["starpu_used_bytes"] < 1 << 20, (first, later)


def test_checkpoint_and_resume_under_a_budget_equal_an_uninterrupted_run(fresh, tmp_path):
    """`tiletrain train --mem-limit --ooc-dir`: stopped after 2 of 4 steps with a checkpoint,
    then resumed (both under a 3 MiB cap with a disk node, of which StarPU's structures for the
    ~330 tiles take 1.8 MiB; weights + grads + AdamW state are 1.8 MiB), the losses are the
    uninterrupted in-memory run's."""
    from tiletrain.train import TrainArgs, train
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("def add(a, b):\n    return a + b\n\nclass Tile:\n    pass\n" * 400)
    ooc = tmp_path / "ooc"
    ooc.mkdir()
    kw = dict(data=[str(corpus)], n_layer=2, n_head=2, n_embd=64, seq_len=16, batch=4, steps=4, warmup=1,
              eval_every=0, sample_tokens=0, progress=False, val_fraction=0.1, tiles=(2, 16, 64), seed=3,
              ncpu=2)
    ref = train(TrainArgs(**kw, run_dir=str(tmp_path / "ref"))).train_losses
    budget = dict(mem_limit="3M", ooc_dir=str(ooc), ckpt_dir=str(tmp_path / "ck"))
    first = train(TrainArgs(**kw, **budget, stop_after=2)).train_losses
    rest = train(TrainArgs(**kw, **budget, resume=True)).train_losses
    assert len(ref) == 4
    np.testing.assert_allclose(list(first) + list(rest), ref, rtol=1e-6, atol=0)
