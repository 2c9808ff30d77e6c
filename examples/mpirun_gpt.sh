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
PY=${PY:-.venv/bin/python}

# One CPU worker per rank: the two ranks share the machine's cores (2 here).
export STARPU_NCPU=${STARPU_NCPU:-1}
# Do not pin workers to cores: by default both ranks' workers land on the same core.
export STARPU_WORKERS_NOBIND=1
# Do not reserve a core for StarPU-MPI's progress thread either (same reason).
export STARPU_MPI_NOBIND=1
# Single-threaded BLAS inside the workers (numpy's own OpenBLAS too).
export OPENBLAS_NUM_THREADS=1
# StarPU's banner and warnings off (one copy per rank otherwise).
export STARPU_SILENT=1

# --allow-run-as-root: Open MPI refuses to start as root without it (containers).
# --oversubscribe:     allow more ranks than cores (harmless with 2 ranks on 2 cores; needed for -np 3).
# --bind-to none:      let the OS place the ranks (StarPU binds nothing with the variables above).
# -np $NP:             the ranks (2 by default); tiletrain switches MPI mode on by itself under mpirun.
# -x VAR:              forward these variables to every rank (Open MPI forwards the
#                      environment of local ranks anyway; on a cluster -x is needed).
# --dist:              where tiles live: pipeline, data, pipeline+data (or single: everything on rank 0).
# --ckpt-dir:          the checkpoint, written once by rank 0; it resumes in one process too.
exec mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$NP" \
    -x STARPU_NCPU -x STARPU_WORKERS_NOBIND -x STARPU_MPI_NOBIND -x OPENBLAS_NUM_THREADS -x STARPU_SILENT \
    "$PY" -m tiletrain train --dist "$MODE" --ckpt-dir "runs/mpirun-$MODE" --no-progress "$@"
