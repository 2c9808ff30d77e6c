"""Command line: `tiletrain info | demo | train | generate | trace | bench`."""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def _runtime_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ncpu", type=int, default=None, help="CPU workers (default: STARPU_NCPU or all cores)")
    p.add_argument("--sched", default=None, help="StarPU scheduling policy (default: STARPU_SCHED or lws)")


def cmd_info(args) -> int:
    import tiletrain as tt

    with tt.init(ncpu=args.ncpu, sched=args.sched, nopencl=args.nopencl, ncuda=args.ncuda) as rt:
        info = rt.info()
        print(f"tiletrain      {info['tiletrain']}")
        print(f"StarPU         {info['starpu']}")
        print(f"build          {info['build']}")
        print(f"scheduler      {info['sched']}")
        print(f"memory nodes   {info['memory_nodes']}")
        print(f"workers        {len(info['workers'])}")
        for w in info["workers"]:
            print(f"  {w.id:3d}  {w.kind:6s}  node {w.memory_node}  {w.name}")
        from ._ffi import cstr, lib
        names = [cstr(lib.tt_kernel_name(k)) for k in range(lib.tt_kernel_count())]
        print(f"kernels        {len(names)}: {' '.join(names)}")
        from .tensors.tensor import DTYPES
        half = sum(1 << code for dt, code in DTYPES.items() if dt.itemsize == 2)
        names_half = [n for k, n in enumerate(names) if lib.tt_kernel_dtypes(k) & half]
        print(f"float16/bfloat16 kernels {len(names_half)}: {' '.join(names_half)}")
    return 0


def cmd_demo(args) -> int:
    """A short run that proves the runtime works: tiled ops checked against NumPy."""
    import tiletrain as tt

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
        t0 = time.perf_counter()
        C = A @ B
        c = C.numpy()
        dt = time.perf_counter() - t0
        ref = a.astype(np.float64) @ b.astype(np.float64)
        err = float(np.abs(c - ref).max() / np.abs(ref).max())
        print(f"      {2 * n**3 / dt / 1e9:.1f} GFLOP/s, relative error vs float64 NumPy {err:.2e}", flush=True)
        print("[3/4] element-wise chain and reductions", flush=True)
        D = (A * 2.0 - B) / (A * A + 1.0)
        s = tt.sum(D, dim=0)
        m = tt.amax(D, dim=1)
        d_ref = (a * 2.0 - b) / (a * a + 1.0)
        err2 = max(float(np.abs(s.numpy() - d_ref.sum(0)).max()), float(np.abs(m.numpy() - d_ref.max(1)).max()))
        total = float(tt.sum(D))
        print(f"      sum(D) = {total:.4f} (NumPy {float(d_ref.sum(dtype=np.float64)):.4f}), "
              f"max abs error of sum/max along axes {err2:.2e}", flush=True)
        ok = err < 1e-4 and err2 < 1e-2
        print(f"[4/4] shutting down; {'all results match NumPy' if ok else 'MISMATCH against NumPy'}", flush=True)
    return 0 if ok else 1


def _tiles(text: str) -> tuple[int, int, int]:
    try:
        parts = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"tiles must be B,T,C integers, got {text!r}") from None
    if len(parts) != 3 or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"tiles must be three positive integers B,T,C, got {text!r}")
    return parts


def _add_train(sub) -> None:
    from .train import TrainArgs
    d = TrainArgs()
    p = sub.add_parser("train", help="train a GPT on a text corpus (default: the Python standard library)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g = p.add_argument_group("model")
    g.add_argument("--n-layer", type=int, default=d.n_layer)
    g.add_argument("--n-head", type=int, default=d.n_head)
    g.add_argument("--n-embd", type=int, default=d.n_embd)
    g.add_argument("--block-size", type=int, default=None, help="context length (default: --seq-len)")
    g.add_argument("--dropout", type=float, default=d.dropout)
    g.add_argument("--recompute", default=d.recompute, choices=["none", "block", "attention"],
                   help="activation recomputation: keep only each transformer block's input (block) or "
                        "recompute the attention branch (attention) in backward: less memory, more time")
    g = p.add_argument_group("data")
    g.add_argument("--data", nargs="+", default=[], metavar="FILE", help="text files (default: stdlib sources)")
    g.add_argument("--max-bytes", type=int, default=d.max_bytes, help="read at most this much text")
    g.add_argument("--val-fraction", type=float, default=d.val_fraction)
    g = p.add_argument_group("optimisation")
    g.add_argument("--batch", type=int, default=d.batch, help="sequences per micro-batch")
    g.add_argument("--micro-batches", type=int, default=d.micro_batches, help="micro-batches per step")
    g.add_argument("--seq-len", type=int, default=d.seq_len)
    g.add_argument("--steps", type=int, default=d.steps, help="total steps (the schedule spans them)")
    g.add_argument("--stop-after", type=int, default=None,
                   help="stop after this many steps in this run, with a checkpoint (continue with --resume)")
    g.add_argument("--lr", type=float, default=d.lr, help="peak learning rate, in (0, 1]")
    g.add_argument("--min-lr", type=float, default=d.min_lr, help="final learning rate, in [0, --lr]")
    g.add_argument("--warmup", type=int, default=d.warmup, help="warm-up steps (>= 0)")
    g.add_argument("--weight-decay", type=float, default=d.weight_decay)
    g.add_argument("--grad-clip", type=float, default=d.grad_clip, help="clip the gradient norm to this (>= 0; 0 disables clipping)")
    g = p.add_argument_group("runtime")
    g.add_argument("--tiles", type=_tiles, default=None, help="tile sizes B,T,C (default: chosen from the model)")
    _runtime_args(g)
    g.add_argument("--dtype", default=d.dtype, choices=["float32", "float64"])
    g.add_argument("--seed", type=int, default=d.seed)
    g.add_argument("--dist", default=d.dist, choices=["single", "pipeline", "data", "pipeline+data"],
                   help="under mpirun: single (all on rank 0), pipeline (layers split over the ranks as "
                        "stages), data (each batch split over the ranks, gradients reduced) or "
                        "pipeline+data (--stages stages x the rest as replicas); see README "
                        "'Running under mpirun'")
    g.add_argument("--stages", type=int, default=None,
                   help="--dist pipeline+data: number of pipeline stages (default 2; the world size "
                        "must be a multiple)")
    g = p.add_argument_group("checkpoints and output")
    g.add_argument("--ckpt-dir", default=None, help="write checkpoint.safetensors here")
    g.add_argument("--resume", action="store_true", help="continue from the checkpoint in --ckpt-dir")
    g.add_argument("--eval-every", type=int, default=d.eval_every, help="validate (and checkpoint) every N steps (0: never, a checkpoint at the end)")
    g.add_argument("--eval-batches", type=int, default=d.eval_batches)
    g.add_argument("--sample-tokens", type=int, default=d.sample_tokens, help="tokens to sample at the end")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_train)


