"""Checkpoints: one safetensors file holding the model weights (Hugging Face GPT-2 names),
the optimizer state, and JSON metadata (config, step, data position, RNG states).

Files are read and written as a stream, a block of tile rows at a time (save: each tensor's
rows straight to its offset, which depends only on shapes and dtypes; load: each tensor's rows
from its offset into the tiles), so a checkpoint of a model larger than memory never needs a
host copy of the model; only one block (about 8 MiB, at least one tile row) is in memory.
Under MPI a save holding tiletrain Tensors is collective (every rank calls it with the same
tensors): each block's tiles are sent by their owners to rank 0 only, which writes the file
and drops the received copies again; a load reads on each rank only the blocks of tile rows
holding a tile that rank owns.

Writes are atomic: the file is written under a temporary name in the same directory,
flushed and fsynced, then renamed over the previous checkpoint (and the directory is
fsynced), so a crash at any moment leaves either the old or the new checkpoint whole;
temporaries left by an interrupted write are removed at the next save.

Every tensor's bytes carry a SHA-256 checksum in the file's metadata (computed while the
tensor streams out; the header holding them is written last), verified on load by a
streaming pass before any tensor is used (CheckpointError naming the tensor and the file).
Checkpoints written before checksums existed load with a warning."""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .runtime import mpi
from .tensors import Tensor
from .tensors.tensor import gather_per_rank, read_rows, rows_owned, tile_rows, write_rows_

FORMAT = "tiletrain-checkpoint-1"
CHECKPOINT_NAME = "checkpoint.safetensors"
CHUNK_BYTES = 8 << 20  # bytes per read or write of a stream (and per hashing step)
_DIGEST_HEX = 64       # a SHA-256 in hex: the checksum table has the same length before and after


class CheckpointError(ValueError):
    """A checkpoint file is missing, corrupt, truncated or does not fit."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, I/O error, not a directory...)."""


def checksum(a: np.ndarray) -> str:
    """SHA-256 of an array's bytes (C order), as stored in the file."""
    return hashlib.sha256(np.ascontiguousarray(a).view(np.uint8).reshape(-1)).hexdigest()


# -- safetensors files, streamed ---------------------------------------------------------

def _st_dtypes() -> dict[str, np.dtype]:
    import ml_dtypes
    return {"F64": np.dtype(np.float64), "F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
            "BF16": np.dtype(ml_dtypes.bfloat16), "I64": np.dtype(np.int64), "I32": np.dtype(np.int32),
            "I16": np.dtype(np.int16), "I8": np.dtype(np.int8), "U8": np.dtype(np.uint8)}


def _st_code(dtype: np.dtype) -> str:
    for code, dt in _st_dtypes().items():
        if dt == dtype:
            return code
    raise TypeError(f"dtype {dtype} cannot be stored in a safetensors file")


def _readinto(f, offset: int, out: np.ndarray) -> None:
    view = memoryview(out.reshape(-1).view(np.uint8))
    f.seek(offset)
    done = 0
    while done < len(view):
        n = f.readinto(view[done:])
        if not n:
            raise CheckpointError(f"{f.name}: the file ends inside a tensor (truncated)")
        done += n


