"""Machines as data: a folder per machine under ``tiletrain.config.machines_dir()``
(default ~/.cache/tiletrain/machines/), holding

    machine.json                          what the machine is (this module's Machine)
    sampling/bus/<name>.platform.v4.xml   SimGrid's platform: hosts (MAIN, CPU0.., CUDA0.., RAM), links
    sampling/bus/<name>.{config,...}      StarPU's bus calibration files
    sampling/codelets/45/tiletrain_<kernel>.<name>   one perf model per kernel (StarPU's text format)

``here`` is calibrated on this computer (tiletrain/sim/calibrate.py); other machines are
derived from a calibrated one (``derive``): a generated platform and scaled models.

The scaling rule (docs/simulation.md): a kernel's time on a derived machine is its time on
the machine it derives from divided by the relative speed of the device type it runs on
(``--cpu-speed 2``: every CPU kernel twice as fast), for every calibrated tile shape;
the number of workers comes from the platform.  No roofline is applied (tiletrain does not
record flops and bytes per kernel yet).
"""
from __future__ import annotations

import datetime
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field, fields

from ..config import check_machine_name, machines_dir
from . import perfmodel
from .flavour import cuda_simulation
from .platform import bus_matrices, config_text, platform_xml

FORMAT = 1
KINDS = ("calibrated", "derived")
SCALING_RULE = ("time on a derived machine = time on the machine it derives from / the device type's relative "
                "speed, per kernel and tile shape (the submitting thread's cost per task / the CPU speed too); "
                "a GPU kernel's time = the calibrated CPU core's time / --gpu-speed, for the kernels with a CUDA "
                "implementation (the others run on the CPUs)")


BUS_FILES = ("latency", "bandwidth", "affinity")
MAX_GPUS = 16  # scripts/build-starpu.sh --sim: --enable-maxcudadev=16
# what a derived GPU is unless told (the GPipe study's GPUs)
DEFAULT_GPU_SPEED = 20.0
DEFAULT_GPU_MEMORY = 16 * 2**30
DEFAULT_LINK_GBS = 25.0
DEFAULT_LINK_LATENCY_US = 10.0  # StarPU's bus calibration, beside the platform
DEFAULT_CHIPLET_LATENCY_US = 0.1  # an on-package link: a fraction of a microsecond


class MachineError(ValueError):
    """A machine that does not exist or whose folder is not valid."""


@dataclass(frozen=True)
class Machine:
    name: str
    kind: str                      # calibrated (measured here) or derived (generated)
    cpus: int                      # CPU workers
    gpus: int = 0                  # simulated CUDA devices
    cpu_speed: float = 1.0         # CPU kernel speed relative to the calibrated machine at the root
    gpu_speed: float | None = None
    gpu_memory: int | None = None  # bytes per GPU
    link_bandwidth_gbs: float | None = None
    link_latency_us: float | None = None
    chiplets: int | None = None
    chiplet_link_gbs: float | None = None
    submit_us_per_task: float = 0.0  # the submitting thread's CPU time per task (simulated at each submission)
    derived_from: str | None = None
    calibration: dict = field(default_factory=dict)  # calibrated: what ran, when, where
    format: int = FORMAT

    @property
    def folder(self) -> str:
        return machine_dir(self.name)

    @property
    def sampling(self) -> str:
        return os.path.join(self.folder, "sampling")

    def kernels(self) -> dict[str, str]:
        """{kernel symbol: model file} calibrated for this machine."""
        return perfmodel.model_files(self.sampling, self.name)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


def machine_dir(name: str) -> str:
    return os.path.join(machines_dir(), check_machine_name(name))


def _positive(d: dict, key: str, kind, where: str, allow_none: bool = True, minimum=0, strict: bool = True):
    v = d.get(key)
    if v is None:
        if allow_none:
            return None
        raise MachineError(f"{where}: '{key}' is missing")
    ok_type = isinstance(v, int) if kind is int else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok_type or (v <= minimum if strict else v < minimum):
        want = "an integer" if kind is int else "a number"
        raise MachineError(f"{where}: '{key}' must be {want} {'>' if strict else '>='} {minimum}, got {v!r}")
    return kind(v)


