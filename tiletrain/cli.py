"""Command line: `tiletrain info | demo | train | runs | generate | export | trace | bench | schedule |
machine | simulate`."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

import tiletrain as tt

from .config import launcher_world_size
from .experiments.cli import add_subcommands
from .experiments.pipeline import gpt_schedule_run
from .inference import DECODE_SCHED, GenerationConfig
from .inference.serving import cli_generate
from .inference.text import eos_ids, print_samples, sample_text
from .nn.pretrained import CONFIG_NAME, load_model
from .pipeline.cli import add_subcommands as add_schedule_subcommands
from .runtime.registry import KERNELS
from .sim.cli import add_subcommands as add_sim_subcommands
from .tensors.tensor import DTYPES
from .train import TrainArgs, add_arguments, check_option, train
from .train.runs import add_subcommands as add_runs_subcommands


class HelpFormatter(argparse.HelpFormatter):
    """Every option's default shown once: appended to its help unless the help already
    names it or there is none (None, a flag's False)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if ("default" in text or action.default is None or action.nargs == 0  # a flag (store_true/false)
                or action.default == argparse.SUPPRESS or not action.option_strings):
            return text
        return f"{text} (default: %(default)r)" if isinstance(action.default, str) else f"{text} (default: %(default)s)"


class ArgumentParser(argparse.ArgumentParser):
    """argparse with HelpFormatter; subcommands' parsers are of this class too."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def _runtime_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ncpu", type=int, default=None, help="CPU workers (default: STARPU_NCPU or all cores)")
    p.add_argument("--sched", default=None, help="StarPU scheduling policy (default: STARPU_SCHED or prio)")


# `tiletrain info`'s build and worker fields, in order (also the keys of `info --json`)
INFO_FIELDS = ("starpu_version", "starpu_source", "starpu_prefix", "starpu_maxcpus", "starpu_cuda", "starpu_fxt",
               "starpu_opencl", "starpu_mpi", "tiletrain_cuda_kernels", "tiletrain_opencl_kernels", "cpu_workers",
               "cuda_workers", "opencl_workers")


def cmd_info(args) -> int:
    with tt.init(ncpu=args.ncpu, sched=args.sched, nopencl=args.nopencl, ncuda=args.ncuda) as rt:
        info = rt.info()
        if args.json:
            out = {k: info[k] for k in ("tiletrain", *INFO_FIELDS, "blas", "sched", "memory_nodes")}
            out["workers"] = [{"id": w.id, "kind": w.kind, "memory_node": w.memory_node, "name": w.name}
                              for w in info["workers"]]
            print(json.dumps(out, indent=2))
            return 0
        print(f"tiletrain      {info['tiletrain']}")
        print(f"StarPU         {info['starpu']}")
        for k in INFO_FIELDS:
            v = info[k]
            print(f"{k:<26}{'-' if v is None else str(v).lower() if isinstance(v, bool) else v}")
        print(f"build          {info['build']}")
        print(f"blas           {info['blas']}")
        if info["blas_note"]:
            print(f"               note: {info['blas_note']}")
        print(f"scheduler      {info['sched']}")
        print(f"memory nodes   {info['memory_nodes']}")
        print(f"workers        {len(info['workers'])}")
        for w in info["workers"]:
            print(f"  {w.id:3d}  {w.kind:6s}  node {w.memory_node}  {w.name}")
        print(f"kernels        {len(KERNELS)}: {' '.join(KERNELS)}")
        half = [code for dt, code in DTYPES.items() if dt.itemsize == 2]
        names_half = [name for name, k in KERNELS.items() if any(k.takes(code) for code in half)]
        print(f"float16/bfloat16 kernels {len(names_half)}: {' '.join(names_half)}")
    return 0


def cmd_demo(args) -> int:
    """A short run that proves the runtime works: tiled ops checked against NumPy."""
    n, tile = args.size, args.tile
    rng = np.random.default_rng(0)
    print(f"[1/4] starting StarPU (ncpu={args.ncpu or 'default'}, sched={args.sched or 'default'})", flush=True)
    with tt.init(ncpu=args.ncpu, sched=args.sched) as rt:
        print(f"      {rt!r}, workers: {', '.join(w.name for w in rt.workers())}", flush=True)
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        A = tt.from_numpy(a, tiles=tile)
        B = tt.from_numpy(b, tiles=tile)
        print(f"[2/4] tiled matmul {n}x{n} float32, {A.grid[0]}x{A.grid[1]} tiles of {tile}", flush=True)
        t0 = tt.time()
        C = A @ B
        c = C.numpy(force=True)
        dt = tt.time() - t0
        ref = a.astype(np.float64) @ b.astype(np.float64)
        err = float(np.abs(c - ref).max() / np.abs(ref).max())
        print(f"      {2 * n**3 / dt / 1e9:.1f} GFLOP/s, relative error vs float64 NumPy {err:.2e}", flush=True)
        print("[3/4] element-wise chain and reductions", flush=True)
        D = (A * 2.0 - B) / (A * A + 1.0)
        s = tt.sum(D, dim=0)
        m = tt.amax(D, dim=1)
        d_ref = (a * 2.0 - b) / (a * a + 1.0)
        err2 = max(float(np.abs(s.numpy(force=True) - d_ref.sum(0)).max()), float(np.abs(m.numpy(force=True) - d_ref.max(1)).max()))
        total = float(tt.sum(D))
        print(f"      sum(D) = {total:.4f} (NumPy {float(d_ref.sum(dtype=np.float64)):.4f}), "
              f"max abs error of sum/max along axes {err2:.2e}", flush=True)
        ok = err < 1e-4 and err2 < 1e-2
        print(f"[4/4] shutting down; {'all results match NumPy' if ok else 'MISMATCH against NumPy'}", flush=True)
    return 0 if ok else 1


def _add_train(sub) -> None:
    p = sub.add_parser("train", help="train a model on a text corpus (default: a GPT-2 on the Python standard "
                       "library), from scratch or fine-tuning a Hugging Face folder")
    add_arguments(p)  # from TrainArgs' fields (tiletrain/train/args.py)
    p.set_defaults(func=cmd_train)


def cmd_train(args) -> int:
    res = train(TrainArgs.from_namespace(args))
    return 130 if res.interrupted else 0  # --stop-after is a normal end; Ctrl-C keeps the shell's code


def _model_source_args(p) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--ckpt-dir", default=None,
                     help="a checkpoint directory (tiletrain train --ckpt-dir) or a checkpoint file written "
                          "by tiletrain.checkpoint.save")
    src.add_argument("--model", default=None, metavar="HF_FOLDER",
                     help="a Hugging Face model folder (config.json + safetensors, tokenizer.json if any)")
    p.add_argument("--tokenizer", default=None, metavar="PATH",
                   help="a tokenizer.json (or its folder) replacing the model's own (default: the model's; "
                        "bytes if it has none)")
    p.add_argument("--ncpu", type=int, default=None, help="CPU workers (default: STARPU_NCPU or all cores)")


def _add_generate(sub) -> None:
    p = sub.add_parser("generate", help="sample text from a checkpoint or a Hugging Face folder")
    _model_source_args(p)
    p.add_argument("--prompt", default="def ", help="text the sample continues")
    p.add_argument("--tokens", type=int, default=200,
                   help="tokens to generate; past the model's context, a sliding window keeps its last half")
    p.add_argument("--temperature", type=float, default=0.8, help="softmax temperature; 0: greedy")
    p.add_argument("--top-k", type=int, default=None, help="sample among the k likeliest tokens (default: all)")
    p.add_argument("--top-p", type=float, default=None,
                   help="nucleus sampling: among the likeliest tokens whose probability reaches p (default: all)")
    p.add_argument("--eos", nargs="+", default=None, metavar="TOKEN",
                   help="token ids (or texts of one token) that end a sample (default: none)")
    p.add_argument("--batch", type=int, default=1, help="samples of the prompt generated together")
    p.add_argument("--draft", default=None, metavar="HF_FOLDER_or_CKPT",
                   help="speculative decoding with this smaller model (same vocabulary) proposing tokens")
    p.add_argument("--num-draft-tokens", type=int, default=4, help="tokens the draft proposes per round")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampler")
    p.add_argument("--dist", choices=("single", "pipeline"), default="single",
                   help="pipeline: layers split over the ranks (under mpirun: one stage per rank), the batch "
                        "served as --streams request streams in flight together (tiletrain.inference.serving)")
    p.add_argument("--streams", type=int, default=1, help="request streams with --dist pipeline")
    p.add_argument("--sched", default=None,
                   help="StarPU scheduling policy (default: tt-cp, whose idle workers nap instead of polling and "
                        "leave the cores to the thread submitting each step; under mpirun or with STARPU_SCHED "
                        "set: STARPU_SCHED or prio)")
    p.set_defaults(func=cmd_generate)


def _start(ncpu, sched=None) -> None:
    """Start the runtime unless one is running (a model, a draft and export need it)."""
    if not tt.is_initialized():
        tt.init(ncpu=ncpu, sched=sched)


def cmd_generate(args) -> int:
    sched = args.sched
    if sched is None and launcher_world_size() <= 1 and not os.environ.get("STARPU_SCHED"):
        sched = DECODE_SCHED
    _start(args.ncpu, sched)
    try:
        model, tok, _ = load_model(args.ckpt_dir, args.model, tokenizer=args.tokenizer)
        if args.dist != "pipeline" and args.streams > 1:
            raise ValueError("--streams needs --dist pipeline (request streams are pipeline serving)")
        draft = None
        if args.draft is not None:  # a Hugging Face folder (config.json) or a checkpoint
            hf = (Path(args.draft) / CONFIG_NAME).is_file()
            draft = load_model(None if hf else args.draft, args.draft if hf else None, tokenizer=args.tokenizer)[0]
        if args.dist == "pipeline":
            return cli_generate(model, tok, args, draft)
        gen = GenerationConfig.from_keywords(args.tokens, args.temperature, args.top_k, args.top_p,
                                             eos_ids(args.eos, tok), args.num_draft_tokens)
        texts, stats = sample_text(model, tok, args.prompt, gen, args.seed, args.batch, draft)
        n = stats.new_tokens * len(texts)
        rate = f"{n / stats.seconds:.1f}" if stats.seconds > 0 else "inf"
        accepted = ([f"speculative decoding: {stats.mean_accepted:.2f} of {args.num_draft_tokens} drafted tokens "
                     f"accepted per round ({len(stats.accepted)} rounds)"] if draft is not None else [])
        print_samples(texts, *accepted, f"{n} tokens in {stats.seconds:.2f} s: {rate} tokens/s")
    finally:
        tt.shutdown()
    return 0


def _add_export(sub) -> None:
    p = sub.add_parser("export", help="write a checkpoint as a Hugging Face folder (transformers loads it)")
    p.add_argument("--ckpt-dir", required=True,
                   help="a checkpoint directory (tiletrain train --ckpt-dir) or a checkpoint file")
    p.add_argument("--out", required=True, metavar="HF_FOLDER",
                   help="the folder to write: config.json, model.safetensors, tokenizer.json (if the "
                        "checkpoint has a tokenizer.json tokenizer)")
    p.add_argument("--overwrite", action="store_true", help="replace a model already in --out")
    p.add_argument("--ncpu", type=int, default=None, help="CPU workers (default: STARPU_NCPU or all cores)")
    p.set_defaults(func=cmd_export)


def cmd_export(args) -> int:
    out = Path(args.out)
    if (out / CONFIG_NAME).exists() and not args.overwrite:
        raise ValueError(f"--out {out} already holds a model ({out / CONFIG_NAME}); pass --overwrite to replace it")
    _start(args.ncpu)
    try:
        model, tok, meta = load_model(args.ckpt_dir)
        model.save_pretrained(out, tokenizer=tok)
    finally:
        tt.shutdown()
    step = f" at step {meta['step']}" if "step" in meta else ""
    print(f"exported {args.ckpt_dir}{step} to {out} ({', '.join(sorted(f.name for f in out.iterdir()))})")
    return 0


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="tiletrain", description="task-based training runtime on StarPU")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="print workers, memory nodes, scheduler, StarPU version and build options")
    _runtime_args(p)
    p.add_argument("--nopencl", type=int, default=None,
                   help="OpenCL workers (default: STARPU_NOPENCL or 0; PoCL gives one on the CPU)")
    p.add_argument("--ncuda", type=int, default=None, help="CUDA workers (default: STARPU_NCUDA or all GPUs)")
    p.add_argument("--json", action="store_true", help="print the build and the workers as JSON")
    p.set_defaults(func=cmd_info)
    p = sub.add_parser("demo", help="a short run of tiled ops checked against NumPy")
    _runtime_args(p)
    p.add_argument("--size", type=int, default=2048, help="matrix size")
    p.add_argument("--tile", type=int, default=512, help="tile size")
    p.set_defaults(func=cmd_demo)
    _add_train(sub)
    add_runs_subcommands(sub)  # `runs list|show|compare`: the run directories train writes (tiletrain/train/runs.py)
    _add_generate(sub)
    _add_export(sub)
    add_subcommands(sub, _runtime_args)  # `trace ...` and `bench sched` (tiletrain/experiments/cli.py)
    # `schedule show|run`: pipeline schedules as data (tiletrain/pipeline/cli.py); `schedule run
    # --gpt` runs a model (tiletrain/experiments/pipeline.py: a model is above pipeline/)
    add_schedule_subcommands(sub, gpt_runner=gpt_schedule_run)
    add_sim_subcommands(sub)  # `machine ...` and `simulate` (tiletrain/sim/cli.py)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_options(args)
        return args.func(args)
    except (ValueError, TypeError, RuntimeError, NotImplementedError, FileNotFoundError) as exc:
        print(f"tiletrain: error: {exc}", file=sys.stderr)  # bad input: argparse's status
        return 2
    except BrokenPipeError:  # output piped into `head` and closed: stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE
    except (OSError, ArithmeticError, MemoryError) as exc:  # disk full, I/O error, a diverging loss, over a memory cap
        print(f"tiletrain: error: {exc}", file=sys.stderr)
        return 1


# Allowed values of the numeric options of the commands other than `train` (whose options
# TrainArgs.validate checks): option -> (low, high, low excluded, high excluded); a list
# option's every value is checked
OPTION_LIMITS = {
    **{name: (1, None) for name in ("ncpu", "size", "tile", "tiles", "top_k", "reps", "p", "m", "batch",
                                    "num_draft_tokens", "streams")},
    "top_p": (0, 1, True),
    **{name: (0, None) for name in ("nopencl", "ncuda", "tokens", "temperature", "seed", "calib", "warmup")},
    "usec": (0, None, True),
}


def check_options(args) -> None:
    """The numeric options of `generate`, `bench`, `trace`, `demo`, `info`: finite and in range,
    before any work (ValueError naming the option)."""
    if args.command == "train":
        return  # TrainArgs.validate, called by train(), is the one place for train's options
    for name, limits in OPTION_LIMITS.items():
        values = getattr(args, name, None)
        for v in values if isinstance(values, list) else [values]:
            check_option(f"--{name.replace('_', '-')}", v, *limits)


if __name__ == "__main__":
    sys.exit(main())