class StoredTensor:
    """One tensor of a safetensors file, read only when used: ``shape`` and ``dtype`` come
    from the header; ``numpy()`` reads it whole, ``copy_to_(t)`` streams it into the tiles of a
    tiletrain tensor one block of tile rows at a time."""

    __slots__ = ("path", "name", "shape", "dtype", "offset", "nbytes")

    def __init__(self, path: Path, name: str, shape: tuple, dtype: np.dtype, offset: int, nbytes: int):
        self.path, self.name, self.shape, self.dtype = path, name, shape, dtype
        self.offset, self.nbytes = offset, nbytes

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"StoredTensor({self.name!r}, shape={self.shape}, dtype={self.dtype}, file={str(self.path)!r})"

    def _rows(self, f, r0: int, r1: int) -> np.ndarray:
        """Rows r0:r1 (the whole tensor when it is 0-d) in the file's dtype."""
        if not self.shape:
            out = np.empty((), self.dtype)
            _readinto(f, self.offset, out)
            return out
        row = self.nbytes // self.shape[0] if self.shape[0] else 0
        out = np.empty((r1 - r0,) + self.shape[1:], self.dtype)
        _readinto(f, self.offset + r0 * row, out)
        return out

    def numpy(self) -> np.ndarray:
        with open(self.path, "rb", buffering=0) as f:
            return self._rows(f, 0, self.shape[0] if self.shape else 1)

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def copy_to_(self, t) -> None:
        """Write this tensor into tiletrain tensor ``t`` (same shape; converted to its dtype)
        block by block; collective under MPI (each rank reads only the blocks of tile rows
        holding a tile it owns)."""
        if tuple(t.shape) != tuple(self.shape):
            raise ValueError(f"{self.name}: shape {self.shape} in {self.path}, {tuple(t.shape)} in the model")
        owned = rows_owned(t)
        with open(self.path, "rb", buffering=0) as f:
            for lo, hi, r0, r1 in tile_rows(t):
                if not owned[lo:hi].any():  # (MPI) other ranks' tiles only: take part without data
                    write_rows_(t, lo, hi, None)
                    continue
                block = self._rows(f, r0, r1)
                write_rows_(t, lo, hi, block if block.dtype == t.dtype else block.astype(t.dtype))

    def chunks(self, f):
        """The tensor's bytes in pieces of at most CHUNK_BYTES (for hashing)."""
        done = 0
        while done < self.nbytes:
            n = min(CHUNK_BYTES, self.nbytes - done)
            buf = np.empty(n, np.uint8)
            _readinto(f, self.offset + done, buf)
            yield buf
            done += n


MAX_HEADER_BYTES = 100_000_000  # the safetensors library refuses a longer header ("header too large")
_MAX_NDIM = 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32  # NumPy's most dimensions
_ENTRY_KEYS = ("dtype", "shape", "data_offsets")


def _unique_keys(pairs: list) -> dict:
    """A JSON object's pairs as a dict; ValueError on a repeated key (which JSON readers
    resolve differently: the last one here, maybe the first elsewhere)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"the key {dup!r} appears twice")
    return out


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _json_int(text: str):
    """A JSON integer as safetensors' reader (serde) takes it: ``-0`` is the float -0.0 there,
    which no dimension or offset (a usize) accepts -- a float here too, so _count refuses it."""
    value = int(text)   # (ValueError beyond 4300 digits)
    return -0.0 if value == 0 and text.startswith("-") else value


def _count(v) -> bool:
    """A dimension or an offset: an int in [0, 2**64) (safetensors' usize), not a bool or float."""
    return type(v) is int and 0 <= v < 1 << 64


def _header_entry(name: str, e: Any, dtypes: dict) -> tuple[int, int, str, tuple, np.dtype]:
    """(begin, end, name, shape, dtype) of one tensor of a header; ValueError naming what is wrong."""
    if not isinstance(e, dict) or any(k not in e for k in _ENTRY_KEYS):
        raise ValueError(f"tensor {name!r}: a header entry must be an object with dtype, shape and "
                         f"data_offsets, got {e!r:.200}")
    code, shape, offsets = e["dtype"], e["shape"], e["data_offsets"]
    if not isinstance(code, str) or code not in dtypes:
        raise ValueError(f"tensor {name!r}: unknown dtype {code!r:.40} (readable: {', '.join(dtypes)})")
    if not isinstance(shape, list) or len(shape) > _MAX_NDIM or not all(_count(d) for d in shape):
        raise ValueError(f"tensor {name!r}: the shape must be a list of at most {_MAX_NDIM} ints in "
                         f"[0, 2**64), got {shape!r:.200}")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_count(x) for x in offsets):
        raise ValueError(f"tensor {name!r}: data_offsets must be two ints in [0, 2**64), "
                         f"got {offsets!r:.200}")
    dtype, (b, end) = dtypes[code], offsets
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes >= 1 << 64:
        raise ValueError(f"tensor {name!r}: shape {shape} of {code} overflows a 64-bit size")
    if end - b != nbytes:
        raise ValueError(f"tensor {name!r}: data_offsets [{b}, {end}] hold {end - b} bytes, shape {shape} "
                         f"of {code} needs {nbytes}")
    return b, end, name, tuple(shape), dtype