def from_dict(d, where: str) -> Machine:
    """A Machine from machine.json's contents; MachineError naming the file and the field."""
    if not isinstance(d, dict):
        raise MachineError(f"{where}: a machine is a JSON object, got {type(d).__name__}")
    known = {f.name for f in fields(Machine)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise MachineError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    if d.get("format") != FORMAT:
        raise MachineError(f"{where}: 'format' must be {FORMAT}, got {d.get('format')!r}")
    name = d.get("name")
    try:
        check_machine_name(name)
    except ValueError as exc:
        raise MachineError(f"{where}: 'name': {exc}") from None
    if d.get("kind") not in KINDS:
        raise MachineError(f"{where}: 'kind' must be one of {', '.join(KINDS)}, got {d.get('kind')!r}")
    if not isinstance(d.get("calibration", {}), dict):
        raise MachineError(f"{where}: 'calibration' must be an object")
    derived_from = d.get("derived_from")
    if derived_from is not None and not isinstance(derived_from, str):
        raise MachineError(f"{where}: 'derived_from' must be a machine name")
    return Machine(
        name=name, kind=d["kind"],
        cpus=_positive(d, "cpus", int, where, allow_none=False),
        gpus=_positive(d, "gpus", int, where, strict=False) or 0,
        cpu_speed=_positive(d, "cpu_speed", float, where) or 1.0,
        gpu_speed=_positive(d, "gpu_speed", float, where),
        gpu_memory=_positive(d, "gpu_memory", int, where),
        link_bandwidth_gbs=_positive(d, "link_bandwidth_gbs", float, where),
        link_latency_us=_positive(d, "link_latency_us", float, where, strict=False),
        chiplets=_positive(d, "chiplets", int, where),
        chiplet_link_gbs=_positive(d, "chiplet_link_gbs", float, where),
        submit_us_per_task=_positive(d, "submit_us_per_task", float, where, strict=False) or 0.0,
        derived_from=derived_from, calibration=d.get("calibration", {}))


def load(name: str) -> Machine:
    """The machine called ``name``; MachineError when it does not exist or is malformed."""
    folder = machine_dir(name)
    path = os.path.join(folder, "machine.json")
    if not os.path.isfile(path):
        have = list_machines()
        raise MachineError(f"unknown machine {name!r} (no {path}); machines: {', '.join(have) or 'none'}. "
                           "`tiletrain machine calibrate` makes 'here', `tiletrain machine derive` others")
    try:
        with open(path) as f:
            d = json.load(f)
    except json.JSONDecodeError as exc:
        raise MachineError(f"{path}: not valid JSON ({exc})") from None
    m = from_dict(d, path)
    if m.name != name:
        raise MachineError(f"{path}: 'name' is {m.name!r} but the folder is {name!r}")
    platform = os.path.join(m.sampling, "bus", f"{name}.platform.v4.xml")
    if not os.path.isfile(platform):
        raise MachineError(f"machine {name!r} has no platform file {platform}: "
                           + ("re-run `tiletrain machine calibrate" + ("" if name == "here" else f" --name {name}") + "`"
                              if m.kind == "calibrated" else f"derive it again (`tiletrain machine derive {name} ...`)"))
    return m


def list_machines() -> list[str]:
    d = machines_dir()
    if not os.path.isdir(d):
        return []
    return sorted(n for n in os.listdir(d) if os.path.isfile(os.path.join(d, n, "machine.json")))


def save(m: Machine) -> None:
    os.makedirs(m.folder, exist_ok=True)
    tmp = os.path.join(m.folder, ".machine.json.tmp")
    with open(tmp, "w") as f:
        f.write(m.to_json())
    os.replace(tmp, os.path.join(m.folder, "machine.json"))


def describe(m: Machine) -> str:
    """`tiletrain machine show`: devices, links, calibrated kernels."""
    lines = [f"machine {m.name} ({'derived from ' + str(m.derived_from) if m.kind == 'derived' else m.kind})",
             f"  folder: {m.folder}",
             f"  CPUs: {m.cpus} (kernel speed x{m.cpu_speed:g} of the calibrated machine)",
             f"  submitting thread: {m.submit_us_per_task:.1f} us of CPU per task"]
    if m.chiplets:
        lines.append(f"  chiplets: {m.chiplets} (simulated as CUDA devices; speed x{m.gpu_speed or 1:g}, "
                     f"{m.gpu_memory or 0} bytes each)")
        lines.append(f"  links chiplet<->package memory: {m.chiplet_link_gbs or 0:g} GB/s, {m.link_latency_us or 0:g} us "
                     "(chiplet to chiplet: through the package's memory, two links)")
    elif m.gpus:
        lines.append(f"  GPUs: {m.gpus} (speed x{m.gpu_speed or 1:g}, {m.gpu_memory or 0} bytes each)")
        if m.link_bandwidth_gbs:
            lines.append(f"  links RAM<->device: {m.link_bandwidth_gbs:g} GB/s, {m.link_latency_us or 0:g} us")
    if m.kind == "derived":
        c = m.calibration
        lines.append(f"  derived: {c.get('derived', '?')} from {c.get('base', '?')} (calibrated "
                     f"{c.get('base_calibration', '?')})")
    elif m.calibration:
        c = m.calibration
        lines.append(f"  calibrated: {c.get('runs', '?')} run(s), last {c.get('last', '?')} on {c.get('cpu', '?')}"
                     f"; workloads: {', '.join(c.get('workloads', [])) or '?'}")
    if m.kind == "derived":
        lines.append(f"  scaling: {SCALING_RULE}")
    kernels = m.kernels()
    lines.append(f"  calibrated kernels: {len(kernels)}")
    for sym, path in kernels.items():
        with open(path) as f:
            text = f.read()
        try:
            ents = perfmodel.entries(text, path)
        except perfmodel.ModelFileError as exc:
            lines.append(f"    {sym}: unreadable ({exc})")
            continue
        by_dev: dict[str, list] = {}
        for e in ents:
            by_dev.setdefault(e.device, []).append(e)
        parts = []
        for dev, es in sorted(by_dev.items()):
            ok = [e for e in es if e.n >= 10]
            times = ", ".join(f"{e.mean_us:.0f}" for e in sorted(ok, key=lambda e: e.size)[:4])
            parts.append(f"{dev}: {len(ok)}/{len(es)} shapes with >= 10 samples ({times}{' ...' if len(ok) > 4 else ''} us)")
        lines.append(f"    {sym.removeprefix('tiletrain_')}: {'; '.join(parts) or 'no samples'}")
    return "\n".join(lines)


def derive(name: str, base: str = "here", cpus: int | None = None, cpu_speed: float | None = None,
           gpus: int | None = None, gpu_speed: float | None = None, gpu_memory: int | None = None,
           link_bandwidth_gbs: float | None = None, link_latency_us: float | None = None,
           chiplets: int | None = None, chiplet_link_gbs: float | None = None, overwrite: bool = False) -> Machine:
    """A what-if machine from a calibrated one: a generated platform and the base's models
    scaled (SCALING_RULE).  Written whole into its folder, or not at all."""
    check_machine_name(name)
    _check_derive_options(cpus, cpu_speed, gpus, gpu_speed, gpu_memory, link_bandwidth_gbs, link_latency_us,
                          chiplets, chiplet_link_gbs)
    src = load(base)
    if name == src.name:
        raise MachineError(f"derive {name!r} from itself: give the new machine another name")
    folder = machine_dir(name)
    if os.path.exists(folder) and not overwrite:
        raise MachineError(f"machine {name!r} exists ({folder}): pass --overwrite to replace it")
    kernels = src.kernels()
    if not kernels:
        raise MachineError(f"machine {base!r} has no calibrated kernels: `tiletrain machine calibrate"
                           f"{'' if base == 'here' else ' --name ' + base}` first")
    ncpu = cpus if cpus is not None else src.cpus
    speed = float(cpu_speed) if cpu_speed is not None else 1.0
    if chiplets:   # a chiplet is a simulated device of its own, linked to the package's memory
        gpus, link_bandwidth_gbs = chiplets, chiplet_link_gbs
    ngpu = gpus if gpus is not None else src.gpus
    if ngpu and src.gpus and gpus is None:
        # the base's GPUs, as they were, unless given again
        gpu_speed = src.gpu_speed if gpu_speed is None else gpu_speed
        gpu_memory = src.gpu_memory if gpu_memory is None else gpu_memory
        link_bandwidth_gbs = src.link_bandwidth_gbs if link_bandwidth_gbs is None else link_bandwidth_gbs
        link_latency_us = src.link_latency_us if link_latency_us is None else link_latency_us
        chiplets, chiplet_link_gbs = src.chiplets, src.chiplet_link_gbs
    gspeed = float(gpu_speed) if gpu_speed is not None else DEFAULT_GPU_SPEED
    gmem = int(gpu_memory) if gpu_memory is not None else DEFAULT_GPU_MEMORY
    gbw = float(link_bandwidth_gbs) if link_bandwidth_gbs is not None else DEFAULT_LINK_GBS
    glat = float(link_latency_us) if link_latency_us is not None else \
        DEFAULT_CHIPLET_LATENCY_US if chiplets else DEFAULT_LINK_LATENCY_US
    m = Machine(name=name, kind="derived", cpus=ncpu, cpu_speed=src.cpu_speed * speed, derived_from=src.name,
                submit_us_per_task=src.submit_us_per_task / speed,
                gpus=ngpu, gpu_speed=gspeed if ngpu else None, gpu_memory=gmem if ngpu else None,
                link_bandwidth_gbs=gbw if ngpu else None, link_latency_us=glat if ngpu else None,
                chiplets=chiplets or None, chiplet_link_gbs=gbw if chiplets else None,
                calibration={"base": src.name, "base_calibration": src.calibration.get("last", "?"),
                             "derived": datetime.datetime.now().isoformat(timespec="seconds")})
    _write_derived(m, src, kernels, speed, (gspeed, gmem, gbw, glat), folder)
    return m


def _check_derive_options(cpus, cpu_speed, gpus, gpu_speed, gpu_memory, link_bandwidth_gbs, link_latency_us,
                          chiplets, chiplet_link_gbs) -> None:
    """``derive``'s options, each a MachineError naming the flag (before the base is read)."""
    _check_chiplet_options(gpus, link_bandwidth_gbs, chiplets, chiplet_link_gbs)
    if chiplets:
        gpus = chiplets   # a chiplet is a simulated device: --gpu-speed, --gpu-memory, --link-latency are each one's
    gpu_opts = {"--gpu-speed": gpu_speed, "--gpu-memory": gpu_memory, "--link-bandwidth": link_bandwidth_gbs,
                "--link-latency": link_latency_us}
    if not gpus and any(v is not None for v in gpu_opts.values()):
        given = ", ".join(k for k, v in gpu_opts.items() if v is not None)
        raise MachineError(f"{given} describe simulated GPUs: give their number with --gpus N")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= MAX_GPUS):
        raise MachineError(f"--gpus must be an integer in [0, {MAX_GPUS}] (the simulation flavour's most CUDA "
                           f"devices), got {gpus!r}")
    for flag, v, zero_ok in (("--gpu-speed", gpu_speed, False), ("--link-bandwidth", link_bandwidth_gbs, False),
                             ("--link-latency", link_latency_us, True)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v != v
                              or v == float("inf") or v < 0 or (v == 0 and not zero_ok)):
            raise MachineError(f"{flag} must be a {'non-negative' if zero_ok else 'positive'} number, got {v!r}")
    if gpu_memory is not None and (isinstance(gpu_memory, bool) or not isinstance(gpu_memory, int)
                                   or gpu_memory < 2**20):
        raise MachineError(f"--gpu-memory must be at least 1 MiB (e.g. 16G), got {gpu_memory!r}")
    if gpus:
        why = cuda_simulation()
        if why is not None:
            flag, what = ("--chiplets", "chiplets") if chiplets else ("--gpus", "GPUs")
            raise MachineError(f"{flag} {gpus}: simulated {what} need CUDA codelets in the simulation flavour, and {why}")
    if cpus is not None and (isinstance(cpus, bool) or not isinstance(cpus, int) or not 1 <= cpus <= 256):
        raise MachineError(f"--cpus must be an integer in [1, 256] (the simulation flavour's most CPU workers), "
                           f"got {cpus!r}")
    if cpu_speed is not None and (isinstance(cpu_speed, bool) or not isinstance(cpu_speed, (int, float))
                                  or not cpu_speed > 0 or cpu_speed != cpu_speed or cpu_speed == float("inf")):
        raise MachineError(f"--cpu-speed must be a positive number, got {cpu_speed!r}")


