"""Model construction, checkpoint save and checkpoint load stream a block of tile rows at a
time (README "Memory budget"): under a small mem_limit with a disk node, a model several
times the cap is built, saved and loaded with a peak RSS growth far below the model's size,
and the file and the loaded weights equal the in-memory path's."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tiletrain.checkpoint as ck

ROOT = Path(__file__).resolve().parents[2]
# 4 layers of width 512 and a 16384-token vocabulary: 21 M parameters, 84 MB in float32, the
# token table alone 32 MB (a float64 draw of it would be 64 MB)
CONFIG = "GPTConfig(vocab_size=16384, block_size=64, n_layer=4, n_head=4, n_embd=512)"
TILING = "Tiling(width=256, hidden=512, vocab=256)"

SCRIPT = textwrap.dedent("""
    import json, sys
    from tiletrain.testing.memory import peak_growth
    import tiletrain as tt, tiletrain.checkpoint as ck
    from tiletrain.nn import GPT, GPTConfig
    from tiletrain.nn.gpt import Tiling
    from tiletrain.nn.pretrained import model_tensors
    limit, ooc, path = sys.argv[1:4]
    tt.init(ncpu=2, mem_limit=limit, ooc_dir=ooc)
    res = {}
    def phase(name, fn):
        out, res[name] = peak_growth(fn)
        return out
    model = phase("construct", lambda: GPT(%s, tiling=%s, seed=0))
    res["model_bytes"] = sum(p.numel() * 4 for p in model.parameters())
    phase("save", lambda: ck.save(path, model_tensors(model), {"step": 1}))
    del model
    other = GPT(%s, tiling=%s, seed=1)
    phase("load", lambda: other.load_state_dict(ck.load(path, lazy=True)[0]))
    sums = json.loads(ck.SafetensorsFile(path).metadata["checksums"])
    res["loaded_equal"] = all(ck.checksum(p.detach().numpy()) == sums[n] for n, p in other.named_parameters())
    res["used"] = tt.runtime.current().memory()["starpu_used_bytes"]
    print("RESULT", json.dumps(res), flush=True)