class SafetensorsFile(Mapping):
    """The header of a safetensors file: {name: StoredTensor} (sorted by name) and its string
    ``metadata``.  Nothing but the header is read; ValueError says what is wrong with it.

    The header is checked as the ``safetensors`` library checks it, and more strictly where
    readers could disagree, before anything proportional to its claims is allocated: at most
    MAX_HEADER_BYTES of JSON, an object without repeated keys (NaN and Infinity are not
    numbers), known dtypes, shapes and offsets of ints >= 0, each tensor's bytes matching its
    shape and dtype, and the tensors tiling the data after the header exactly (no gap, no
    overlap, nothing past the end of the file)."""

    def __init__(self, path):
        self.path = path = Path(path)
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ValueError(f"{size} bytes, shorter than the 8-byte header length")
            n = int.from_bytes(head, "little")
            if n > MAX_HEADER_BYTES:
                raise ValueError(f"header too large: {n} bytes (safetensors reads at most "
                                 f"{MAX_HEADER_BYTES:,})")
            if n > size - 8:
                raise ValueError(f"a header of {n} bytes in a file of {size}")
            try:
                header = json.loads(f.read(n), object_pairs_hook=_unique_keys, parse_constant=_no_constant,
                                    parse_int=_json_int)
            except ValueError as exc:  # (JSONDecodeError, UnicodeDecodeError, an int of over 4300 digits)
                raise ValueError(f"the header is not valid JSON ({exc})") from None
            except RecursionError:
                raise ValueError("the header is not valid JSON (nested too deeply)") from None
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
        meta = header.pop("__metadata__", None)
        meta = {} if meta is None else meta
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise ValueError("__metadata__ is not a table of strings")
        self.metadata: dict[str, str] = meta
        dtypes, start = _st_dtypes(), 8 + n
        entries = [_header_entry(name, e, dtypes) for name, e in header.items()]
        pos = 0
        for b, end, name, _, _ in sorted(entries):
            if b != pos:
                what = "overlaps the previous tensor" if b < pos else "leaves a gap after the previous tensor"
                raise ValueError(f"tensor {name!r} starts at byte {b} of the data, expected {pos} "
                                 f"(it {what})")
            pos = end
        if start + pos != size:
            raise ValueError(f"the header describes {start + pos} bytes, the file has {size}")
        self._tensors = {name: StoredTensor(path, name, shape, dtype, start + b, end - b)
                         for b, end, name, shape, dtype in sorted(entries, key=lambda x: x[2])}

    def __getitem__(self, name: str) -> StoredTensor:
        return self._tensors[name]

    def __iter__(self):
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)


