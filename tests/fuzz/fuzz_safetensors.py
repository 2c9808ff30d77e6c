"""Fuzz target: safetensors files (tiletrain.checkpoint.SafetensorsFile, StoredTensor.numpy).

Input: an even first byte -> the rest is the whole file; an odd one -> the rest is the
header JSON, a 0xff byte and the data, and the target writes the 8-byte header length.
Contract: ValueError naming the problem, before any allocation proportional to what the
header claims; or a file the ``safetensors`` library reads the same way (same names,
metadata, shapes, dtypes and bytes).  Accepting what the reference refuses is a finding."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from _harness import as_file, framed, instrumented, main, mode, refused

with instrumented(__name__):
    from tiletrain import checkpoint as ck

from safetensors import safe_open  # noqa: E402  (the reference reader)

ALLOWED = (ValueError,)
TOKENS = [f'"{w}"' for w in (
    "dtype shape data_offsets __metadata__ format pt F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL "
    "U64").split()] + [
    ":[", "],", "{", "}", "[0,", "-1", "1e3", "0.5", "18446744073709551616", "null", "true"]


def file_bytes(data: bytes) -> bytes:
    m, rest = mode(data)
    if m & 1:
        header, _, body = rest.partition(b"\xff")
        return framed(header, body)
    return rest


def check(data: bytes) -> None:
    path = as_file(file_bytes(data), "x.safetensors")
    stored, _ = refused(ALLOWED, ck.SafetensorsFile, path)
    if stored is None:
        return
    ours = {k: v.numpy() for k, v in stored.items()}  # a header that passed describes bytes in the file
    with safe_open(str(path), framework="np") as ref:  # raises: we accepted a file the format refuses
        assert sorted(ref.keys()) == sorted(ours), (sorted(ref.keys()), sorted(ours))
        assert (ref.metadata() or {}) == stored.metadata, (ref.metadata(), stored.metadata)
        for k, a in ours.items():
            sl = ref.get_slice(k)
            assert (tuple(sl.get_shape()), sl.get_dtype()) == (a.shape, ck._st_code(a.dtype)), k
            if a.dtype.name != "bfloat16":  # (NumPy has no bfloat16 for the reference to return)
                assert ref.get_tensor(k).tobytes() == a.tobytes(), k


def seeds() -> dict[str, bytes]:
    import ml_dtypes
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.float64(0.5), "ids": np.arange(3),
              "empty": np.zeros((0, 4), np.float32), "h": np.ones(2, np.float16),
              "bf": np.ones((1, 2), ml_dtypes.bfloat16), "u8": np.arange(5, dtype=np.uint8),
              **{f"i{n}": np.arange(2, dtype=f"int{n}") for n in (32, 16, 8)}}
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for name, tensors, meta in (("all", arrays, {"format": "pt"}), ("one", {"w": arrays["w"]}, {}),
                                    ("none", {}, {"k": "v"})):
            f = Path(d) / f"{name}.safetensors"
            ck.write_safetensors(f, tensors, meta)
            raw = f.read_bytes()
            n = int.from_bytes(raw[:8], "little")
            out[f"raw-{name}"] = b"\x00" + raw
            out[f"framed-{name}"] = b"\x01" + raw[8:8 + n] + b"\xff" + raw[8 + n:]
    return out


if __name__ == "__main__":
    main(check, seeds, TOKENS)
