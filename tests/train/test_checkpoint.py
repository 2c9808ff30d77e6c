"""Checkpoint files: round trip, atomic replacement, clear errors on bad files."""
import numpy as np
import pytest

from tiletrain import checkpoint as ck



def test_round_trip(tmp_path):
    p = tmp_path / "c.safetensors"
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "step": np.array([7], dtype=np.int64)}
    ck.save(p, arrays, {"step": 7, "rng": {"state": 2**70}})
    got, meta = ck.load(p)
    assert meta == {"step": 7, "rng": {"state": 2**70}}
    np.testing.assert_array_equal(got["w"], arrays["w"])
    assert got["w"].dtype == np.float32


def test_crash_before_rename_keeps_previous_checkpoint(tmp_path):
    p = tmp_path / "c.safetensors"
    ck.save(p, {"w": np.zeros(3)}, {"step": 1})

    def crash(tmp):
        raise KeyboardInterrupt("killed between write and rename")

    with pytest.raises(KeyboardInterrupt):
        ck.save(p, {"w": np.ones(3)}, {"step": 2}, _before_rename=crash)
    arrays, meta = ck.load(p)
    assert meta["step"] == 1 and arrays["w"].sum() == 0       # the old checkpoint is intact
    assert [f.name for f in tmp_path.iterdir()] == ["c.safetensors"]  # no temporary left behind


def test_bad_files(tmp_path):
    with pytest.raises(ck.CheckpointError, match="no checkpoint at"):
        ck.load(tmp_path / "missing.safetensors")
    p = tmp_path / "c.safetensors"
    ck.save(p, {"w": np.zeros(100)}, {"step": 1})
    data = p.read_bytes()
    (tmp_path / "trunc.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ck.CheckpointError, match="corrupt or truncated"):
        ck.load(tmp_path / "trunc.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"\x00" * 3)
    with pytest.raises(ck.CheckpointError, match="corrupt or truncated"):
        ck.load(tmp_path / "junk.safetensors")
    from safetensors.numpy import save_file
    save_file({"w": np.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ck.CheckpointError, match="not a tiletrain checkpoint"):
        ck.load(tmp_path / "other.safetensors")