def _blocks(v, root: int | None = None):
    """Bytes of a tensor to write, C order, in blocks: a tiletrain Tensor one run of tile rows
    at a time (read from its tiles; with ``root``, under MPI, collectively to that rank: the
    other ranks send their tiles and get no blocks), a NumPy array or a StoredTensor a few rows
    at a time."""
    if isinstance(v, Tensor):
        mine = root is None or root == _rank()
        for lo, hi, r0, r1 in tile_rows(v):
            out = np.empty((r1 - r0,) + v.shape[1:] if v.ndim else (), v.dtype) if mine else None
            block = read_rows(v, lo, hi, out, root)
            if mine:
                yield block
        return
    if isinstance(v, StoredTensor):
        with open(v.path, "rb", buffering=0) as f:
            yield from v.chunks(f)
        return
    if v.ndim == 0:
        yield np.ascontiguousarray(v)
        return
    row = max(1, v.nbytes // max(1, v.shape[0]))
    step = max(1, CHUNK_BYTES // row)
    for r0 in range(0, v.shape[0], step):
        yield np.ascontiguousarray(v[r0:r0 + step])


def _rank() -> int:
    return mpi.rank() if mpi.enabled() else 0


def _collective(tensors) -> bool:
    """Under MPI, is a write of these values collective (one of them a tiletrain Tensor)?"""
    return mpi.session_world_size() > 1 and any(isinstance(v, Tensor) for v in tensors)


def _agree_written(error: BaseException | None) -> None:
    """(Collective) every rank learns whether rank 0 wrote the file; the others raise OSError
    when it did not (rank 0 raises its own error)."""
    ok = gather_per_rank([0.0 if error is not None else 1.0])[0, 0]
    if error is not None:
        raise error
    if not ok:
        raise OSError("rank 0 could not write it (its error is printed by that rank)")


def write_safetensors(path, tensors: Mapping, metadata: dict[str, str], checksums: str | None = None,
                      _before_rename=None) -> dict[str, str]:
    """Write ``tensors`` ({name: tiletrain Tensor, NumPy array or StoredTensor}) as one
    safetensors file at ``path``, atomically, streaming each tensor to its offset (only one
    block in memory).  With ``checksums``, metadata[checksums] is the JSON table {name:
    SHA-256}, computed while the tensors stream out (the header is written last).  Returns the
    checksums ({} without).

    Under MPI, when a value is a tiletrain Tensor, the write is collective: every rank calls
    it with the same tensors; rank 0 writes the file, receiving each block's tiles from their
    owners (only the block in flight is held, on rank 0; the other ranks send, hold nothing
    and return {}); every rank raises when rank 0 could not write.  With NumPy arrays and
    StoredTensors only, the calling rank writes the file alone."""
    entries = []
    for name, v in tensors.items():
        if not isinstance(v, (Tensor, StoredTensor)):
            v = np.asarray(v)
        dtype = np.dtype(v.dtype)
        entries.append((-dtype.itemsize, str(name), v, _st_code(dtype), tuple(v.shape),
                        math.prod(v.shape) * dtype.itemsize))
    entries.sort(key=lambda e: e[:2])  # larger elements first: every tensor aligned to its size

    def header(sums: dict[str, str]) -> bytes:
        h, pos = {}, 0
        for _, name, _, code, shape, nbytes in entries:
            h[name] = {"dtype": code, "shape": list(shape), "data_offsets": [pos, pos + nbytes]}
            pos += nbytes
        meta = dict(metadata)
        if checksums is not None:
            meta[checksums] = json.dumps(sums, sort_keys=True)
        h["__metadata__"] = meta
        text = json.dumps(h, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        return len(text).to_bytes(8, "little") + text

    placeholder = header({e[1]: "0" * _DIGEST_HEX for e in entries})
    collective = _collective(v for _, _, v, _, _, _ in entries)
    root = 0 if collective else None
    if collective and _rank() != 0:  # send this rank's tiles to rank 0, block by block
        for _, _, v, _, _, _ in entries:
            for _ in _blocks(v, root) if isinstance(v, Tensor) else ():
                pass
        _agree_written(None)
        return {}
    sums: dict[str, str] = {}
    todo = iter(entries)
    blocks = iter(())
    try:
        with _atomic_file(path, _before_rename) as f:
            f.write(placeholder)
            for _, name, v, _, _, nbytes in todo:
                h, written = hashlib.sha256(), 0
                blocks = _blocks(v, root)
                for block in blocks:
                    data = block.reshape(-1).view(np.uint8)
                    if checksums is not None:
                        h.update(data)
                    f.write(data)
                    written += data.nbytes
                if written != nbytes:
                    raise RuntimeError(f"checkpoint: tensor {name!r} streamed {written} bytes, expected {nbytes}")
                sums[name] = h.hexdigest()
            if checksums is not None:
                final = header(sums)
                assert len(final) == len(placeholder)
                f.seek(0)
                f.write(final)
    except OSError as exc:
        if not collective:
            raise
        for _ in blocks:  # the other ranks send every tile still: receive (and drop) them
            pass
        for _, _, v, _, _, _ in todo:
            for _ in _blocks(v, root) if isinstance(v, Tensor) else ():
                pass
        _agree_written(exc)
    if collective:
        _agree_written(None)
    return sums if checksums is not None else {}


def _stale_temporaries(path: Path) -> list[Path]:
    return list(path.parent.glob(f".{path.name}.*.tmp"))


def check_writable(directory: str | os.PathLike) -> Path:
    """Create `directory` if needed and prove a file can be written there (before any work);
    CheckpointError (a bad argument) naming the path otherwise."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise CheckpointError(f"checkpoint directory {directory} is not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        # an unnamed file where the OS has them (O_TMPFILE), else unlinked as soon as made: a
        # job killed here leaves no probe behind in the directory (a named one stayed forever)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise CheckpointError(f"checkpoint directory {directory} is not writable: {exc.strerror or exc}") from None
    return directory


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _atomic_file(path, _before_rename=None):
    """A binary file to write `path` through: a temporary in the same directory, flushed,
    fsynced and renamed over `path` when the block ends (removed if it raises)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in _stale_temporaries(path):  # left by a write that was killed before its rename
        stale.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        if _before_rename is not None:  # tests simulate a crash here
            _before_rename(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(path.parent)


def write_atomic(path: str | os.PathLike, data: bytes, _before_rename=None) -> None:
    """Write bytes to `path` atomically (temporary file, fsync, rename, fsync dir)."""
    with _atomic_file(path, _before_rename) as f:
        f.write(data)


def save(path: str | os.PathLike, tensors: Mapping[str, Any], metadata: dict[str, Any],
         _before_rename=None) -> Path:
    """Save tensors (NumPy arrays, tiletrain Tensors, streamed from their tiles, or the
    StoredTensors of another checkpoint) + JSON-serialisable metadata as one safetensors file,
    atomically.  Tensors must be float32, float64 or int64."""
    for k, v in tensors.items():
        dtype = v.dtype if isinstance(v, (Tensor, StoredTensor)) else np.asarray(v).dtype
        if dtype not in (np.float32, np.float64, np.int64):
            raise TypeError(f"checkpoint entry {k!r} has unsupported dtype {dtype}")
    meta = {"format": FORMAT, "metadata": json.dumps(metadata, sort_keys=True)}
    try:
        write_safetensors(path, tensors, meta, checksums="checksums", _before_rename=_before_rename)
    except OSError as exc:
        raise CheckpointWriteError(f"cannot write checkpoint {path}: {exc.strerror or exc}") from exc
    return Path(path)


def _verify(path: Path, stored: SafetensorsFile, meta: dict) -> None:
    """Every tensor's bytes against the checksum table, streamed (nothing kept in memory)."""
    if "checksums" not in meta:
        warnings.warn(f"{path} has no checksums (written by an older tiletrain): loading it unverified",
                      stacklevel=3)
        return
    try:
        sums = json.loads(meta["checksums"])
    except (ValueError, RecursionError) as exc:  # (JSONDecodeError, over 4300 digits, nesting)
        raise CheckpointError(f"{path}: the checksum table is unreadable ({exc})") from None
    if not isinstance(sums, dict) or set(sums) != set(stored):
        missing = sorted(set(stored) ^ set(sums if isinstance(sums, dict) else {}))
        raise CheckpointError(f"{path}: the checksum table does not match the tensors ({', '.join(missing)})")
    with open(path, "rb", buffering=0) as f:
        for k in sorted(stored):
            h = hashlib.sha256()
            for chunk in stored[k].chunks(f):
                h.update(chunk)
            if h.hexdigest() != sums[k]:
                raise CheckpointError(f"{path}: tensor {k!r} fails its SHA-256 checksum "
                                      "(the file is corrupt)")


def _missing_keys(metadata: Any, required) -> list[str]:
    missing = []
    for key in required:  # "a.b": key b of the dict under key a
        node = metadata
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                missing.append(key)
                break
            node = node[part]
    return missing


def load(path: str | os.PathLike, required: tuple[str, ...] = (), lazy: bool = False
         ) -> tuple[Mapping[str, Any], dict[str, Any]]:
    """Read a checkpoint: (tensors, metadata), each tensor checked against its checksum (a
    streaming pass over the file) and the metadata against the `required` keys ("a.b" for a
    nested key).  Tensors are NumPy arrays, or with ``lazy`` StoredTensors read when used
    (``copy_to_`` streams one into a model's tiles: Module.load_state_dict does).  Raises
    CheckpointError saying what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        stored = SafetensorsFile(path)
    except (ValueError, OSError) as exc:
        raise CheckpointError(f"{path} is not a readable checkpoint (corrupt or truncated: {exc})") from None
    meta = stored.metadata
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a tiletrain checkpoint (format {meta.get('format')!r}, "
                              f"expected {FORMAT!r})")
    try:
        metadata = json.loads(meta["metadata"])
    except (KeyError, ValueError, RecursionError) as exc:  # (JSONDecodeError, over 4300 digits, nesting)
        raise CheckpointError(f"{path}: checkpoint metadata is unreadable ({exc})") from None
    _verify(path, stored, meta)
    missing = _missing_keys(metadata, required)
    if missing:
        raise CheckpointError(f"{path}: checkpoint metadata lacks {', '.join(map(repr, missing))} "
                              f"(damaged, or not written by this version of tiletrain)")
    if lazy:
        return stored, metadata
    return {k: v.numpy() for k, v in stored.items()}, metadata
