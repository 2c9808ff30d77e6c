"""`tiletrain train --dist pipeline|pipeline+data`: a pipeline schedule and the one executor.

A pipelined layout (more than one stage) trains by stepping a :class:`Schedule` with
:class:`~tiletrain.pipeline.model.ModelPipeline` -- the executor the benchmarks and
``tiletrain schedule run --gpt`` use too.  The schedule is ``--schedule NAME|FILE.csv``: a
built-in (``schedules.NAMES``, made for the layout's stages and ``--micro-batches``) or a CSV
file in PyTorch's layout (one row per stage, ``Schedule.from_csv``); 1F1B by default.  Under
``pipeline+data`` each of the D replicas runs the schedule on its shard of every micro-batch;
in one process ``--dist pipeline --stages S`` runs S stages on groups of workers.  ``single``
and ``data`` (and a one-stage layout) step through ``parallel.shard_backward``, as before.

The schedules without a flush (``pb``) or with stage-local losses (``local``) update each
stage's weights during the step: the pipeline then holds per-stage optimizers made by the
loop's factory (``optimizer(params, delay, compensation)``; ``pb`` with ``--compensation``,
Spike Compensation and Linear Weight Prediction by default; ``local`` none: its delays are
0), the loop steps none of its own (``updates``), and
the checkpoint's optimizer state is theirs (``ModelPipeline.optimizer``).  ``local`` trains
the causal LM's default heads, one per stage boundary (``CausalLMStages``): they are not in
the checkpoint, so ``--resume`` refuses it.

    sch = training_schedule(spec, mode, micro_batches, n_layer)   # up front: None or a Schedule
    pipe = place(model, mode, stages, sch, optimizer)             # before the optimizer
    losses = step(model, pipe, batches)                           # [(x, y)] per micro-batch
"""
from __future__ import annotations

import os
from typing import Callable

from .. import parallel
from ..parallel import PIPELINED, layout
from . import schedules
from .model import ModelPipeline, pipeline_plan
from .schedule import Schedule, ScheduleError

DEFAULT_SCHEDULE = "1f1b"
# how the executor enforces a schedule's order in training (enforce.MECHANISMS): priorities
# from the action order plus, per rank, an ordering dependency between consecutive actions
MECHANISM = "deps"
# --compensation: the delay compensation of the per-stage optimizers under pb (tiletrain.optim)
COMPENSATION_CHOICES = ("none", "sc", "lwp", "sc+lwp")


def check_schedule_option(spec: str | None, mode: str, resume: bool = False) -> None:
    """``--schedule``'s own checks (TrainArgs.validate, before the world size is known): a
    pipelined ``--dist``, and a built-in name or a readable, valid CSV schedule; ``local``
    cannot resume (its heads are not in the checkpoint)."""
    if spec is None:
        return
    if mode not in PIPELINED:
        raise ValueError(f"--schedule is for --dist {' or '.join(PIPELINED)} (--dist {mode} runs no pipeline)")
    if spec in schedules.LOCAL and resume:
        raise ValueError("--resume with --schedule local: the auxiliary heads of the stage boundaries are not in "
                         "the checkpoint (start a new run, or resume with --schedule pb)")
    if spec in schedules.NAMES:
        return
    if not os.path.isfile(spec):
        raise ValueError(f"--schedule {spec!r}: neither a built-in schedule ({', '.join(schedules.NAMES)}) nor a "
                         "CSV file (PyTorch's layout: one row per stage, e.g. 0F0,0F1,0B0,...)")
    _read_csv(spec)


def updates(schedule: Schedule | None) -> bool:
    """Whether ``schedule``'s stages update their weights during the step (no flush, or
    stage-local losses): the pipeline's per-stage optimizers step, not the loop's."""
    return schedule is not None and (not schedule.flush or schedule.local)


def _read_csv(path: str) -> Schedule:
    try:
        return Schedule.from_csv(path).validate()
    except (ScheduleError, OSError) as exc:
        raise ValueError(f"--schedule {path}: {exc}") from None


