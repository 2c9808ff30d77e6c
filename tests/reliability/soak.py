"""The fault soak of issue 29 (shared by benchmarks/soak.py, 50 kills, and
tests/reliability/test_soak.py, 5): `tiletrain train` under `mpirun -np 2` (a tiny float64 GPT
with dropout, data-parallel, a checkpoint every few steps) is killed with SIGKILL at random
moments and resumed with --resume, until N kills; each training then runs to its end.

Kinds of kill (drawn in shuffled rounds of the three, from the seed):
  one rank      rank 0 or 1, at a random moment of what is left of the launch: uniform over the
                time the steps left and the exit take (at the pace of the last launches: the
                machine's load varies), from rank 0's "model:" line; a kill that comes after
                the job's exit does not count
  both ranks    both at once, at such a random moment
  during write  rank 0, rank 1 or both, as soon as the temporary file of a checkpoint write
                (checkpoint._atomic_file: ``.checkpoint.safetensors.*.tmp``) appears -- the
                write of a random index among those left in the launch
The seed fixes every draw; where a timed kill lands in the training also depends on the
machine's pace, so two runs with one seed kill at the same kinds, not at the same steps.
The watcher hard-links every checkpoint as soon as it is renamed into place, so each one is
verified even when the next one replaces it a few steps later.

Checked: every checkpoint seen loads and passes its checksums (checkpoint.load); after every
kill the checkpoint in the directory is whole and not older than the newest one seen (else it
was lost); every checkpoint's train and validation losses (those train logs at that step, in
full precision) and tensors (weights, AdamW state) equal those of an uninterrupted run at the
same step (within TOL: float64), the last one
at the final step; at the end of each training the directory holds the checkpoint only (no
temporary); a killed job ends within fault_timing.MAX_EXIT_S, a launch never hangs."""
from __future__ import annotations

import itertools
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mpi"))
from fault_timing import MAX_EXIT_S  # noqa: E402
from mpi_launch import _env, have_mpi  # noqa: E402

from tiletrain import checkpoint as ck  # noqa: E402
from tiletrain.train import RESUME_KEYS  # noqa: E402
from tiletrain.utils import mpirun  # noqa: E402
from tiletrain.utils.runlog import RunLogError, is_run_file, read_metrics  # noqa: E402

KINDS = ("one rank", "both ranks", "during write")
TOL = 1e-12  # float64: a resumed training equals the uninterrupted one to rounding at most
TEMP = (f".{ck.CHECKPOINT_NAME}.", ".tmp")  # prefix, suffix of a checkpoint write in progress (or cut)
CORPUS = "def add(a, b):\n    return a + b\n\nclass Tile:\n    pass\n" * 200
POLL_S = 0.002
_LINKS = itertools.count()


@dataclass
class SoakConfig:
    kills: int = 50
    seed: int = 0
    steps: int = 24
    every: int = 3           # a checkpoint (and a validation) every this many steps
    timeout: float = 120.0   # per launch; longer is a hang

    def command(self, data: Path, ckpt: Path, resume: bool) -> list[str]:
        train = ["-m", "tiletrain", "train", "--n-layer", "2", "--n-head", "2", "--n-embd", "16", "--dropout", "0.1",
                 "--seq-len", "8", "--batch", "4", "--tiles", "2,8,8", "--dtype", "float64", "--dist", "data",
                 "--steps", str(self.steps), "--warmup", "2", "--lr", "3e-3", "--seed", "5",
                 "--eval-every", str(self.every), "--eval-batches", "1", "--val-fraction", "0.1",
                 "--sample-tokens", "0", "--no-progress", "--data", str(data), "--ckpt-dir", str(ckpt)]
        return mpirun.command(2, [sys.executable, *train, *(["--resume"] if resume else [])])


@dataclass
class Plan:
    """One launch's kill."""
    kind: str
    ranks: tuple[int, ...]
    delay: float = 0.0   # one/both ranks: seconds after the training started
    write: int = 0       # during write: which of the launch's checkpoint writes to cut (0: the first)


