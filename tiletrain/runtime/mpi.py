"""MPI: this process' rank and the world size, the one error path of an MPI job, and the
preparation StarPU-MPI needs before it starts.  The only Python that makes MPI calls
(through the C library, csrc/mpi.c)."""
from __future__ import annotations

import ctypes
import os
import sys
import time
import traceback

from .._ffi import check, ffi, lib
from ..config import launcher_rank, launcher_world_size


def enabled() -> bool:
    """Whether the running session uses StarPU-MPI (False before init and without MPI)."""
    return bool(lib.tt_mpi_enabled())


def available() -> bool:
    """Whether this build has StarPU-MPI."""
    return bool(lib.tt_mpi_available())


def rank() -> int:
    """This process' MPI rank: 0 in one process; before init, the launcher's rank."""
    return int(lib.tt_mpi_rank()) if lib.tt_mpi_enabled() else launcher_rank()


def world_size() -> int:
    """Number of MPI ranks: 1 in one process; before init, the launcher's world size."""
    return int(lib.tt_mpi_size()) if lib.tt_mpi_enabled() else launcher_world_size()


def session_world_size() -> int:
    """The ranks of the running session: 1 without MPI (whatever the launcher says)."""
    return int(lib.tt_mpi_size()) if lib.tt_mpi_enabled() else 1


def cache_enabled() -> bool:
    """Whether StarPU-MPI's cache of received tiles is on (False without MPI)."""
    return bool(lib.tt_mpi_enabled()) and bool(lib.tt_mpi_cache_enabled())


# -- tile streams and moves, for a data-parallel replica submitted by its own rank only
#    (tiletrain.parallel.shard_backward); tensors are C pointers (a Tensor's ``_ptr``)

def set_stream(stream: int) -> int:
    """Tags of the tiles registered from now on come from stream ``stream`` (0: the global
    counter; a replica's own stream makes its graph's tags the same on every rank); returns
    the previous stream."""
    return int(lib.tt_mpi_set_stream(int(stream)))


def in_stream(tensor, stream: int) -> bool:
    """Whether the tiles of ``tensor`` carry tags of stream ``stream``."""
    return bool(lib.tt_mpi_in_stream(tensor, int(stream)))


def push(tensor, ranks) -> None:
    """Send ``tensor``'s tiles ahead to each rank of ``ranks`` that lacks them."""
    ranks = [int(r) for r in ranks]
    check(lib.tt_tensor_push(tensor, ffi.new("int[]", ranks), len(ranks)))


def shadow(tensor, stream_delta: int, owner: int):
    """The C tensor that corresponds to ``tensor`` in the stream ``stream_delta`` further on,
    owned by rank ``owner`` (nothing registered until a task of this rank needs it)."""
    out = ffi.new("tt_tensor **")
    check(lib.tt_tensor_shadow(tensor, int(stream_delta), int(owner), out))
    return out[0]


def exit_code(exc: BaseException | None) -> int | None:
    """The exit code an error path ends the job with; None for no error (no exception, or
    ``sys.exit(0)`` / ``sys.exit()``, which shut down collectively like the end of the program)."""
    if exc is None:
        return None
    if isinstance(exc, SystemExit):
        if exc.code is None or exc.code == 0:
            return None
        return exc.code if isinstance(exc.code, int) else 1
    return 1


def abort_on_error(exc: BaseException | None) -> None:
    """The one error path of an MPI job: if ``exc`` is an error, print it (with the rank and
    its traceback) and MPI_Abort the whole job -- never a collective shutdown, which would
    wait for ranks that may be blocked in a collective this rank will never reach.  Used by
    every shutdown (``with tt.init()``, ``tt.shutdown()`` in a ``finally`` or ``except``,
    train()) and by the uncaught-exception hook."""
    code = exit_code(exc)
    if code is None or not lib.tt_mpi_enabled():
        return
    try:
        if not isinstance(exc, SystemExit):
            traceback.print_exception(type(exc), exc, exc.__traceback__)
        elif isinstance(exc.code, str):  # sys.exit("message"): Python would print it
            sys.stderr.write(exc.code + "\n")
        what = (f"exited with code {exc.code}" if isinstance(exc, SystemExit)
                else f"raised {type(exc).__name__}: {exc}")
        sys.stderr.write(f"tiletrain: rank {lib.tt_mpi_rank()} of {lib.tt_mpi_size()} {what}; "
                         "aborting the MPI job\n")
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(0.3)  # mpirun forwards the message before its own MPI_ABORT banner
    finally:
        lib.tt_mpi_abort(code)


def prepare() -> None:
    """Before StarPU-MPI starts: make libmpi's symbols global and abort the whole job when a
    rank dies of an uncaught Python exception.

    The compiled module stays RTLD_LOCAL (its OpenBLAS must not interpose on other
    libraries), but Open MPI dlopens plugins that expect libmpi's symbols in the global
    scope: reopening libmpi with RTLD_GLOBAL promotes just that library."""
    if not lib.tt_mpi_available():
        raise RuntimeError("MPI mode was requested (mpi=True, TILETRAIN_MPI=1 or launched by mpirun with more "
                           "than one rank) but this tiletrain build has no StarPU-MPI: install StarPU-MPI and "
                           "an MPI library (Debian: libstarpu-dev, libopenmpi-dev), then `make setup`")
    for name in ("libmpi.so.40", "libmpi.so.12", "libmpi.so"):
        try:
            ctypes.CDLL(name, mode=os.RTLD_GLOBAL)
            break
        except OSError:
            continue
    if getattr(sys.excepthook, "_tiletrain_mpi", False):
        return
    previous = sys.excepthook

    def abort_job(exc_type, exc, tb):
        # One rank raising must not leave the others waiting forever in a collective:
        # print the error with the rank, then MPI_Abort kills the whole job (non-zero).
        if not lib.tt_mpi_enabled():
            previous(exc_type, exc, tb)
            return
        if exc is None:
            exc = exc_type()
        exc.__traceback__ = tb
        abort_on_error(exc)

    abort_job._tiletrain_mpi = True
    sys.excepthook = abort_job


__all__ = ["abort_on_error", "available", "cache_enabled", "enabled", "exit_code", "in_stream", "prepare", "push",
           "rank", "session_world_size", "set_stream", "shadow", "world_size"]
