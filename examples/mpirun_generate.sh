#!/usr/bin/env bash
# Serve a model as a pipeline over MPI ranks on one machine (tiletrain generate --dist pipeline).
#
#   examples/mpirun_generate.sh --ckpt-dir CKPT|--model HF_FOLDER [extra tiletrain generate flags...]
#   e.g. examples/mpirun_gpt.sh pipeline --steps 50          (writes runs/mpirun-pipeline)
#        examples/mpirun_generate.sh --ckpt-dir runs/mpirun-pipeline --streams 2 --tokens 64 --temperature 0
#        NP=3 examples/mpirun_generate.sh --model my-hf-folder --streams 3 --batch 6
#        examples/mpirun_generate.sh --model my-hf-folder --streams 2 --top-p 0.9 --eos 50256 --draft small-hf-folder
#
# The model's layers are split over the NP ranks (one pipeline stage per rank: embeddings and
# the first blocks on rank 0, the last blocks and the head on the last rank).  The batch (the
# prompt repeated: --batch if given, else one row per stream) is served as --streams request
# streams, each with its own key/value cache; while rank 1 runs stream 0's step, rank 0 runs
# stream 1's, so with as many streams as stages every rank has work.  Every rank runs the
# same command and samples the same tokens; rank 0 prints the text and a tokens/s line.
# Every option of `tiletrain generate` works here (--top-k, --top-p, --eos, --draft), and
# --tokens may go past the model's context (the sliding window, as in one process).
set -euo pipefail
cd "$(dirname "$0")/.."

NP=${NP:-2}        # ranks = pipeline stages (more ranks than cores needs --oversubscribe, below)
. examples/mpirun_env.sh   # the environment and tt_mpirun (NP ranks)
# --dist pipeline:     one stage per rank; on one process (NP=1) it still works, with one stage.
tt_mpirun -m tiletrain generate --dist pipeline "$@"