@dataclass
class Launch:
    rc: int | None               # None: hung (killed after the timeout)
    output: str
    snapshots: list[Path]        # each checkpoint as it was renamed into place (hard links)
    new_temps: set[str]          # checkpoint temporaries created during the launch
    trained_at: float | None     # when rank 0 printed "model:" (training starts)
    saved_at: float | None       # when the last checkpoint appeared
    killed_at: float | None      # when the plan's SIGKILL was sent (None: the job ended first)
    exited_at: float


@dataclass
class Reference:
    """The uninterrupted run: per checkpoint step, its losses and tensors."""
    losses: dict[int, dict]
    tensors: dict[int, dict[str, np.ndarray]]
    step_s: float                # seconds per step ("model:" to the last checkpoint, over the steps)
    tail_s: float                # seconds from the last checkpoint to the job's exit


@dataclass
class SoakReport:
    config: SoakConfig
    kills: Counter = field(default_factory=Counter)       # kind -> kills
    cut_writes: Counter = field(default_factory=Counter)  # kind -> kills that left a temporary
    exit_after_kill: list[float] = field(default_factory=list)
    launches: int = 0
    resumes: int = 0             # launches with --resume
    restarts: int = 0            # launches from scratch after a kill (none written yet)
    trainings: int = 0           # trainings run to their end (each compared)
    checkpoints: int = 0         # checkpoints verified
    corrupt: int = 0
    lost: int = 0
    leftovers: int = 0           # files other than the checkpoint at the end of a training
    steps_compared: int = 0
    loss_diff: float = 0.0       # max |loss - uninterrupted loss| over every checkpoint seen
    final_diff: float = 0.0      # ... at the final step
    tensor_diff: float = 0.0     # max |tensor - uninterrupted tensor| (weights and AdamW state)
    wall: float = 0.0
    failures: list[str] = field(default_factory=list)

    @property
    def total_kills(self) -> int:
        return sum(self.kills.values())


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def _ranks(mpirun_pid: int) -> dict[int, int]:
    """rank -> pid of the ranks mpirun started (its children)."""
    out = {}
    for task in Path(f"/proc/{mpirun_pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for pid in map(int, children):
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            for item in env:
                if item.startswith(b"OMPI_COMM_WORLD_RANK="):
                    out[int(item.split(b"=", 1)[1])] = pid
    return out


def _kill(pids) -> bool:
    """SIGKILL these; whether any was still there."""
    hit = False
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            hit = True
        except ProcessLookupError:
            pass
    return hit


def _temps(ckpt: Path) -> set[str]:
    try:
        return {n for n in os.listdir(ckpt) if n.startswith(TEMP[0]) and n.endswith(TEMP[1])}
    except FileNotFoundError:  # not made yet (train makes it)
        return set()


def launch(cfg: SoakConfig, data: Path, ckpt: Path, snaps: Path, plan: Plan | None) -> Launch:
    """One `tiletrain train` job, watched every POLL_S: its checkpoints hard-linked into `snaps`
    as they appear, `plan`'s ranks killed when it says."""
    resume = (ckpt / ck.CHECKPOINT_NAME).is_file()
    before = _temps(ckpt)
    p = subprocess.Popen(cfg.command(data, ckpt, resume), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env=_env(), start_new_session=True)
    os.set_blocking(p.stdout.fileno(), False)
    out, snapshots, seen = bytearray(), [], set()
    start, trained_at, saved_at = time.time(), None, None
    killed_at = rc = None
    last = _inode(ckpt / ck.CHECKPOINT_NAME)
    try:
        while True:
            rc = p.poll()
            try:
                out += p.stdout.read() or b""
            except BlockingIOError:
                pass
            now = time.time()
            if trained_at is None and (out.startswith(b"model: ") or b"\nmodel: " in out):
                trained_at = now
            if _inode(ckpt / ck.CHECKPOINT_NAME) not in (None, last):
                link = snaps / f"{next(_LINKS)}.safetensors"
                try:
                    os.link(ckpt / ck.CHECKPOINT_NAME, link)
                    last, saved_at = _inode(link), now
                    snapshots.append(link)
                except FileNotFoundError:
                    pass
            new = _temps(ckpt) - before - seen
            if rc is not None:
                break
            if plan is not None and killed_at is None:
                if plan.kind == "during write":
                    fire = new and max(len(seen), len(snapshots)) >= plan.write
                else:
                    fire = trained_at is not None and now >= trained_at + plan.delay
                ranks = _ranks(p.pid) if fire else {}
                if _kill(ranks[r] for r in plan.ranks if r in ranks):
                    killed_at = time.time()
            seen |= new
            if now - start > cfg.timeout:  # a hang
                break
            time.sleep(POLL_S)
    finally:
        if p.poll() is None:  # a hang, or this process was interrupted: nothing of the job survives
            _kill([*_ranks(p.pid).values(), p.pid])
            p.wait()
    exited = time.time()
    os.set_blocking(p.stdout.fileno(), True)
    out += p.stdout.read() or b""
    p.stdout.close()
    return Launch(rc, out.decode(errors="replace"), snapshots, seen | (_temps(ckpt) - before), trained_at,
                  saved_at, killed_at, exited)


def _verify(path: Path, report: SoakReport) -> tuple[dict, dict] | None:
    """(tensors, metadata) of a checkpoint that loads and passes its checksums; None (and a
    failure) otherwise."""
    try:
        arrays, meta = ck.load(path, RESUME_KEYS)
    except ck.CheckpointError as exc:
        report.corrupt += 1
        report.failures.append(f"corrupt checkpoint: {exc}")
        return None
    report.checkpoints += 1
    return arrays, meta


def compare(arrays: dict, meta: dict, ref: Reference, report: SoakReport) -> int:
    """A checkpoint against the uninterrupted run at its step: the differences go into the
    report (a failure beyond TOL); returns the step."""
    step = meta["step"]
    if step not in ref.losses:
        report.failures.append(f"a checkpoint at step {step}, where the uninterrupted run wrote none")
        return step
    want, got = ref.losses[step], meta["losses"]
    loss = max(abs(got[k] - want[k]) for k in want)
    tensors = max(float(np.max(np.abs(arrays[k] - v), initial=0.0)) for k, v in ref.tensors[step].items())
    report.steps_compared += 1
    report.loss_diff = max(report.loss_diff, loss)
    report.tensor_diff = max(report.tensor_diff, tensors)
    if step == report.config.steps:
        report.final_diff = max(report.final_diff, loss)
    if loss > TOL or tensors > TOL:
        report.failures.append(f"step {step}: the losses differ from the uninterrupted run's by {loss:.3g}, "
                               f"the tensors by {tensors:.3g} (at most {TOL:g})")
    return step


def audit_kill(ckpt: Path, newest: int | None, report: SoakReport) -> None:
    """After a kill: the checkpoint left is whole and not older than the newest one seen
    (`newest`: its step; None: none seen yet)."""
    if newest is None:
        return
    present = ckpt / ck.CHECKPOINT_NAME
    got = _verify(present, report) if present.is_file() else None
    if got is None or got[1]["step"] < newest:
        report.lost += 1
        report.failures.append(f"after kill {report.total_kills} the checkpoint of step {newest} is lost "
                               f"(left: {'step ' + str(got[1]['step']) if got else 'none'})")


def audit_end(ckpt: Path, ref: Reference, report: SoakReport) -> None:
    """A training that ran to its end: its checkpoint is whole, at the final step, equal to the
    uninterrupted run's; nothing else is left in the directory."""
    if not (ckpt / ck.CHECKPOINT_NAME).is_file():
        report.lost += 1
        report.failures.append("the training ended without a checkpoint")
        got = None
    else:
        got = _verify(ckpt / ck.CHECKPOINT_NAME, report)
    if got is not None and compare(*got, ref, report) != report.config.steps:
        report.failures.append(f"the training ended with a checkpoint at step {got[1]['step']}")
    try:  # the metrics log: one line per step, none twice, across every kill and resume
        logged = [m["step"] for m in read_metrics(ckpt)]
    except RunLogError as exc:
        logged = f"unreadable ({exc})"
    if logged != list(range(1, report.config.steps + 1)):
        report.failures.append(f"metrics.jsonl holds the steps {logged}, not 1..{report.config.steps} once each")
    extra = sorted(p.name for p in ckpt.iterdir() if p.name != ck.CHECKPOINT_NAME and not is_run_file(p.name))
    if extra:
        report.leftovers += len(extra)
        report.failures.append(f"left in the checkpoint directory: {', '.join(extra)}")


def reference(cfg: SoakConfig, data: Path, work: Path, tries: int = 3) -> Reference:
    """The uninterrupted run (RuntimeError when it fails; run again when the watcher, starved
    of the CPU, missed one of its checkpoints)."""
    ckpt, snaps = work / "reference", work / "snapshots"
    snaps.mkdir(parents=True, exist_ok=True)
    want = sorted({*range(cfg.every, cfg.steps + 1, cfg.every), cfg.steps})
    for _ in range(tries):
        shutil.rmtree(ckpt, ignore_errors=True)
        run = launch(cfg, data, ckpt, snaps, None)
        if run.rc != 0 or run.trained_at is None or run.saved_at is None:
            raise RuntimeError(f"the uninterrupted run failed (exit {run.rc}):\n{run.output[-3000:]}")
        ref = Reference({}, {}, (run.saved_at - run.trained_at) / cfg.steps, run.exited_at - run.saved_at)
        for link in run.snapshots:
            arrays, meta = ck.load(link, RESUME_KEYS)
            ref.losses[meta["step"]], ref.tensors[meta["step"]] = meta["losses"], arrays
            link.unlink()
        if sorted(ref.losses) == want:
            shutil.rmtree(ckpt)
            return ref
    raise RuntimeError(f"the uninterrupted run's checkpoints were seen at steps {sorted(ref.losses)}, "
                       f"not {want}")


def _plan(kind: str, rng: random.Random, ref: Reference, cfg: SoakConfig, start: int, step_s: float) -> Plan:
    """The next launch's kill; `step_s`: seconds per step lately (the machine's load varies)."""
    if kind == "during write":
        left = sum(s % cfg.every == 0 or s == cfg.steps for s in range(start + 1, cfg.steps + 1))
        return Plan(kind, rng.choice([(0,), (1,), (0, 1)]), write=rng.randrange(max(1, left)))
    ranks = (rng.randrange(2),) if kind == "one rank" else (0, 1)
    return Plan(kind, ranks, delay=rng.uniform(0.0, step_s * (cfg.steps - start) + ref.tail_s))


def run_soak(cfg: SoakConfig, work: Path, log=None) -> SoakReport:
    """Kill and resume trainings until cfg.kills kills (see the module's docstring)."""
    t0 = time.perf_counter()
    report = SoakReport(cfg)
    rng = random.Random(cfg.seed)
    kinds: list[str] = []
    while len(kinds) < cfg.kills:
        kinds += rng.sample(KINDS, len(KINDS))
    work.mkdir(parents=True, exist_ok=True)
    data, ckpt, snaps = work / "corpus.txt", work / "ckpt", work / "snapshots"
    data.write_text(CORPUS)
    try:
        ref = reference(cfg, data, work)
    except RuntimeError as exc:
        report.failures.append(str(exc))
        return report
    newest = None  # step of the newest checkpoint seen in this training
    killed = False
    paces = deque([ref.step_s], maxlen=5)  # seconds per step in the last launches
    while True:
        ckpt.mkdir(exist_ok=True)
        start = newest or 0
        plan = _plan(kinds[report.total_kills], rng, ref, cfg, start, statistics.median(paces)) \
            if report.total_kills < cfg.kills else None
        resume = (ckpt / ck.CHECKPOINT_NAME).is_file()
        report.launches += 1
        report.resumes += resume
        report.restarts += killed and not resume
        run = launch(cfg, data, ckpt, snaps, plan)
        for link in run.snapshots:
            got = _verify(link, report)
            if got is not None:
                newest = max(newest or 0, compare(*got, ref, report))
            link.unlink()
        if run.saved_at is not None and run.trained_at is not None and (newest or 0) > start:
            paces.append((run.saved_at - run.trained_at) / (newest - start))
        if run.rc is None:
            report.failures.append(f"launch {report.launches} hung (killed after {cfg.timeout:.0f} s):\n"
                                   f"{run.output[-3000:]}")
            break
        if run.killed_at is not None and run.rc != 0:
            killed = True
            report.kills[plan.kind] += 1
            after = run.exited_at - run.killed_at
            report.exit_after_kill.append(after)
            if after > MAX_EXIT_S:
                report.failures.append(f"a {plan.kind} kill (ranks {plan.ranks}): the job took {after:.1f} s "
                                       f"to end (at most {MAX_EXIT_S:g} s)")
            report.cut_writes[plan.kind] += bool(run.new_temps & _temps(ckpt))
            if log:
                log(f"kill {report.total_kills}: {plan.kind} (ranks {plan.ranks}), newest checkpoint "
                    f"step {newest}, job ended {after:.2f} s later")
            audit_kill(ckpt, newest, report)
            continue
        if run.rc != 0:
            report.failures.append(f"launch {report.launches} exited {run.rc} without a kill:\n"
                                   f"{run.output[-3000:]}")
            break
        audit_end(ckpt, ref, report)  # a training ran to its end
        report.trainings += 1
        if log:
            log(f"training {report.trainings} ended after {report.total_kills} kills in all"
                + (f" (this launch ended before its kill: {plan})" if plan else ""))
        shutil.rmtree(ckpt)
        newest, killed = None, False
        if report.total_kills >= cfg.kills:
            break
    report.wall = time.perf_counter() - t0
    return report


def format_report(r: SoakReport) -> str:
    c = r.config
    lines = [f"fault soak: mpirun -np 2 tiletrain train (float64, data-parallel), {c.steps} steps, "
             f"a checkpoint every {c.every}; seed {c.seed}",
             f"{'kill':14s} {'kills':>6s} {'cut a write':>12s}"]
    for kind in KINDS:
        lines.append(f"{kind:14s} {r.kills[kind]:6d} {r.cut_writes[kind]:12d}")
    exits = sorted(r.exit_after_kill)
    lines += [f"{'all':14s} {r.total_kills:6d} {sum(r.cut_writes.values()):12d}",
              f"kill to job exit: median {exits[len(exits) // 2] if exits else 0:.2f} s, "
              f"max {max(exits, default=0):.2f} s",
              f"launches {r.launches}: resumes {r.resumes}, restarts from scratch {r.restarts}; "
              f"trainings run to the end {r.trainings}",
              f"checkpoints verified {r.checkpoints}: lost {r.lost}, corrupt {r.corrupt}; "
              f"temporaries left {r.leftovers}",
              f"max difference from the uninterrupted run over {r.steps_compared} checkpoints: losses "
              f"{r.loss_diff:.3g} (final {r.final_diff:.3g}), tensors {r.tensor_diff:.3g}",
              f"wall time {r.wall:.0f} s",
              f"result: {'FAILED' if r.failures else 'ok'}"]
    lines += [f"  {f}" for f in r.failures]
    return "\n".join(lines)


__all__ = ["KINDS", "Reference", "SoakConfig", "SoakReport", "audit_end", "audit_kill", "compare",
           "format_report", "have_mpi", "run_soak"]
