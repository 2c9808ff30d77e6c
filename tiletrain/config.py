"""RuntimeConfig: the one place where arguments and environment variables meet.

Every ``TILETRAIN_*`` variable the package reads is read here (tests/test_config.py greps the
package, C included, for reads elsewhere): the runtime's options are fields of RuntimeConfig,
handed to the C library in ``tt_config`` at init (nothing in csrc/ calls getenv on a
``TILETRAIN_*`` name); the two that are no runtime option have a function here each
(``env_max_tiles``, read once at import by tiletrain.tensors.traits; ``cache_root``).

Precedence, for every field: an explicit argument to ``tiletrain.init()`` wins over the
environment variable, which wins over the default.  For ``sched``: ``init(sched=...)`` (or
``--sched``) > ``STARPU_SCHED`` > tiletrain's default, ``prio`` (DEFAULT_SCHED: StarPU's own
default, lws, is slower where the submitting thread shares the cores with the workers; see
there); tiletrain's own C policies
(csrc/sched/, e.g. ``tt-cp``) are valid names too.  Because StarPU itself reads
``STARPU_SCHED``/``STARPU_NCPU``/... at ``starpu_init`` and lets them override its
configuration, ``init()`` sets those variables to the resolved values for the duration
of ``starpu_init`` and restores them afterwards.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass, fields

# Policies shipped with StarPU 1.3 (STARPU_SCHED=help).  modular-* names are accepted too.
KNOWN_POLICIES = (
    "eager", "prio", "random", "ws", "lws", "dm", "dmda", "dmdap", "dmdar", "dmdas", "dmdasd",
    "pheft", "peager", "heteroprio", "graph_test",
)



# tiletrain's own scheduling policies, written in C in csrc/sched/ and registered with StarPU by
# the library: named here so that a config is checked before anything starts
# (tests/trace/test_sched.py checks that the library registers exactly these).
TILETRAIN_POLICIES = ("tt-cp",)


def tiletrain_policies() -> tuple[str, ...]:
    """tiletrain's own scheduling policies, written in C in csrc/sched/ (e.g. 'tt-cp')."""
    return TILETRAIN_POLICIES


_ENV = {
    "ncpu": "STARPU_NCPU",
    "nopencl": "STARPU_NOPENCL",
    "ncuda": "STARPU_NCUDA",
    "sched": "STARPU_SCHED",
    "calibrate": "STARPU_CALIBRATE",
    "profile": "TILETRAIN_PROFILE",
    "mpi": "TILETRAIN_MPI",
    "silent": "STARPU_SILENT",
    "memory_limit_mb": "STARPU_LIMIT_CPU_MEM",
    "pause_when_idle": "TILETRAIN_PAUSE_WHEN_IDLE",
    "idle_nap_us": "TILETRAIN_IDLE_NAP_US",
    "mpi_driver": "TILETRAIN_MPI_DRIVER",
    "ooc_dir": "TILETRAIN_OOC_DIR",
    "ooc_size_mb": "TILETRAIN_OOC_SIZE_MB",
    "fxt": "TILETRAIN_FXT",
    "fxt_dir": "TILETRAIN_FXT_DIR",
    "reuse_mb": "TILETRAIN_REUSE_MB",
    "async_free": "TILETRAIN_ASYNC_FREE",
    "tasks_ahead": "TILETRAIN_TASKS_AHEAD",
    "mpi_exit_grace": "TILETRAIN_MPI_EXIT_GRACE",
    "cp_yield": "TILETRAIN_CP_YIELD",
    "cp_idle_sleep_us": "TILETRAIN_CP_IDLE_SLEEP_US",
    "simulate": "TILETRAIN_SIMULATE",
}
_BOOLS = ("profile", "mpi", "silent", "pause_when_idle", "mpi_driver", "fxt", "async_free", "cp_yield")
_STRINGS = ("sched", "ooc_dir", "fxt_dir", "simulate")
_FLOATS = ("mpi_exit_grace",)

