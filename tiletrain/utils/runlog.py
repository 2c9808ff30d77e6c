"""Run directories: what a training run leaves to look at afterwards.

    log = RunLogger("runs/mine", config={"lr": 1e-3, "steps": 100})   # run.json written now
    for step in range(1, 101):
        ...
        log.log(step, train_loss=float(loss), lr=lr)    # one line of metrics.jsonl, TensorBoard scalars
    log.text("sample", text, step=100)
    log.close()

A run directory holds

  run.json          the configuration, versions (tiletrain, StarPU, BLAS, Python, NumPy), the
                    machine, the start time, the seed, and each resume
  metrics.jsonl     one JSON object per logged step, appended with one write() per line
  text.jsonl        the texts logged (samples), one JSON object per line
  events.out.tfevents.*.tiletrain
                    TensorBoard event files (`tensorboard --logdir runs`): a scalar per metric,
                    the texts and the configuration; rebuilt from metrics.jsonl and text.jsonl
                    on a resume, so they never hold a step twice
  trace-stepN.json  a step's Perfetto trace (``save_trace``) and trace-stepN-metrics.json

metrics.jsonl is the record; everything else is derived from it.  ``RunLogger(dir,
resume_step=N)`` continues a run whose checkpoint is at step N: lines after N (logged
after that checkpoint, by a run that was killed before the next one) are dropped, so the
resumed run writes each step once.  `tiletrain train` logs every step before it writes that
step's checkpoint, so a kill between the two is undone by the resume, and a kill after the
checkpoint and before the next line loses nothing.  Used by `tiletrain train`
(tiletrain/train/loop.py) and read by `tiletrain runs` (tiletrain/train/runs.py); see
docs/runs.md."""
from __future__ import annotations

import datetime
import json
import math
import os
import platform
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from .. import trace as _trace
from .._version import __version__
from ..runtime import current, is_initialized, rank as _rank

__all__ = ["RunLogger", "RunLogError", "read_metrics", "read_texts", "read_run", "environment", "METRICS_NAME",
           "RUN_NAME", "TEXT_NAME", "EVENTS_SUFFIX", "is_run_file"]

METRICS_NAME = "metrics.jsonl"
RUN_NAME = "run.json"
TEXT_NAME = "text.jsonl"
EVENTS_PREFIX = "events.out.tfevents."
EVENTS_SUFFIX = ".tiletrain"  # our event files (a resume rebuilds them; other writers' files are left alone)


class RunLogError(ValueError):
    """A run directory that cannot be logged into or read (no metrics, a corrupt line, a
    directory holding another run)."""


def is_run_file(name: str) -> bool:
    """Whether a file name in a run directory is one RunLogger writes (a checkpoint
    directory's other contents: checkpoint.safetensors, its temporaries)."""
    return (name in (METRICS_NAME, RUN_NAME, TEXT_NAME) or _is_events(name)
            or (name.startswith("trace-step") and name.endswith(".json")) or name.startswith(f".{RUN_NAME}."))


def _is_events(name: str) -> bool:
    return name.startswith(EVENTS_PREFIX) and name.endswith(EVENTS_SUFFIX)


def _read_lines(path: Path, what: str) -> tuple[list[dict], bool]:
    """The JSON objects of a .jsonl file, and whether the file needs rewriting (a torn last
    line: a kill in the middle of a write; no newline at the end)."""
    if not path.is_file():
        return [], False
    data = path.read_bytes()
    lines = data.split(b"\n")
    out, torn = [], not data.endswith(b"\n") and bool(data)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            if i == len(lines) - 1:  # the last line, cut by a kill: dropped
                torn = True
                break
            raise RunLogError(f"{path}:{i + 1}: a corrupt {what} line ({exc}): {line[:80]!r}") from None
        out.append(obj)
    return out, torn


