"""The training command: a model (--arch, or fine-tuning a Hugging Face folder with
--init-from) on a text corpus (bytes, or a tokenizer.json), with micro-batches, AdamW, a
cosine schedule, periodic validation, atomic checkpoints, exact resume and a sample at the end.

Used by `tiletrain train` / `make train`; `train(TrainArgs(...))` from Python.

  args.py   TrainArgs: the options, whose field metadata generates the command's parser
  state.py  the model a run builds (ModelSource) and its checkpoint: save, resume
  loop.py   train(): prepare, setup, step, evaluate, finish

``load_model`` and ``find_checkpoint`` (the model of a checkpoint or a Hugging Face folder,
for generate and export) live in tiletrain/nn/pretrained.py and are re-exported here."""
from ..nn.pretrained import MODEL_KEYS, OPTIM_PREFIX, find_checkpoint, load_model
from .args import DTYPES, TrainArgs, add_arguments, check_option, parse_tiles
from .loop import TrainResult, evaluate, train
from .state import (RESUME_KEYS, RUN_OPTIONS, ModelSource, build_model, load_training_state, model_metadata,
                    read_resume_point, run_options, save_training_state)

__all__ = ["TrainArgs", "TrainResult", "train", "evaluate", "add_arguments", "check_option", "parse_tiles", "DTYPES",
           "ModelSource", "build_model", "run_options", "model_metadata", "save_training_state",
           "load_training_state", "read_resume_point", "RESUME_KEYS", "RUN_OPTIONS", "MODEL_KEYS", "OPTIM_PREFIX",
           "find_checkpoint", "load_model"]
