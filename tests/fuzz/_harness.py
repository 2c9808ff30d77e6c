"""What the fuzz targets (tests/fuzz/fuzz_*.py) share.

A target is a module with

    check(data: bytes) -> None   feeds one input to a parser.  An exception of the classes the
                                 parser documents for bad input (with a message) keeps the
                                 contract and is swallowed; anything else escapes and is a
                                 finding: IndexError, KeyError, AttributeError, RecursionError,
                                 MemoryError, an assertion of the target's oracle, and, under
                                 the fuzzer, a crash, a timeout or an out-of-memory.
    seeds() -> {name: bytes}     valid inputs made by tiletrain's own writers (the seed corpus)
    TOKENS                       strings for libFuzzer's dictionary

and ends with ``if __name__ == "__main__": main(check, seeds, TOKENS)``.  Run one with
``python tests/fuzz/fuzz_NAME.py [libFuzzer flags] [corpus dirs]``, or all of them through
tests/fuzz/run.py (``make fuzz``); tests/fuzz/test_regressions.py replays the findings
through ``check``.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path


def instrumented(module_name: str):
    """Around a target's imports of tiletrain: atheris' coverage instrumentation when the
    target runs as the fuzzer (``__main__``), nothing when a test imports it."""
    if module_name != "__main__":
        return contextlib.nullcontext()
    import atheris
    return atheris.instrument_imports(include=["tiletrain"])


_root: Path | None = None
SCRATCH_ENV = "TILETRAIN_FUZZ_SCRATCH"


def scratch_root() -> Path:
    """A new directory for scratch files (in /dev/shm where there is one)."""
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    return Path(tempfile.mkdtemp(prefix="tiletrain-fuzz.", dir=shm))


def scratch(name: str = "in") -> Path:
    """An empty directory of this process, emptied again for every input: under
    $TILETRAIN_FUZZ_SCRATCH (run.py makes and removes it: libFuzzer ends the process without
    Python's exit handlers), else in a directory removed at exit."""
    global _root
    if _root is None:
        if os.environ.get(SCRATCH_ENV):
            _root = Path(os.environ[SCRATCH_ENV])
        else:
            _root = scratch_root()
            atexit.register(shutil.rmtree, _root, True)
    d = _root / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return d


def as_file(data: bytes, name: str) -> Path:
    """``data`` as the file ``name`` of an emptied scratch directory."""
    f = scratch(name) / name
    f.write_bytes(data)
    return f


def refused(allowed, fn, *args, **kwargs):
    """(fn(*args, **kwargs), None), or (None, the exception) when it raised one of ``allowed``
    with a message; any other exception escapes (a finding)."""
    try:
        return fn(*args, **kwargs), None
    except allowed as exc:
        if not str(exc).strip():
            raise AssertionError(f"{type(exc).__name__} without a message from {fn.__qualname__}") from exc
        return None, exc


def mode(data: bytes) -> tuple[int, bytes]:
    """(the first byte, the rest): the first byte of an input picks how a target reads the rest."""
    return (data[0], data[1:]) if data else (0, b"")


def framed(header: bytes, data: bytes = b"") -> bytes:
    """A safetensors file from its header bytes and data: the 8-byte length written for the
    header (so that mutations of the header reach its meaning instead of its length)."""
    return len(header).to_bytes(8, "little") + header + data


def main(check, seeds, tokens) -> None:
    """The fuzzer: atheris, with libFuzzer's flags and corpus directories on the command line,
    after ``--write-seeds DIR`` (write the seed corpus there) and ``--write-dict FILE``
    (libFuzzer's dictionary of ``tokens``); with only those two, write and exit."""
    args = sys.argv[1:]
    wrote = False
    while args[:1] in (["--write-seeds"], ["--write-dict"]) and len(args) > 1:
        opt, out, args, wrote = args[0], Path(args[1]), args[2:], True
        if opt == "--write-seeds":
            out.mkdir(parents=True, exist_ok=True)
            for name, data in seeds().items():
                (out / name).write_bytes(data)
        else:
            def quoted(t: str) -> str:
                return "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\' else f"\\x{b:02x}"
                               for b in t.encode())
            out.write_text("".join(f'"{quoted(t)}"\n' for t in tokens))
    if wrote and not args:
        return
    import atheris
    warnings.simplefilter("ignore")  # e.g. "loading it unverified": the contract is about exceptions
    atheris.Setup([sys.argv[0], *args], check)
    atheris.Fuzz()