def cmd_train(args) -> int:
    from .train import TrainArgs, train
    targs = TrainArgs(
        n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd, block_size=args.block_size,
        dropout=args.dropout, recompute=args.recompute, data=args.data, max_bytes=args.max_bytes, val_fraction=args.val_fraction,
        batch=args.batch, micro_batches=args.micro_batches, seq_len=args.seq_len, steps=args.steps,
        stop_after=args.stop_after, lr=args.lr,
        min_lr=args.min_lr, warmup=args.warmup, weight_decay=args.weight_decay, grad_clip=args.grad_clip,
        tiles=args.tiles, sched=args.sched, ncpu=args.ncpu, dtype=args.dtype, seed=args.seed,
        dist=args.dist, stages=args.stages, ckpt_dir=args.ckpt_dir, resume=args.resume, eval_every=args.eval_every, eval_batches=args.eval_batches,
        sample_tokens=args.sample_tokens, progress=not args.no_progress)
    res = train(targs)
    return 130 if res.interrupted else 0  # --stop-after is a normal end; Ctrl-C keeps the shell's code


def _add_generate(sub) -> None:
    p = sub.add_parser("generate", help="sample text from a checkpoint")
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--prompt", default="def ")
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.8, help="0: greedy")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ncpu", type=int, default=None)
    p.set_defaults(func=cmd_generate)


def cmd_generate(args) -> int:
    import tiletrain as tt
    from .data import ByteTokenizer
    from .train import generate, load_for_generation
    model, meta = load_for_generation(args.ckpt_dir, ncpu=args.ncpu)
    try:
        text = generate(model, ByteTokenizer().encode(args.prompt), args.tokens, args.temperature, args.top_k,
                        np.random.default_rng(args.seed))
        print(text)
    finally:
        tt.shutdown()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tiletrain", description="task-based training runtime on StarPU")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="print workers, memory nodes, scheduler, StarPU version and build options")
    _runtime_args(p)
    p.add_argument("--nopencl", type=int, default=None,
                   help="OpenCL workers (default: STARPU_NOPENCL or 0; PoCL gives one on the CPU)")
    p.add_argument("--ncuda", type=int, default=None, help="CUDA workers (default: STARPU_NCUDA or all GPUs)")
    p.set_defaults(func=cmd_info)
    p = sub.add_parser("demo", help="a short run of tiled ops checked against NumPy")
    _runtime_args(p)
    p.add_argument("--size", type=int, default=2048, help="matrix size (default 2048)")
    p.add_argument("--tile", type=int, default=512, help="tile size (default 512)")
    p.set_defaults(func=cmd_demo)
    _add_train(sub)
    _add_generate(sub)
    from .trace.cli import add_subcommands  # `trace ...` and `bench sched` (tiletrain/trace/cli.py)
    add_subcommands(sub, _runtime_args)
    args = parser.parse_args(argv)
    try:
        check_options(args)
        return args.func(args)
    except (ValueError, TypeError, RuntimeError, NotImplementedError, FileNotFoundError) as exc:
        print(f"tiletrain: error: {exc}", file=sys.stderr)  # bad input: argparse's status
        return 2
    except (OSError, ArithmeticError) as exc:  # disk full, I/O error, a diverging loss: one line
        print(f"tiletrain: error: {exc}", file=sys.stderr)
        return 1


# Allowed values of the numeric options of the commands other than `train` (whose options
# TrainArgs.validate checks): option -> (low, high, low excluded, high excluded); a list
# option's every value is checked
OPTION_LIMITS = {
    **{name: (1, None) for name in ("ncpu", "size", "tile", "tiles", "top_k", "reps", "p", "m")},
    **{name: (0, None) for name in ("nopencl", "ncuda", "tokens", "temperature", "seed", "calib", "warmup")},
    "usec": (0, None, True),
}


def check_options(args) -> None:
    """The numeric options of `generate`, `bench`, `trace`, `demo`, `info`: finite and in range,
    before any work (ValueError naming the option)."""
    if args.command == "train":
        return  # TrainArgs.validate, called by train(), is the one place for train's options
    from .train import check_option
    for name, limits in OPTION_LIMITS.items():
        values = getattr(args, name, None)
        for v in values if isinstance(values, list) else [values]:
            check_option(f"--{name.replace('_', '-')}", v, *limits)


if __name__ == "__main__":
    sys.exit(main())