# Variables that were read before one reuse cap replaced two: set, they are an error that names
# the replacement (silently ignoring a cap someone set would change what their run keeps).
_RENAMED = {"TILETRAIN_TILE_RECYCLE_MB": "TILETRAIN_REUSE_MB", "TILETRAIN_BUFFER_POOL_MB": "TILETRAIN_REUSE_MB"}

# The default of RuntimeConfig.reuse_mb: MiB of freed tiles kept for reuse (csrc/tile.c).
REUSE_MB = 1024
MAX_TILES = 1_000_000  # the default of env_max_tiles()

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(value, what: str = "mem_limit") -> int:
    """Bytes from an int or a string such as "512M", "2G", "1.5GiB", "4096" (binary units:
    K/M/G/T = 2**10/20/30/40; an optional trailing "B" or "iB")."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"{what} must be an int (bytes) or a string such as '512M' or '2G', "
                        f"got {type(value).__name__}")
    if isinstance(value, int):
        n = value
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(?:I?B)?\s*", value.upper())
        if not m:
            raise ValueError(f"{what}={value!r} is not a size: use bytes or a number with K, M, G or T "
                             "(binary units), e.g. '512M' or '2G'")
        n = int(float(m.group(1)) * _UNITS[m.group(2)])
    if n < 1 << 20:
        raise ValueError(f"{what} must be at least 1 MiB, got {n} bytes")
    return n


def _env_int(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def _env_float(name: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not a number") from None


def _env_bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"environment variable {name}={value!r} is not a boolean (use 0 or 1)")


def env_max_tiles() -> int:
    """TILETRAIN_MAX_TILES: the most tiles one tensor may have (default 1,000,000); read once
    at import by tiletrain.tensors.traits (tiletrain.set_max_tiles changes it later)."""
    raw = os.environ.get("TILETRAIN_MAX_TILES", str(MAX_TILES))
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"TILETRAIN_MAX_TILES must be a positive integer, got {raw!r}") from None
    if n < 1:
        raise ValueError(f"TILETRAIN_MAX_TILES must be a positive integer, got {raw!r}")
    return n


def cache_root() -> str:
    """TILETRAIN_CACHE: tiletrain's cache directory (tokenised corpora, simulated machines;
    scripts/build-starpu.sh keeps the StarPU build there), default ~/.cache/tiletrain."""
    return os.environ.get("TILETRAIN_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tiletrain")


# The policy a session gets unless told otherwise: StarPU's prio (one central queue in
# priority order) rather than StarPU's own default, lws (a queue per worker, stealing).
# Every process runs one thread that submits the tasks beside one worker per core, and under
# lws a task that thread pushes waits until the chosen worker leaves its scheduling loop
# (StarPU 1.3's worker "relax" protocol), which a worker sharing its core with that thread
# often does only when the kernel schedules it again; prio's push takes the queue's lock and
# wakes a worker without waiting for one.  Measured on 2 cores, 2 workers (docs/
# configuration.md, "Scheduling policy"): ahead of lws on the small ported nanoGPT step in
# four of five comparisons (up to ~20 %) and on gpt_step, level within the noise elsewhere.
# prio honours tiletrain.priority() across all workers.
DEFAULT_SCHED = "prio"


def uses_perf_models(sched: str | None) -> bool:
    """Whether a policy schedules with history-based performance models (dm/heft family)."""
    return bool(sched) and (sched.startswith("dm") or sched in ("pheft", "heteroprio")
                            or sched.startswith("modular-heft") or sched.startswith("modular-dm"))


def _launcher_int(names: tuple[str, ...], default: int) -> int:
    """The first of these launcher variables that is set to an integer, else ``default``."""
    for var in names:
        if var in os.environ:
            try:
                return int(os.environ[var])
            except ValueError:
                pass
    return default


# ---- simulation (docs/simulation.md) ------------------------------------------------------------
# TILETRAIN_SIMULATE=NAME chooses, when tiletrain first loads its compiled library, the
# simulation flavour (tiletrain/_ffi.py asks simulated_machine() before anything else runs);
# `tiletrain simulate --machine NAME -- PROGRAM` sets it for the program.  One StarPU per
# process, so init(simulate=NAME) must agree with it.
SIMULATE_ENV = "TILETRAIN_SIMULATE"
_simulated_sessions = []


def simulated_machine() -> str | None:
    """The machine this process simulates (TILETRAIN_SIMULATE), None for a real run."""
    return os.environ.get(SIMULATE_ENV) or None


def values_meaningless() -> bool:
    """True in a simulation that does not execute its kernels (STARPU_SIMGRID_EXECUTE unset
    or 0, as csrc/session.c reads it; `tiletrain simulate` without --execute): no tensor holds
    a meaningful value there, so nothing is computed on the host to fill one."""
    return bool(simulated_machine()) and os.environ.get("STARPU_SIMGRID_EXECUTE", "").strip() in ("", "0")


def machines_dir() -> str:
    """Where machines live: $TILETRAIN_MACHINES, else $TILETRAIN_CACHE/machines, else
    ~/.cache/tiletrain/machines."""
    if os.environ.get("TILETRAIN_MACHINES"):
        return os.environ["TILETRAIN_MACHINES"]
    return os.path.join(cache_root(), "machines")


@contextlib.contextmanager
def machines_in(folder: str):
    """Machines live in ``folder`` meanwhile (TILETRAIN_MACHINES, restored after)."""
    old = os.environ.get("TILETRAIN_MACHINES")
    os.environ["TILETRAIN_MACHINES"] = folder
    try:
        yield folder
    finally:
        if old is None:
            os.environ.pop("TILETRAIN_MACHINES", None)
        else:
            os.environ["TILETRAIN_MACHINES"] = old


def check_machine_name(name) -> str:
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
        raise ValueError(f"a machine name is 1-64 letters, digits, '_', '.' or '-' (starting with a letter "
                         f"or digit), got {name!r}")
    return name


def simulation_env(name: str) -> dict[str, str]:
    """StarPU's variables for simulating machine ``name``: its platform and perf models
    (sampling/bus/<name>.platform.v4.xml, sampling/codelets/45/<symbol>.<name>)."""
    folder = os.path.join(machines_dir(), check_machine_name(name))
    env = {"STARPU_PERF_MODEL_DIR": os.path.join(folder, "sampling"), "STARPU_HOSTNAME": name,
           # a tile shape measured once is calibrated enough to simulate (StarPU's default wants 10
           # samples; a training step runs some kernels and shapes once)
           "STARPU_CALIBRATE_MINIMUM": "1",
           # each task's time drawn with the spread its shape was measured with, not the mean alone
           # (scripts/starpu-patches/simgrid/; STARPU_SIMGRID_VARIANCE=0: mean times)
           "STARPU_SIMGRID_VARIANCE": os.environ.get("STARPU_SIMGRID_VARIANCE", "1"),
           # host buffers folded by 16 MiB where the kernels do not run (csrc/session.c): a tile
           # up to that size is one memory mapping of the vm.max_map_count allowed
           "STARPU_MALLOC_SIMULATION_FOLD": os.environ.get("STARPU_MALLOC_SIMULATION_FOLD", "16")}
    # the submitting thread's CPU time per task (machine.json; tiletrain/sim/calibrate.py), charged
    # at each submission by the simulation flavour (csrc/sim/sim_threads.c)
    try:
        with open(os.path.join(folder, "machine.json")) as f:
            cost = json.load(f).get("submit_us_per_task", 0)
        if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost > 0:
            env["TILETRAIN_SIM_SUBMIT_US"] = f"{float(cost):g}"
    except (OSError, ValueError, AttributeError):
        pass  # (tiletrain.sim checks machine.json and says what is wrong with it)
    return env


def _claim_simulated_session(name: str) -> None:
    """A simulated process runs one StarPU session (SimGrid cannot start twice), on the machine
    its library was loaded for."""
    check_machine_name(name)
    loaded = simulated_machine()
    if loaded is None:
        raise RuntimeError(
            f"simulate={name!r}: this process loaded tiletrain's real flavour (the flavour is chosen when "
            f"tiletrain is imported). Run the program with {SIMULATE_ENV}={name} in its environment, or as "
            f"`tiletrain simulate --machine {name} -- python PROGRAM.py`")
    if loaded != name:
        raise ValueError(f"simulate={name!r}, but this process simulates machine {loaded!r} "
                         f"({SIMULATE_ENV}={loaded}): one machine per process")
    if _simulated_sessions:
        raise RuntimeError(
            f"a simulated process runs one tiletrain session (SimGrid starts once per process), and this one "
            f"already ran one on {loaded!r}: keep one init()/shutdown() pair, or start another process")
    _simulated_sessions.append(name)
    # for the whole process, not only during starpu_init: StarPU reads them again when it first
    # loads a kernel's model (at its first task)
    os.environ.update(simulation_env(name))


def launcher_world_size() -> int:
    """World size announced by an MPI launcher (Open MPI, MPICH, Slurm), 1 if none."""
    return _launcher_int(("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"), 1)


def launcher_rank() -> int:
    """Rank announced by an MPI launcher (Open MPI, MPICH, Slurm), 0 if none."""
    return _launcher_int(("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"), 0)


@dataclass(frozen=True)
class RuntimeConfig:
    ncpu: int | None = None       # CPU workers (None: StarPU's default, all cores up to STARPU_MAXCPUS)
    nopencl: int = 0              # OpenCL workers
    ncuda: int | None = None      # CUDA workers (None: StarPU's default)
    sched: str | None = DEFAULT_SCHED  # scheduling policy (default prio: DEFAULT_SCHED)
    profile: bool = False         # StarPU profiling (task timings)
    mpi: bool = False             # StarPU-MPI (default: on when launched by mpirun with > 1 rank)
    calibrate: int | None = None  # perf-model calibration (0, 1, 2)
    silent: bool = True           # silence StarPU's informational messages
    memory_limit_mb: int | None = None  # cap on StarPU's CPU memory (MiB); enables memory accounting
    pause_when_idle: bool = True  # put polling workers to sleep when a wait finds nothing pending
    idle_nap_us: int = 0          # a worker idle for 50 us sleeps this long at a time (0: it polls)
    mpi_driver: bool = True       # under MPI: StarPU-MPI's thread also runs CPU worker 0's tasks
    ooc_dir: str | None = None    # with a memory limit: a disk memory node here receives evicted tiles
    ooc_size_mb: int | None = None  # the disk node's size (MiB; None: what is free in ooc_dir, less 1/16)
    fxt: bool = False             # StarPU's FxT trace of the session (a StarPU built --with-fxt; slows start-up)
    fxt_dir: str | None = None    # where the FxT trace goes (None: ./tiletrain-fxt); `tiletrain trace fxt DIR`
    # The one reuse cap (csrc/tile.c): MiB of freed tiles kept for the next tensors -- recycled
    # tile handles (idle, or pending until their last task ends) and the buffer pool's freed
    # buffers together; 0: nothing is kept.  Which kinds apply (not under a memory limit; no
    # handles under MPI) is decided in one place, tt_reuse_configure.
    reuse_mb: int = REUSE_MB
    async_free: bool = True       # a reaper thread unregisters freed tiles (off: the freeing thread does)
    tasks_ahead: int = 0          # under a memory limit: tasks submitted and not done at most (0: no bound)
    mpi_exit_grace: float = 1.0   # under MPI: seconds a wait goes on after another rank shut down
    cp_yield: bool = True         # tt-cp policy: idle workers sched_yield() between polls
    cp_idle_sleep_us: int = 1000  # tt-cp policy: the longest nap of an idle worker (us)
    simulate: str | None = None   # a machine's name: run on it simulated (docs/simulation.md); see simulated_machine()

    @classmethod
    def resolve(cls, **kwargs) -> "RuntimeConfig":
        """Build a config from explicit arguments (None = not given) and the environment."""
        names = {f.name for f in fields(cls)}
        unknown = set(kwargs) - names
        if unknown:
            raise TypeError(f"unknown runtime option(s): {', '.join(sorted(unknown))}; "
                            f"known: {', '.join(sorted(names))}")
        for old, new in _RENAMED.items():
            if old in os.environ:
                raise ValueError(f"environment variable {old} is gone: one cap, {new} (MiB, default {REUSE_MB}; "
                                 "0: no reuse), now bounds every kind of tile reuse; see docs/configuration.md")
        values = {}
        for f in fields(cls):
            given = kwargs.get(f.name)
            if given is not None:
                values[f.name] = given
                continue
            env = os.environ.get(_ENV[f.name])
            if env is None:
                continue
            if f.name in _BOOLS:
                values[f.name] = _env_bool(_ENV[f.name], env)
            elif f.name in _STRINGS:
                values[f.name] = env or None
            elif f.name in _FLOATS:
                values[f.name] = _env_float(_ENV[f.name], env)
            else:
                values[f.name] = _env_int(_ENV[f.name], env)
        if "mpi" not in values:
            values["mpi"] = launcher_world_size() > 1
        if values["mpi"]:
            # Never pause idle workers under MPI: a rank's workers and StarPU-MPI's thread
            # must keep serving the other ranks' transfers (the C side refuses too).
            values["pause_when_idle"] = False
        if values.get("simulate") is not None:
            # a simulation reads the machine's models and must never write simulated times into them
            if values.get("calibrate"):
                raise ValueError(f"calibrate={values['calibrate']} under simulation: a simulated run never "
                                 f"calibrates; calibrate on the real machine (tiletrain machine calibrate)")
            values["calibrate"] = 0
        if values.get("calibrate") is None and uses_perf_models(values.get("sched")):
            # StarPU 1.3.10 aborts now and then ("_starpu_driver_update_job_feedback:
            # measured >= 0") when a dm/heft-family policy calibrates its models with
            # profiling off: a model turning calibrated during a task leaves its start time
            # unset.  Always calibrating (STARPU_CALIBRATE=1) measures every task and avoids
            # it (reproduced 2 runs in 4 without, 0 in 5 with; 150 runtime starts each).
            values["calibrate"] = 1
        cfg = cls(**values)
        cfg.validate()
        if cfg.simulate is not None:
            _claim_simulated_session(cfg.simulate)
        return cfg

    def validate(self) -> None:
        for name in ("ncpu", "nopencl", "ncuda", "calibrate", "memory_limit_mb", "ooc_size_mb", "idle_nap_us",
                     "reuse_mb", "tasks_ahead", "cp_idle_sleep_us"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                raise TypeError(f"{name} must be an int, got {type(v).__name__}")
            if v is not None and v < 0:
                raise ValueError(f"{name} must be >= 0, got {v}")
        if self.ncpu == 0 and not self.ncuda and not self.nopencl:
            raise ValueError("ncpu=0 with no CUDA or OpenCL worker leaves StarPU without workers")
        if isinstance(self.mpi_exit_grace, bool) or not isinstance(self.mpi_exit_grace, (int, float)):
            raise TypeError(f"mpi_exit_grace must be a number of seconds, got {type(self.mpi_exit_grace).__name__}")
        if not self.mpi_exit_grace > 0:
            raise ValueError(f"mpi_exit_grace must be > 0 seconds, got {self.mpi_exit_grace}")
        if self.reuse_mb > 1 << 30:
            raise ValueError(f"reuse_mb must be at most {1 << 30} MiB, got {self.reuse_mb}")
        if self.idle_nap_us > 1_000_000:
            raise ValueError(f"idle_nap_us must be at most 1000000 (1 s), got {self.idle_nap_us}")
        if self.memory_limit_mb == 0:
            raise ValueError("memory_limit_mb must be >= 1 (StarPU's limit is in MiB)")
        if self.ooc_dir is not None:
            if not isinstance(self.ooc_dir, str) or not self.ooc_dir:
                raise TypeError(f"ooc_dir must be a directory path, got {self.ooc_dir!r}")
            if self.memory_limit_mb is None:
                raise ValueError("ooc_dir needs a memory limit (mem_limit='2G'): StarPU evicts tiles to the "
                                 "disk node only when main memory reaches its limit")
            if not os.path.isdir(self.ooc_dir):
                raise ValueError(f"ooc_dir {self.ooc_dir!r} is not an existing directory")
            if not os.access(self.ooc_dir, os.W_OK | os.X_OK):
                raise ValueError(f"ooc_dir {self.ooc_dir!r} is not writable")
        if self.ooc_size_mb is not None:
            if self.ooc_dir is None:
                raise ValueError("ooc_size needs ooc_dir")
            if self.ooc_size_mb < 16:
                raise ValueError(f"ooc_size must be at least 16 MiB (StarPU's smallest disk node), "
                                 f"got {self.ooc_size_mb} MiB")
        if self.fxt_dir is not None:  # (ignored while fxt is off)
            if not isinstance(self.fxt_dir, str) or not self.fxt_dir:
                raise TypeError(f"fxt_dir must be a directory path, got {self.fxt_dir!r}")
            if os.path.exists(self.fxt_dir) and not os.path.isdir(self.fxt_dir):
                raise ValueError(f"fxt_dir {self.fxt_dir!r} exists and is not a directory")
        if self.simulate is not None:
            check_machine_name(self.simulate)
            if self.mpi:
                raise ValueError("simulate: StarPU-MPI cannot be simulated with a shared-library StarPU "
                                 "(SimGrid's SMPI needs a static build): run one process")
            folder = self.machine_dir()
            if not os.path.isfile(os.path.join(folder, "machine.json")):
                raise ValueError(f"unknown machine {self.simulate!r} (no {folder}/machine.json): "
                                 "`tiletrain machine list` lists the machines, `tiletrain machine calibrate` "
                                 "makes 'here'")
            # what StarPU would abort on: its platform and bus files, more CPU workers than hosts
            bus = os.path.join(folder, "sampling", "bus")
            for ext in ("platform.v4.xml", "latency", "bandwidth"):
                if not os.path.isfile(os.path.join(bus, f"{self.simulate}.{ext}")):
                    raise ValueError(f"machine {self.simulate!r} has no {bus}/{self.simulate}.{ext}: calibrate or "
                                     "derive it again (`tiletrain machine show` says which it is)")
            with open(os.path.join(bus, f"{self.simulate}.platform.v4.xml")) as f:
                platform = f.read()
            gpus = len(re.findall(r'<host id="CUDA\d+"', platform))
            hosts = len(re.findall(r'<host id="CPU\d+"', platform)) - gpus  # a core drives each GPU
            if self.ncpu is not None and self.ncpu > hosts:
                raise ValueError(f"ncpu={self.ncpu} but machine {self.simulate!r} has {hosts} CPUs: derive one with "
                                 f"more (`tiletrain machine derive NAME --from {self.simulate} --cpus {self.ncpu}`)")
            if self.ncuda and self.ncuda > gpus:
                raise ValueError(f"ncuda={self.ncuda} but machine {self.simulate!r} has {gpus} GPUs: derive one with "
                                 f"them (`tiletrain machine derive NAME --from {self.simulate} --gpus {self.ncuda}`)")
        if self.calibrate is not None and self.calibrate not in (0, 1, 2):
            raise ValueError(f"calibrate must be 0, 1 or 2, got {self.calibrate}")
        if self.sched is not None:
            if not isinstance(self.sched, str) or not re.fullmatch(r"[a-z][a-z0-9_-]*", self.sched):
                raise ValueError(f"sched must be a policy name such as 'lws' or 'dmda', got {self.sched!r}")
            own = tiletrain_policies()
            known = self.sched in KNOWN_POLICIES or self.sched in own or self.sched.startswith("modular-")
            if not known:
                raise ValueError(f"unknown scheduling policy {self.sched!r}; StarPU 1.3 has: "
                                 f"{', '.join(KNOWN_POLICIES)} and the modular-* family; tiletrain's own "
                                 f"(csrc/sched/): {', '.join(own) or 'none'}")

    def machine_dir(self) -> str | None:
        """The simulated machine's folder (None: not simulated)."""
        return None if self.simulate is None else os.path.join(machines_dir(), self.simulate)

    def fxt_directory(self) -> str:
        """Where StarPU writes the FxT trace when ``fxt`` is on."""
        return self.fxt_dir or "tiletrain-fxt"

    def starpu_env(self) -> dict[str, str | None]:
        """Values for StarPU's environment variables during starpu_init (None: unset)."""
        env: dict[str, str | None] = {
            # tiletrain's own policies are passed to starpu_init as a struct, which a set
            # STARPU_SCHED would override: unset it for them
            "STARPU_SCHED": None if self.sched in tiletrain_policies() else self.sched,
            "STARPU_NCPU": None if self.ncpu is None else str(self.ncpu),
            "STARPU_NOPENCL": str(self.nopencl),
            "STARPU_NCUDA": None if self.ncuda is None else str(self.ncuda),
            "STARPU_CALIBRATE": None if self.calibrate is None else str(self.calibrate),
            "STARPU_CATCH_SIGNALS": "0",
            "STARPU_LIMIT_CPU_MEM": None if self.memory_limit_mb is None else str(self.memory_limit_mb),
            # the same cap on each GPU's memory when CUDA workers start (README "Memory budget")
            "STARPU_LIMIT_CUDA_MEM": None if self.memory_limit_mb is None else str(self.memory_limit_mb),
        }
        # StarPU only uses OpenCL devices of GPU type unless told otherwise; tiletrain's
        # OpenCL workers are also the CPU-side second memory node (PoCL) that CI tests with.
        # Set for every session, with or without OpenCL workers: StarPU 1.3 discovers the
        # OpenCL devices once per process (at the first starpu_init), so a first session
        # without it would leave every later one with no CPU-side OpenCL device.
        env["STARPU_OPENCL_ON_CPUS"] = "1"
        # FxT (a StarPU built --with-fxt records every event unless told not to): off unless
        # asked for; on, StarPU writes prof_file_<user>_<rank> into fxt_dir at shutdown
        env["STARPU_FXT_TRACE"] = "1" if self.fxt else "0"
        env["STARPU_FXT_PREFIX"] = os.path.abspath(self.fxt_directory()) + "/" if self.fxt else None
        if self.silent:
            env["STARPU_SILENT"] = "1"
        if self.simulate is not None:
            env.update(simulation_env(self.simulate))
            env["STARPU_OPENCL_ON_CPUS"] = None
        # Under MPI, StarPU-MPI's progression thread runs CPU worker 0's tasks between its
        # polls (csrc/mpi.c keeps it awake): one busy thread per rank instead of two, which
        # measured 2.2x faster for 2 ranks on 2 cores (README "Running under mpirun").
        driver = self.mpi and self.mpi_driver and self.ncpu != 0
        env["STARPU_MPI_DRIVER_CALL_FREQUENCY"] = "1" if driver else None
        env["STARPU_MPI_DRIVER_TASK_FREQUENCY"] = "1" if driver else None
        return env