def _check_chiplet_options(gpus, link_bandwidth_gbs, chiplets, chiplet_link_gbs) -> None:
    if chiplets is None:
        if chiplet_link_gbs is not None:
            raise MachineError("--chiplet-link describes simulated chiplets: give their number with --chiplets N")
        return
    if isinstance(chiplets, bool) or not isinstance(chiplets, int) or not 1 <= chiplets <= MAX_GPUS:
        raise MachineError(f"--chiplets must be an integer in [1, {MAX_GPUS}] (the simulation flavour's most "
                           f"devices), got {chiplets!r}")
    if gpus is not None:
        raise MachineError("--chiplets and --gpus both describe the machine's accelerators: give one of them")
    if link_bandwidth_gbs is not None:
        raise MachineError("--link-bandwidth is a GPU's link: a chiplet's link to the package's memory is "
                           "--chiplet-link GB/s")
    v = chiplet_link_gbs
    if v is None:
        raise MachineError("--chiplets needs --chiplet-link GB/s (each chiplet's link to the package's memory)")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v == float("inf") or v <= 0:
        raise MachineError(f"--chiplet-link must be a positive number, got {v!r}")


def _write_derived(m: Machine, src: Machine, kernels: dict, speed: float, gpu: tuple, folder: str) -> None:
    """A derived machine's folder, written whole (a temporary folder renamed) or not at all:
    the base's models scaled, the generated platform and config, the base's bus matrices.
    gpu: the GPUs' (speed, memory, link GB/s, link latency us)."""
    name, ncpu, ngpu = m.name, m.cpus, m.gpus
    gspeed, gmem, gbw, glat = gpu   # (speed, memory, link GB/s, link latency us; defaults without GPUs)
    os.makedirs(machines_dir(), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{name}.", dir=machines_dir())
    try:
        codelets = perfmodel.codelets_dir(os.path.join(tmp, "sampling"))
        bus = os.path.join(tmp, "sampling", "bus")
        os.makedirs(codelets)
        os.makedirs(bus)
        for sym, path in kernels.items():
            with open(path) as f:
                text = f.read()
            with open(os.path.join(codelets, f"{sym}.{name}"), "w") as f:
                if ngpu:
                    # GPU speed is relative to the calibrated root's CPU core: undo the base's
                    # own CPU scaling first
                    f.write(perfmodel.with_cuda(text, speed, ngpu, gspeed / src.cpu_speed, path))
                else:
                    f.write(perfmodel.scale(text, {"cpu": speed}, path))
        with open(os.path.join(bus, f"{name}.platform.v4.xml"), "w") as f:
            # each GPU its own link to RAM; main memory serves them all at once.  StarPU gives
            # each CUDA worker a core of its own (as on a real node): one more core per GPU, so
            # that the machine has `cpus` CPU workers
            f.write(platform_xml(ncpu + ngpu, ngpu, gmem, gbw * 1e9, glat * 1e-6, gbw * 1e9 * max(1, ngpu)))
        with open(os.path.join(bus, f"{name}.config"), "w") as f:
            f.write(config_text(ncpu + ngpu, ngpu))
        # the bus matrices StarPU measured (a simulation cannot measure them): main memory's
        # row is all a CPU-only machine reads; with devices, the transfer times the dm*
        # policies predict are the generated links' (the base's matrices know no such devices)
        for ext in BUS_FILES:
            src_file = os.path.join(src.sampling, "bus", f"{src.name}.{ext}")
            if not os.path.isfile(src_file):
                raise MachineError(f"machine {src.name!r} has no {src_file}: calibrate it again")
            shutil.copyfile(src_file, os.path.join(bus, f"{name}.{ext}"))
        if ngpu:
            for ext, text in zip(("bandwidth", "latency"), bus_matrices(ngpu, gbw * 1e9, glat * 1e-6)):
                with open(os.path.join(bus, f"{name}.{ext}"), "w") as f:
                    f.write(text)
        with open(os.path.join(tmp, "machine.json"), "w") as f:
            f.write(m.to_json())
        if os.path.exists(folder):
            shutil.rmtree(folder)
        os.rename(tmp, folder)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


__all__ = ["Machine", "MachineError", "SCALING_RULE", "load", "list_machines", "describe", "derive", "save",
           "from_dict", "machine_dir"]
