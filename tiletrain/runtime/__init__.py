"""Runtime lifecycle: init/shutdown/wait, worker information, task priorities.

The bottom of tiletrain's Python layers (docs/architecture.md): with the Tensor core and
trace records, this package is the only user of the compiled binding (tiletrain._ffi).
mpi.py makes the MPI calls, context.py sets what C attaches to the next tasks (priority,
tags, affinity), hetero.py knows worker kinds and the build, registry.py the kernels and
kernels.py (the one kernel-call layer, above the Tensor core) calls them by name."""
from __future__ import annotations

import atexit
import contextlib
import os
import sys
import time as _time
import warnings

from dataclasses import dataclass

from .._ffi import check, cstr, ffi, lib
from ..config import RuntimeConfig, parse_bytes, simulated_machine
from . import context, mpi
from .context import submission
from .hetero import build_info, check_build, check_started, executed_tasks
from .mpi import rank, world_size

_WORKER_KINDS = {0: "cpu", 1: "cuda", 2: "opencl"}


@dataclass(frozen=True)
class WorkerInfo:
    id: int
    name: str
    kind: str
    memory_node: int


# OpenBLAS core types whose sgemm kernels use AVX-512 (the others, Haswell and Zen included,
# stop at AVX2)
_AVX512_CORES = ("skylakex", "cooperlake", "sapphirerapids")


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def blas_note(blas_info: str | None = None, flags: set[str] | None = None,
              environ: dict | None = None) -> str | None:
    """A warning when the CPU BLAS runs AVX2 kernels on a CPU with AVX-512 (OpenBLAS's core
    type held by OPENBLAS_CORETYPE, or an OpenBLAS older than the CPU), else None.  Arguments
    default to this process: tt_blas_info(), /proc/cpuinfo's flags, os.environ."""
    info = cstr(lib.tt_blas_info()) if blas_info is None else blas_info
    if not info.startswith("openblas") or "; core " not in info:
        return None
    core = info.rsplit("; core ", 1)[1].rstrip(")").strip()
    flags = _cpu_flags() if flags is None else flags
    if not {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags or core.lower() in _AVX512_CORES:
        return None
    best = "Cooperlake" if "avx512_bf16" in flags else "SkylakeX"
    forced = (os.environ if environ is None else environ).get("OPENBLAS_CORETYPE")
    if forced:
        return (f"OPENBLAS_CORETYPE={forced} holds OpenBLAS to its {core} (AVX2) kernels on this AVX-512 CPU; "
                f"unset it (OpenBLAS then detects the CPU) or set OPENBLAS_CORETYPE={best}; see docs/configuration.md")
    return (f"OpenBLAS chose its {core} (AVX2) kernels on this AVX-512 CPU; OPENBLAS_CORETYPE={best} may be "
            "faster, see docs/configuration.md 'CPU BLAS'")


@contextlib.contextmanager
def _environment(values: dict[str, str | None]):
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Runtime:
    """A started StarPU session.  Use ``tiletrain.init()`` to create one."""

    auto_started = False  # started with the defaults by the first tensor (current(start=True))

    def __init__(self, config: RuntimeConfig):
        self.config = config
        self._blas_limit = None
        self.session = 0

    def _start(self) -> None:
        cfg = self.config
        if cfg.mpi:
            mpi.prepare()
        check_build(cfg)  # OpenCL/CUDA workers this build cannot provide: a clear error first
        c = ffi.new("tt_config *")
        c.ncpu = -1 if cfg.ncpu is None else cfg.ncpu
        c.nopencl = cfg.nopencl
        c.ncuda = -1 if cfg.ncuda is None else cfg.ncuda
        sched = ffi.new("char[]", cfg.sched.encode()) if cfg.sched else ffi.NULL
        c.sched = sched
        c.profile = int(cfg.profile)
        c.calibrate = -1 if cfg.calibrate is None else cfg.calibrate
        c.mpi = int(cfg.mpi)
        # the rest of tt_config: settings config.py read from the environment (the C library reads none)
        c.memory_limit_mb = -1 if cfg.memory_limit_mb is None else cfg.memory_limit_mb
        c.reuse_bytes = cfg.reuse_mb << 20
        c.async_free = int(cfg.async_free)
        c.tasks_ahead = cfg.tasks_ahead
        c.mpi_exit_grace = float(cfg.mpi_exit_grace)
        c.cp_yield = int(cfg.cp_yield)
        c.cp_idle_sleep_us = cfg.cp_idle_sleep_us
        # numpy's own OpenBLAS runs beside the workers: keep it single-threaded too (its idle
        # threads would otherwise spin after each NumPy product, on the workers' cores).  Selected
        # by internal_api: threadpool_limits(limits={"openblas": 1}) matches prefixes and user
        # APIs only, so it never reached numpy's libscipy_openblas (which kept 2 threads).
        try:
            from threadpoolctl import ThreadpoolController
            self._blas_limit = ThreadpoolController().select(internal_api="openblas").limit(limits=1)
        except Exception:  # pragma: no cover - threadpoolctl is a dependency
            self._blas_limit = None
        if cfg.fxt:  # StarPU writes its FxT trace there at shutdown
            os.makedirs(cfg.fxt_directory(), exist_ok=True)
        with _environment(cfg.starpu_env()):
            check(lib.tt_init(c))
        self.session = lib.tt_session_id()
        lib.tt_set_idle_nap(cfg.idle_nap_us)
        if cfg.ooc_dir is not None:  # the disk node evicted tiles go to (csrc/memory.c)
            rc = lib.tt_disk_register(os.fsencode(cfg.ooc_dir), (cfg.ooc_size_mb or 0) << 20)
            if rc < 0:
                err = RuntimeError(f"ooc_dir: {cstr(lib.tt_last_error())}")
                self._stop()
                raise err
            # starpu_disk_register measured the disk with a 16 MiB buffer of its own, freed by now:
            # the peak of tile buffers starts after it
            lib.tt_pool_reset_peak()
        try:
            check_started(cfg, self.workers())
        except RuntimeError:
            self._stop()
            raise
        ncpu = sum(1 for w in self.workers() if w.kind == "cpu")
        if cfg.ncpu is not None and ncpu < cfg.ncpu:  # (more than the build allows: check_build refused)
            warnings.warn(f"asked for {cfg.ncpu} CPU workers, StarPU started {ncpu}", RuntimeWarning, stacklevel=3)
        if cfg.sched and self.sched != cfg.sched:
            actual = self.sched
            self._stop()
            raise ValueError(f"StarPU did not select the scheduling policy {cfg.sched!r} (got {actual!r})")

    def _stop(self) -> None:
        check(lib.tt_shutdown())
        if self._blas_limit is not None:
            self._blas_limit.restore_original_limits()
            self._blas_limit = None

    @property
    def alive(self) -> bool:
        # one C call: tt_session_id() is 0 when no session runs, and session ids start at 1
        return self.session != 0 and lib.tt_session_id() == self.session

    def shutdown(self, exc: BaseException | None = None) -> None:
        """Stop this session.  Under MPI a clean shutdown is collective (it waits for every
        rank); on an error path -- ``exc``, or an exception being handled or propagating
        through a ``finally`` -- it never waits for the other ranks: the error is printed and
        the whole job aborted (see runtime.mpi.abort_on_error)."""
        if self.alive:
            global _current
            if self.config.mpi and mpi.enabled():
                mpi.abort_on_error(exc if exc is not None else sys.exc_info()[1])
            self._stop()
            if _current is self:
                _current = None

    def wait(self) -> None:
        wait()

    def idle(self) -> bool:
        """Put StarPU's workers to sleep if no task is pending (they poll, and so keep every
        core busy, while awake); the next submission wakes them.  Done automatically after
        wait() and after reading a tensor when ``pause_when_idle`` is on (the default).
        Returns whether the workers were put to sleep now."""
        if self.config.pause_when_idle and self.alive:
            return bool(check(lib.tt_pause_if_idle()))
        return False

    @property
    def sched(self) -> str:
        return cstr(lib.tt_sched_name())

    def workers(self) -> list[WorkerInfo]:
        out = []
        name = ffi.new("char[]", 128)
        kind = ffi.new("int *")
        node = ffi.new("int *")
        for w in range(lib.tt_nworkers()):
            check(lib.tt_worker_info(w, name, 128, kind, node))
            out.append(WorkerInfo(w, ffi.string(name).decode(), _WORKER_KINDS.get(kind[0], str(kind[0])), node[0]))
        return out

    def executed_tasks(self) -> dict[str, int]:
        """Tasks run since init per worker kind, e.g. {"cpu": 418, "opencl": 222}."""
        return executed_tasks(self.workers())

    def memory(self) -> dict:
        """Bytes of live tensors' tiles, and StarPU's own accounting of main memory (used and
        limit; None unless a memory limit is set: ``init(mem_limit="2G")``)."""
        used, total = lib.tt_memory_used(0), lib.tt_memory_total(0)
        held, peak = lib.tt_pool_bytes(0), lib.tt_pool_bytes(1)
        return {"live_tensor_bytes": lib.tt_bytes_live(),
                "created_tensor_bytes": lib.tt_bytes_created(),
                "starpu_used_bytes": None if used < 0 else used,
                "starpu_limit_bytes": None if total < 0 else total,
                # of starpu_used_bytes: StarPU's structures of the registered tiles, counted
                # against the limit along with the tile buffers (None without a limit)
                "tile_structures_bytes": None if total < 0 else lib.tt_memory_meta_bytes(),
                # with a disk node: the rest of the process' resident memory beyond its size
                # at init (Python objects, tasks, heap fragments), counted against it too
                "other_process_bytes": None if total < 0 else lib.tt_memory_other_bytes(),
                # tile buffers StarPU has allocated in main memory (now, and the most since
                # reset_peak_memory(); None unless the buffer pool's hooks are installed:
                # CPU workers only)
                "allocated_bytes": None if held < 0 else held,
                "peak_allocated_bytes": None if peak < 0 else peak,
                # the disk memory node evicted tiles go to (init(ooc_dir=...)), None without one
                "disk_node": None if lib.tt_disk_node() < 0 else lib.tt_disk_node(),
                "disk_o_direct": bool(lib.tt_disk_o_direct()) if lib.tt_disk_node() >= 0 else None}

    def check_disk(self, need: int = 0) -> None:
        """Raise RuntimeError when the disk node's directory is gone or has fewer than ``need``
        bytes free (training checks before each step: StarPU 1.3 fails deep inside an
        eviction otherwise).  Nothing to check without a disk node."""
        check(lib.tt_disk_check(int(need)))

    def reset_peak_memory(self) -> None:
        """Start a new peak for ``memory()["peak_allocated_bytes"]`` at the bytes held now."""
        lib.tt_pool_reset_peak()

    def fxt_record(self, on: bool) -> None:
        """With ``fxt=True``: stop (False) or restart (True) StarPU's FxT event recording, e.g.
        to keep one training step in the trace (`tiletrain trace run --fxt DIR` does)."""
        if not self.config.fxt:
            raise RuntimeError("fxt_record: this session has no FxT trace; start it with tiletrain.init(fxt=True) "
                               "(or TILETRAIN_FXT=1)")
        check(lib.tt_fxt_record(int(bool(on))))

    def info(self) -> dict:
        """The versions, the build (hetero.build_info: StarPU's version, source, STARPU_MAXCPUS,
        CUDA, FxT, ...), the workers started and their counts by kind."""
        workers = self.workers()
        return {
            **build_info(),
            "cpu_workers": sum(w.kind == "cpu" for w in workers),
            "cuda_workers": sum(w.kind == "cuda" for w in workers),
            "opencl_workers": sum(w.kind == "opencl" for w in workers),
            "tiletrain": cstr(lib.tt_version()),
            "starpu": cstr(lib.tt_starpu_version()),
            "build": cstr(lib.tt_build_options()),
            "blas": cstr(lib.tt_blas_info()),
            "blas_note": blas_note(),
            "sched": self.sched,
            "workers": workers,
            "memory_nodes": lib.tt_nmemnodes(),
            "config": self.config,
        }

    # -- traces (tiletrain.trace): need init(profile=True) ------------------------------
    def records(self, wait: bool = True):
        """The tasks recorded since the last trace reset, as a tiletrain.trace.Trace (tasks as a
        NumPy structured array, the task DAG, per-worker counters): tiletrain.trace.read."""
        return _trace_layer().read(wait=wait)

    def trace(self, path, flows: bool = False):
        """Write the recorded tasks as Chrome trace-event JSON (opens in ui.perfetto.dev) and
        return the Trace: tiletrain.trace.read, then tiletrain.trace.save."""
        trace = _trace_layer()
        tr = trace.read()
        trace.save(tr, path, flows=flows)
        return tr

    def priority_range(self) -> tuple[int, int]:
        """(min, max) task priority of the current scheduling policy."""
        lo, hi = ffi.new("int *"), ffi.new("int *")
        check(lib.tt_priority_range(lo, hi))
        return lo[0], hi[0]

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.shutdown(exc)

    def __repr__(self) -> str:
        if not self.alive:
            return "<tiletrain.Runtime (shut down)>"
        return f"<tiletrain.Runtime sched={self.sched} workers={lib.tt_nworkers()}>"


# The trace layer (tiletrain.trace) reads this runtime's task records and sits above it, so
# the runtime does not import it: tiletrain.trace hands itself over when it is imported
# (provide_trace), and Runtime.records()/trace() are shortcuts to its read() and save().
_TRACE: list = []


def provide_trace(trace_module) -> None:
    """Called once by tiletrain/trace/__init__.py: the module whose read()/save() back
    Runtime.records() and Runtime.trace()."""
    _TRACE[:] = [trace_module]


def _trace_layer():
    if not _TRACE:
        raise RuntimeError("tiletrain.trace is not imported (import tiletrain does it)")
    return _TRACE[0]


def memory_limit() -> int:
    """StarPU's main-memory limit of the running session in bytes (-1: none)."""
    return int(lib.tt_memory_limit())


def registered_policies() -> tuple[str, ...]:
    """The scheduling policies the C library registers with StarPU (csrc/sched/); the config
    names them too (tiletrain.config.TILETRAIN_POLICIES)."""
    return tuple(cstr(lib.tt_sched_policy_name(i)) for i in range(lib.tt_sched_policy_count()))


_current: Runtime | None = None
_started_once = False  # a session was started (by init or on first use) in this process


def init(ncpu: int | None = None, sched: str | None = None, mpi: bool | None = None,
         profile: bool | None = None, mem_limit: int | str | None = None, ooc_dir=None,
         ooc_size: int | str | None = None, **options) -> Runtime:
    """Start StarPU.  Arguments override the environment (STARPU_NCPU, STARPU_SCHED, ...).

    mem_limit: StarPU's CPU memory limit ("512M", "2G" or bytes; rounded down to MiB), the
    same as ``memory_limit_mb`` (STARPU_LIMIT_CPU_MEM).  ooc_dir: with a limit, a directory for
    a disk memory node: tiles evicted under the limit are written there (O_DIRECT where the
    filesystem allows it) and read back before their next task (docs/howto/memory-budget.md).
    ooc_size: the disk node's size (default: what is free in ooc_dir now, less 1/16)."""
    global _current, _started_once
    if _current is not None and _current.alive:
        if _current.auto_started:
            raise RuntimeError("the tiletrain runtime is already initialised: it started with defaults when the "
                               "first tensor was made; call tiletrain.init(...) before making any tensor, or "
                               "tiletrain.shutdown() first")
        raise RuntimeError("the tiletrain runtime is already initialised; call tiletrain.shutdown() first")
    if mem_limit is not None:
        mb = parse_bytes(mem_limit) >> 20
        given = options.get("memory_limit_mb")
        if given is not None and given != mb:
            raise ValueError(f"mem_limit={mem_limit!r} ({mb} MiB) and memory_limit_mb={given} disagree: "
                             "give one")
        options["memory_limit_mb"] = mb
    if ooc_dir is not None:
        options["ooc_dir"] = os.fspath(ooc_dir)
    if ooc_size is not None:
        options["ooc_size_mb"] = parse_bytes(ooc_size, "ooc_size") >> 20
    cfg = RuntimeConfig.resolve(ncpu=ncpu, sched=sched, mpi=mpi, profile=profile, **options)
    rt = Runtime(cfg)
    rt._start()
    _current = rt
    _started_once = True
    return rt


def shutdown() -> None:
    """Wait for all tasks, free every tile and stop StarPU.  Tensors become unusable.
    Under MPI, called while an exception is handled or propagates (in an ``except`` or a
    ``finally``), it aborts the whole job after printing the error instead (see Runtime.shutdown).
    Another thread's calls racing with it either complete first or raise RuntimeError."""
    global _current
    if _current is not None:
        _current.shutdown(sys.exc_info()[1])
    _current = None


def is_initialized() -> bool:
    return _current is not None and _current.alive


def current(start: bool = False) -> Runtime:
    """The running session.  start=True (making a tensor): a process that never started one
    starts it now with the defaults (the environment's TILETRAIN_*/STARPU_* settings), as a
    PyTorch program expects; after an explicit shutdown() it raises like start=False."""
    rt = _current
    if rt is not None and rt.alive:  # the hot path: every new tensor asks
        return rt
    if start and not _started_once:
        rt = init()
        rt.auto_started = True
        return rt
    raise RuntimeError("the tiletrain runtime is not initialised; call tiletrain.init() first")


def wait() -> None:
    """Wait until every submitted task has run.  Ctrl-C interrupts the wait."""
    rt = current()
    while not check(lib.tt_wait_for(0.1)):
        pass
    # with pause_when_idle the workers go to sleep before the freed tiles are unregistered
    # (awake, they poll and share the cores with the unregistrations)
    check(lib.tt_wait_idle(int(rt.config.pause_when_idle and rt.alive)))


@contextlib.contextmanager
def priority(value: int):
    """Tasks submitted inside get this StarPU priority (higher runs first under prio-aware policies)."""
    if not isinstance(value, int):
        raise TypeError(f"priority must be an int, got {type(value).__name__}")
    if lib.tt_is_initialized():
        context.check_priority(value)  # within the policy's [min, max] priority
    old = context.get_priority()
    context.set_priority(value)
    try:
        yield
    finally:
        context.set_priority(old)


@atexit.register
def _shutdown_at_exit() -> None:
    with contextlib.suppress(Exception):
        shutdown()


def time() -> float:
    """Seconds on tiletrain's clock, for timing a program: ``time.perf_counter()`` in a real run;
    in a simulated process (docs/simulation.md) StarPU's simulated clock since the session
    started (0.0 before it starts and after it ends), which waits and task times advance.
    Python's own clocks stay real under simulation."""
    if simulated_machine():
        return float(lib.tt_trace_now_us()) / 1e6
    return _time.perf_counter()


__all__ = ["Runtime", "WorkerInfo", "init", "shutdown", "wait", "is_initialized", "current", "priority", "rank", "time",
           "submission", "world_size"]
