#!/usr/bin/env bash
# Train the GPT of `make train` on two MPI ranks on one machine (tiletrain train --dist ...).
#
#   examples/mpirun_gpt.sh [pipeline|data|pipeline+data] [extra tiletrain train flags...]
#   e.g. examples/mpirun_gpt.sh data --steps 20 --n-layer 2 --n-embd 64 --seq-len 32
#        NP=4 examples/mpirun_gpt.sh pipeline+data --stages 2 --steps 20   (2 stages x 2 replicas)
#
# Every rank runs the same command and submits the same task flow; StarPU-MPI runs each tile
# task on the rank that owns the tile it writes and moves the tiles it reads.  Only rank 0
# prints and writes the checkpoint.  See README "Running under mpirun".
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=${1:-data}    # pipeline: layers split over the ranks as stages; data: each batch split over them;
                   # pipeline+data: --stages stages x (NP / stages) data-parallel replicas
NP=${NP:-2}        # ranks (more ranks than cores needs --oversubscribe, below)
shift || true
. examples/mpirun_env.sh   # the environment and tt_mpirun (NP ranks)
# --dist:              where tiles live: pipeline, data, pipeline+data (or single: everything on rank 0).
# --ckpt-dir:          the checkpoint, written once by rank 0; it resumes in one process too.
tt_mpirun -m tiletrain train --dist "$MODE" --ckpt-dir "runs/mpirun-$MODE" --no-progress "$@"