def read_metrics(run_dir: str | os.PathLike) -> list[dict]:
    """The lines of a run directory's metrics.jsonl (a cut last line left out); RunLogError
    when there is none, saying why."""
    d = Path(run_dir)
    if not d.is_dir():
        raise RunLogError(f"{d} is not a directory")
    path = d / METRICS_NAME
    if not path.is_file():
        what = ("it holds a checkpoint written by a tiletrain from before metrics logs: resume it (tiletrain train "
                "--ckpt-dir DIR --resume --steps N) to log the steps from now on"
                if (d / "checkpoint.safetensors").is_file() else "it is not a run directory of tiletrain train")
        raise RunLogError(f"{d} has no {METRICS_NAME}: {what}")
    return _read_lines(path, "metrics")[0]


def read_texts(run_dir: str | os.PathLike) -> list[dict]:
    return _read_lines(Path(run_dir) / TEXT_NAME, "text")[0]


def read_run(run_dir: str | os.PathLike) -> dict:
    """run.json of a run directory ({} when there is none)."""
    path = Path(run_dir) / RUN_NAME
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise RunLogError(f"{path} is not JSON ({exc})") from None


def environment() -> dict:
    """Versions and the machine: tiletrain, Python, NumPy, the platform and, when a runtime
    is running, StarPU, the BLAS, the scheduler and the workers."""
    env: dict[str, Any] = {
        "tiletrain": __version__, "python": platform.python_version(), "numpy": np.__version__,
        "machine": {"hostname": socket.gethostname(), "platform": platform.platform(),
                    "processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                    "memory_bytes": _total_memory()},
    }
    if is_initialized():
        info = current().info()
        env.update(starpu=info.get("starpu"), blas=info.get("blas"), sched=info.get("sched"),
                   workers={kind: sum(1 for w in info["workers"] if w.kind == kind)
                            for kind in sorted({w.kind for w in info["workers"]})})
    return env


def _total_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _jsonable(value):
    """A value as JSON takes it: NumPy scalars as Python numbers, non-finite floats as None
    (JSON has no NaN), tuples as lists, anything else by str."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if value is None or isinstance(value, str):
        return value
    return str(value)


def _write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` (temporary file, fsync, rename): a kill leaves the old or
    the new file, never half of one."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with _suppress():
            os.unlink(tmp)
        raise


class _suppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], OSError)


def _lines(objs: list[dict]) -> bytes:
    return b"".join(json.dumps(o).encode() + b"\n" for o in objs)


class _Events:
    """TensorBoard event files written with the `tensorboard` package's own writer (its
    import is paid only here)."""

    def __init__(self, directory: Path):
        try:
            from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
            from tensorboard.plugins.text import metadata as text_metadata
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError:
            raise RunLogError("TensorBoard event files need the tensorboard package: pip install tensorboard "
                              "(or pass --no-tensorboard / tensorboard=False)") from None
        self._pb = (event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2, text_metadata)
        self._writer = EventFileWriter(str(directory), max_queue_size=100, flush_secs=10,
                                       filename_suffix=EVENTS_SUFFIX)

    def scalars(self, step: int, values: dict, wall_time: float) -> None:
        event_pb2, summary_pb2 = self._pb[:2]
        vals = [summary_pb2.Summary.Value(tag=k, simple_value=float(v)) for k, v in values.items()]
        if vals:
            self._writer.add_event(event_pb2.Event(wall_time=wall_time, step=step,
                                                   summary=summary_pb2.Summary(value=vals)))

    def text(self, tag: str, text: str, step: int, wall_time: float) -> None:
        event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2, text_metadata = self._pb
        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[text.encode()],
                                        tensor_shape=tensor_shape_pb2.TensorShapeProto())
        value = summary_pb2.Summary.Value(tag=tag, tensor=tensor,
                                          metadata=text_metadata.create_summary_metadata(display_name=tag,
                                                                                         description=""))
        self._writer.add_event(event_pb2.Event(wall_time=wall_time, step=step,
                                               summary=summary_pb2.Summary(value=[value])))

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def _scalars(line: dict) -> dict:
    """The numbers of a metrics line that become TensorBoard scalars (step and time are the
    event's own)."""
    return {k: v for k, v in line.items() if k not in ("step", "time") and isinstance(v, (int, float))
            and not isinstance(v, bool) and math.isfinite(v)}


def _config_text(config: dict) -> str:
    return "```\n" + json.dumps(config, indent=2, sort_keys=True) + "\n```"


class RunLogger:
    """Metrics of a run into ``directory``: metrics.jsonl (one object per ``log``), run.json,
    TensorBoard event files (``tensorboard=False``: none), texts, step traces.

    ``config``: the run's options (any JSON-able dict; kept in run.json and shown in
    TensorBoard).  ``resume_step``: continue the run of that directory from a checkpoint at
    that step (its lines after it are dropped; None: a new run).  A new run in a directory
    that already holds metrics is refused unless ``overwrite`` (which replaces them).
    ``rank``: under mpirun only rank 0 writes (others get a logger that writes nothing);
    default: this process' rank.  ``extra``: more fields of run.json."""

    def __init__(self, directory: str | os.PathLike, config: dict | None = None, *, resume_step: int | None = None,
                 overwrite: bool = False, tensorboard: bool = True, seed: int | None = None, rank: int | None = None,
                 extra: dict | None = None):
        self.directory = Path(directory)
        self.active = (rank if rank is not None else _rank()) == 0
        self.resume_step = resume_step
        self.dropped = 0        # lines after resume_step dropped by the resume
        self.last_step: int | None = None
        self.base_elapsed = 0.0  # elapsed_s of the last line kept (a resumed run's time so far)
        self._events = None
        self._fd = None
        self.had_metrics = False  # resuming: whether the directory held metrics (not: a run of an older tiletrain)
        if not self.active:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        metrics_path = self.directory / METRICS_NAME
        lines, torn = _read_lines(metrics_path, "metrics")
        texts, torn_texts = _read_lines(self.directory / TEXT_NAME, "text")
        run = read_run(self.directory)
        if resume_step is None:
            if lines and not overwrite:
                raise RunLogError(f"{self.directory} already holds the metrics of a run ({metrics_path}, "
                                  f"{len(lines)} steps): resume that run or overwrite it (tiletrain train --resume "
                                  "/ --overwrite), or log into another directory")
            lines, texts, run, torn, torn_texts = [], [], {}, bool(lines) or torn, bool(texts) or torn_texts
            for p in self.directory.iterdir():  # the old run's traces
                if p.name.startswith("trace-step") and p.name.endswith(".json"):
                    p.unlink()
        self.had_metrics = bool(lines)
        keep = [ln for ln in lines
                if isinstance(ln.get("step"), int) and (resume_step is None or ln["step"] <= resume_step)]
        self.dropped = len(lines) - len(keep)
        keep_texts = [t for t in texts if resume_step is None or t.get("step", 0) <= resume_step]
        if self.dropped or torn or not metrics_path.exists():
            _write_atomic(metrics_path, _lines(keep))
        if len(keep_texts) != len(texts) or torn_texts:
            _write_atomic(self.directory / TEXT_NAME, _lines(keep_texts))
        if keep:
            self.last_step = keep[-1]["step"]
            self.base_elapsed = float(keep[-1].get("elapsed_s") or 0.0)
        now = time.time()
        self.run = run if resume_step is not None and run else {
            "started": datetime.datetime.fromtimestamp(now).astimezone().isoformat(timespec="seconds"),
            "command": sys.argv, "seed": seed, "config": _jsonable(config or {}), **environment(),
            **_jsonable(extra or {})}
        if resume_step is not None:
            self.run.setdefault("resumes", []).append({
                "step": resume_step, "time": datetime.datetime.fromtimestamp(now).astimezone().isoformat(
                    timespec="seconds"), "dropped_lines": self.dropped, **environment()})
            if config is not None:
                self.run["config"] = _jsonable(config)
        self._write_run()
        self._fd = os.open(metrics_path, os.O_WRONLY | os.O_APPEND)
        if tensorboard:
            self._rebuild_events(keep, keep_texts)
        else:  # event files of before would disagree with metrics.jsonl
            for p in self._event_files():
                p.unlink()

    # -- run.json

    def update(self, **fields) -> None:
        """Add or replace fields of run.json (written again, atomically)."""
        if self.active:
            self.run.update(_jsonable(fields))
            self._write_run()

    def _write_run(self) -> None:
        _write_atomic(self.directory / RUN_NAME, (json.dumps(self.run, indent=2) + "\n").encode())

    # -- metrics

    def log(self, step: int, **values) -> dict:
        """One line of metrics.jsonl for ``step`` (larger than the last one logged): the
        values given (numbers, None for not measured) and the wall time; written with one
        write() (a kill leaves whole lines) before this returns.  Returns the line."""
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            raise TypeError(f"RunLogger.log: step must be an int, got {step!r}")
        step = int(step)
        if self.last_step is not None and step <= self.last_step:
            raise RunLogError(f"RunLogger.log: step {step} is not after the last step logged ({self.last_step}) "
                              f"in {self.directory / METRICS_NAME}")
        line = {"step": step, **_jsonable(values), "time": round(time.time(), 3)}
        self.last_step = step
        if not self.active:
            return line
        os.write(self._fd, json.dumps(line).encode() + b"\n")
        if self._events is not None:
            self._events.scalars(step, _scalars(line), line["time"])
        return line

    def text(self, tag: str, text: str, step: int = 0) -> None:
        """A text (a sample, notes) at a step: text.jsonl and TensorBoard's Text tab."""
        if not self.active:
            return
        entry = {"step": int(step), "tag": str(tag), "text": str(text), "time": round(time.time(), 3)}
        with open(self.directory / TEXT_NAME, "ab") as f:
            f.write(json.dumps(entry).encode() + b"\n")
        if self._events is not None:
            self._events.text(entry["tag"], entry["text"], entry["step"], entry["time"])

    def save_trace(self, step: int, trace) -> dict:
        """A step's task trace (tiletrain.trace.Trace, e.g. ``tt.trace.recording()``'s) as
        trace-stepN.json (Chrome/Perfetto: open in ui.perfetto.dev) and its metrics --
        makespan, idle per worker, critical path, bounds -- as trace-stepN-metrics.json;
        returns the metrics (a dict)."""
        m = _trace.metrics(trace)
        if self.active:
            _trace.save(trace, self.directory / f"trace-step{int(step)}.json")
            doc = {"step": int(step), "summary": _trace.format_metrics(m), **m.as_dict()}
            _write_atomic(self.directory / f"trace-step{int(step)}-metrics.json",
                          (json.dumps(_jsonable(doc), indent=2) + "\n").encode())
        return m.as_dict()

    # -- TensorBoard

    def _rebuild_events(self, lines: list[dict], texts: list[dict]) -> None:
        """A new event file holding the kept lines, the texts and the configuration; then
        the previous ones removed (a kill in between leaves both, and the next resume
        rebuilds again)."""
        old = self._event_files()
        self._events = _Events(self.directory)
        self._events.text("config", _config_text(self.run), 0, time.time())
        for ln in lines:
            self._events.scalars(ln["step"], _scalars(ln), float(ln.get("time") or time.time()))
        for t in texts:
            self._events.text(t["tag"], t["text"], t["step"], float(t.get("time") or time.time()))
        self._events.flush()
        for p in old:
            with _suppress():
                p.unlink()

    def _event_files(self) -> list[Path]:
        return [p for p in self.directory.iterdir() if _is_events(p.name)]

    def flush(self) -> None:
        if self._events is not None:
            self._events.flush()

    def close(self) -> None:
        """Flush and close the files (a closed logger refuses nothing: close is idempotent)."""
        if self._events is not None:
            self._events.close()
            self._events = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "RunLogger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunLogger({str(self.directory)!r}, last_step={self.last_step})"