""") % (CONFIG, TILING, CONFIG, TILING)


@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK), reason="needs /proc/self/clear_refs")
def test_construct_save_and_load_stream_under_a_small_cap(tmp_path):
    ooc = tmp_path / "ooc"
    ooc.mkdir()
    path = tmp_path / "big.safetensors"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("STARPU_HOME", str(ROOT / "build" / "starpu-home-test"))
    p = subprocess.run([sys.executable, "-c", SCRIPT, "16M", str(ooc), str(path)], capture_output=True,
                       text=True, timeout=600, env=env)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, p.stdout + p.stderr
    res = json.loads(lines[0][len("RESULT "):])
    size = res["model_bytes"]
    assert size > 5 * (16 << 20)  # the weights alone are 5x the cap
    # the whole model never passes through host memory: the cap's resident tiles, StarPU's
    # handles (~5 KB per tile) and one block of tile rows (a full copy would be >= size)
    assert res["construct"] < size / 2, res
    assert res["save"] < size / 4, res
    assert res["load"] < size / 4, res
    assert res["loaded_equal"], res
    assert res["used"] <= 16 << 20, res

    # the same model built in memory (this process, no cap) writes the same bytes
    from tiletrain.nn import GPT, GPTConfig  # noqa: F401  (the names CONFIG and TILING use)
    from tiletrain.nn.gpt import Tiling  # noqa: F401
    model = eval(f"GPT({CONFIG}, tiling={TILING}, seed=0)")
    stored, _ = ck.load(path, lazy=True)
    assert sorted(stored) == sorted(n for n, _ in model.named_parameters())
    for name, p in model.named_parameters():
        np.testing.assert_array_equal(p.detach().numpy(), stored[name].numpy(), err_msg=name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tile_rows_round_trip_with_a_smaller_last_tile(dtype):
    from tiletrain.tensors import empty, from_numpy
    from tiletrain.tensors.tensor import read_rows, tile_rows, write_rows_
    a = np.random.default_rng(0).standard_normal((10, 7, 3)).astype(dtype)  # tiles (4, 3, 3): 4+4+2 rows
    t = empty(a.shape, dtype=dtype, tiles=(4, 3, 3))
    runs = list(tile_rows(t, max_bytes=4 * 21 * a.itemsize))  # one tile row per run
    assert [(lo, hi, r0, r1) for lo, hi, r0, r1 in runs] == [(0, 1, 0, 4), (1, 2, 4, 8), (2, 3, 8, 10)]
    for lo, hi, r0, r1 in reversed(runs):
        write_rows_(t, lo, hi, a[r0:r1])
    np.testing.assert_array_equal(t.numpy(), a)
    src = from_numpy(a[::-1].copy(), tiles=(4, 3, 3))
    lo, hi, r0, r1 = next(tile_rows(src, max_bytes=1 << 20))  # everything in one run
    assert (lo, hi, r0, r1) == (0, 3, 0, 10)
    np.testing.assert_array_equal(read_rows(src, 0, 3, np.empty(a.shape, dtype)), a[::-1])
    write_rows_(t, 1, 3, a[::-1][4:].T.copy().T)  # any strides
    np.testing.assert_array_equal(t.numpy()[4:], a[::-1][4:])
    with pytest.raises(ValueError, match=r"tile rows \[1, 2\) of a \(10, 7, 3\).*need a \(4, 7, 3\)"):
        write_rows_(t, 1, 2, a[:2])
    with pytest.raises(ValueError, match=r"tile rows \[2, 4\) outside \[0, 3\)"):
        read_rows(t, 2, 4, np.empty((2, 7, 3), dtype))
    # to one rank: in one process rank 0 is the only root, and it needs a buffer
    np.testing.assert_array_equal(read_rows(t, 0, 1, np.empty((4, 7, 3), dtype), root=0), a[:4])
    with pytest.raises(ValueError, match=r"root 1 is not a rank \(world size 1\)"):
        read_rows(t, 0, 1, np.empty((4, 7, 3), dtype), root=1)
    with pytest.raises(TypeError, match="read_rows: expected a numpy.ndarray, got NoneType"):
        read_rows(t, 0, 1, None, root=0)
    with pytest.raises(TypeError, match="write_rows_: expected a numpy.ndarray, got NoneType"):
        write_rows_(t, 0, 1, None)  # (no data: only under MPI, for a rank owning none of the tiles)


def test_save_tensors_and_load_into_another_tiling_and_dtype(tmp_path):
    """ck.save streams tiletrain Tensors (any tiling) into the file; a lazy load streams a
    float64 tensor into a float32 one with other tiles; corruption is caught before use."""
    from tiletrain.tensors import empty, from_numpy
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((37, 5)), rng.standard_normal(3).astype(np.float32)
    path = tmp_path / "t.safetensors"
    ck.save(path, {"a": from_numpy(a, tiles=(8, 2)), "b": from_numpy(b, tiles=(2,)), "n": np.arange(4)},
            {"step": 3})
    plain, meta = ck.load(path)
    assert meta == {"step": 3} and plain["n"].tolist() == [0, 1, 2, 3]
    np.testing.assert_array_equal(plain["a"], a)
    np.testing.assert_array_equal(plain["b"], b)
    from safetensors.numpy import load_file  # the file is an ordinary safetensors file
    np.testing.assert_array_equal(load_file(str(path))["a"], a)
    stored, _ = ck.load(path, lazy=True)
    assert stored["a"].shape == (37, 5) and stored["a"].dtype == np.float64
    t = empty((37, 5), dtype=np.float32, tiles=(5, 5))
    stored["a"].copy_to_(t)
    np.testing.assert_array_equal(t.numpy(), a.astype(np.float32))
    with pytest.raises(ValueError, match=r"a: shape \(37, 5\) in .*, \(5, 37\) in the model"):
        stored["a"].copy_to_(empty((5, 37)))
    data = bytearray(path.read_bytes())
    data[-200] ^= 1  # a byte inside "a" (stored first: larger elements first)
    path.write_bytes(bytes(data))
    with pytest.raises(ck.CheckpointError, match="tensor 'a' fails its SHA-256 checksum"):
        ck.load(path, lazy=True)