def training_schedule(spec: str | None, mode: str, micro_batches: int, n_layer: int, world: int | None = None,
                      stages: int | None = None) -> Schedule | None:
    """The schedule ``tiletrain train --dist mode [--stages S] --schedule spec`` steps: None
    when the layout has one stage (``single``, ``data``, a one-process run); else the
    built-in ``spec`` (default 1F1B) for the layout's S stages and ``micro_batches``, or the
    CSV file ``spec``, checked to fit them and the model's ``n_layer`` blocks.  Depends only
    on its arguments: every rank raises the same ValueError, before anything is submitted."""
    check_schedule_option(spec, mode)
    S, D = layout(mode, world, stages)
    if S == 1:
        return None
    name = spec or DEFAULT_SCHEDULE
    if name in schedules.NAMES:
        try:
            s = schedules.get(name, S, micro_batches)
        except ValueError as exc:   # e.g. interleaved-1f1b: micro-batches a multiple of the stages
            raise ValueError(f"--schedule {name} on {S} stages x --micro-batches {micro_batches}: {exc}") from None
    else:
        s = _read_csv(name)
        for what, want, got in (("stages (rows)", S, s.ranks), ("micro-batches", micro_batches, s.microbatches)):
            if want != got:
                raise ValueError(f"--schedule {name}: the schedule has {got} {what}, --dist {mode} on this job "
                                 f"needs {want} (--micro-batches {micro_batches}; {S} stages)")
    if updates(s) and D > 1:
        raise ValueError(f"--schedule {name} updates every stage during the step, with one replica: use --dist "
                         f"pipeline (--dist {mode} has {D} data-parallel replicas)")
    if s.stages > n_layer:
        raise ValueError(f"--schedule {name}: {s.stages} virtual stages but the model has only {n_layer} layers "
                         "(at most one virtual stage per layer)")
    return s


def place(model, mode: str, stages: int | None = None, schedule: Schedule | None = None,
          optimizer: Callable | None = None, grad_clip: float = 0.0,
          compensation: str = "none") -> ModelPipeline | None:
    """``parallel.place`` for ``--dist mode``: without a schedule the mode's layout (None
    returned); with one, the model placed for it (``pipeline_plan``: its virtual stages on
    their ranks) and the :class:`ModelPipeline` that steps it -- with per-stage optimizers
    from the factory ``optimizer(params, delay, compensation)`` when the schedule updates
    during the step (``updates``; ``compensation`` one of ``COMPENSATION_CHOICES``, for the
    schedules without a flush but ``local``), each stage's gradient clipped to ``grad_clip``
    (0: none) before its update.  Collective under MPI; before the optimizer is made."""
    if schedule is None:
        parallel.place(model, mode, stages)
        return None
    parallel.place(model, pipeline_plan(model, schedule))
    if not updates(schedule):
        return ModelPipeline(model, schedule, MECHANISM)
    if compensation not in COMPENSATION_CHOICES:
        raise ValueError(f"compensation must be one of {', '.join(COMPENSATION_CHOICES)}, got {compensation!r}")
    comp = None if schedule.local or compensation == "none" else compensation
    return ModelPipeline(model, schedule, MECHANISM, optimizer=lambda ps, d: optimizer(ps, d, comp),
                         grad_clip=grad_clip)


def step(model, pipe: ModelPipeline | None, batches: list) -> list:
    """The forward and backward of one step's micro-batches ``batches`` ([(x, y)], token ids
    (B, T) each; gradients accumulate as the mean's): through the pipeline ``pipe``, else
    ``parallel.shard_backward`` micro-batch after micro-batch.  Returns the losses (Tensors,
    per micro-batch and replica; nothing read)."""
    if pipe is not None:
        return pipe.step([x for x, _ in batches], [y for _, y in batches]).losses
    m = len(batches)
    return [loss for k, (x, y) in enumerate(batches) for loss in parallel.shard_backward(model, x, y, k, m)]


__all__ = ["COMPENSATION_CHOICES", "DEFAULT_SCHEDULE", "MECHANISM", "check_schedule_option", "place", "step",
           "training_schedule", "updates"]
