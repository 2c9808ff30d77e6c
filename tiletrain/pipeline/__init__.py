"""Pipelines and scheduling knobs: stage affinity, priority hints, critical-path priorities,
the schedule formulas, a list-scheduling simulator, and pipeline experiments in miniature
with synthetic busy-wait/sleep tasks (the experiments: tiletrain.experiments.pipeline).

Schedules as data (tiletrain.pipeline.schedule, .schedules, .enforce): a ``Schedule`` lists
per rank the ordered actions F/B/I/W in PyTorch's notation; the published ones are built in
(``schedules.get("zb-v", stages=4, microbatches=8)``); ``enforce``/``run_synthetic`` run one
on the runtime and measure how much of its order submission order, priorities and ordering
dependencies achieved.  The ``emergent`` schedules write no order: tasks carry their data
dependencies, the stage (worker) that owns them and priorities; the overlap is whatever
dataflow gives, and it is measured (``emergent-zb`` splits the backward and runs weight
gradients below forwards and input gradients, so they fill the bubble).

On a real model (tiletrain.pipeline.model): ``ModelPipeline(model, schedule, mechanism)``
runs each action as the model's own work -- a virtual stage's forward, its backward (B), or
split into input gradient (I) and deferred weight gradients (W) -- on worker groups in one
process or on MPI ranks (``place(model, pipeline_plan(model, schedule))`` first), for a GPT
or Llama, a DeepGCN (node chunks, tiletrain.pipeline.gnn) or a list of stage modules; with
``optimizer=`` each stage updates its own weights, during the step for the schedules
without a flush (``pb``, ``local``; tiletrain.pipeline.noflush).  It is the one pipeline
executor: ``tiletrain train --dist pipeline|pipeline+data`` steps it with ``--schedule``
(1F1B by default; tiletrain.pipeline.training).  One priority table
(``priorities.PRIORITIES``) and one submission context (``tiletrain.runtime.submission``)
serve the executor, the schedules without an order and the synthetic pipelines.
"""
from . import formulas
from .formulas import (gpipe_bubble_over_ideal, gpipe_idle_fraction, interleaved_bubble_over_ideal,
                       one_f_one_b_bubble, one_f_one_b_makespan, zb_h1_bubble, zb_h1_makespan, zb_h2_bubble)
from .priorities import (ONE_F_ONE_B, PRIORITIES, ZERO_BUBBLE, affinity, bottom_level_priorities, make_hint,
                         priority_hints, priority_plan, priority_range, stage)
from . import enforce, schedules
from .enforce import MECHANISMS, ScheduleRun, run_synthetic
from .model import ModelPipeline, pipeline_plan
from .gnn import node_chunks
from .schedule import Action, Schedule, ScheduleError, Simulation
from .simulate import Timeline, simulate
from .synthetic import PipelinePlan, PlanTask, build_plan, dataflow_deps, submit

__all__ = ["node_chunks", "formulas", "gpipe_idle_fraction", "gpipe_bubble_over_ideal", "one_f_one_b_makespan",
           "one_f_one_b_bubble", "zb_h1_bubble", "zb_h2_bubble", "zb_h1_makespan",
           "interleaved_bubble_over_ideal",
           "affinity", "stage", "priority_hints", "make_hint", "ONE_F_ONE_B", "ZERO_BUBBLE", "PRIORITIES",
           "bottom_level_priorities", "priority_plan", "priority_range", "Schedule", "Action", "ScheduleError",
           "Simulation", "schedules", "enforce", "MECHANISMS", "ScheduleRun", "run_synthetic",
           "ModelPipeline", "pipeline_plan",
           "Timeline", "simulate",
           "PipelinePlan", "PlanTask", "build_plan", "dataflow_deps", "submit"]
