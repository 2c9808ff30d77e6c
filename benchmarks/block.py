"""One pre-LayerNorm transformer block (GPT-2 style), forward + backward, tiletrain against
PyTorch eager on the CPU, same inputs and weights, same number of threads.

    x1 = x + proj(attention(split(c_attn(ln_1(x)))))
    y  = x1 + fc2(gelu_tanh(fc1(ln_2(x1))))
    backward of <y, G> for a fixed random G: gradients of x and every weight.

tiletrain: --ncpu workers (single-threaded BLAS per task).  PyTorch: torch.set_num_threads
(--ncpu).  The two alternate step by step (tiletrain's workers sleep during PyTorch's steps:
the runtime pauses them when idle), so both see the same machine state.  Prints medians
over --reps repetitions (after one warm-up) for every tile configuration, and the ratio
tiletrain time / PyTorch time (< 1 means tiletrain is faster).  The first repetition also
checks that both give the same output and gradients.

    python benchmarks/block.py [--B 8 --T 256 --C 512 --heads 8] [--reps 5] [--dtype float32]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import tiletrain as tt  # noqa: E402
import tiletrain.functional as F  # noqa: E402
from _common import environment, median, table  # noqa: E402
from tiletrain.ops.activations import affine  # noqa: E402  (x @ w + b, GPT-2's Conv1D layout)

# (batch tile, time tile, width tile): two tile configurations
CONFIGS = {"coarse": (1, 256, 512), "fine": (2, 128, 256), "rows": (2, 128, 512), "wide": (8, 256, 512)}


def make_weights(C: int, rng, dtype):
    def w(*shape, scale=0.02):
        return (rng.standard_normal(shape) * scale).astype(dtype)
    return {
        "ln_1.weight": (1 + rng.standard_normal(C) * 0.1).astype(dtype), "ln_1.bias": w(C),
        "attn.c_attn.weight": w(C, 3 * C), "attn.c_attn.bias": w(3 * C),
        "attn.c_proj.weight": w(C, C), "attn.c_proj.bias": w(C),
        "ln_2.weight": (1 + rng.standard_normal(C) * 0.1).astype(dtype), "ln_2.bias": w(C),
        "mlp.c_fc.weight": w(C, 4 * C), "mlp.c_fc.bias": w(4 * C),
        "mlp.c_proj.weight": w(4 * C, C), "mlp.c_proj.bias": w(C),
    }


def tiletrain_block(x, p, n_head):
    """GPT-2's block; its weights are (in, out) as in Conv1D: affine(x, w, b) = x @ w + b."""
    B, T, C = x.shape
    h = F.layer_norm(x, x.shape[-1:], p["ln_1.weight"], p["ln_1.bias"], 1e-5)
    qkv = affine(h, p["attn.c_attn.weight"], p["attn.c_attn.bias"])          # (B, T, 3C)
    q, k, v = (F.split_heads(qkv, n_head, part=i, nparts=3) for i in range(3))  # (B, H, T, D)
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    a = affine(F.merge_heads(a), p["attn.c_proj.weight"], p["attn.c_proj.bias"])
    x1 = x + a
    h = F.layer_norm(x1, x1.shape[-1:], p["ln_2.weight"], p["ln_2.bias"], 1e-5)
    h = affine(h, p["mlp.c_fc.weight"], p["mlp.c_fc.bias"], gelu="tanh")  # gelu in the gemm's epilogue
    return x1 + affine(h, p["mlp.c_proj.weight"], p["mlp.c_proj.bias"])


def torch_block(torch, x, p, n_head):
    Fn = torch.nn.functional
    B, T, C = x.shape
    h = Fn.layer_norm(x, (C,), p["ln_1.weight"], p["ln_1.bias"], 1e-5)
    qkv = h @ p["attn.c_attn.weight"] + p["attn.c_attn.bias"]
    q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in qkv.split(C, dim=2))
    a = Fn.scaled_dot_product_attention(q, k, v, is_causal=True)
    a = a.transpose(1, 2).contiguous().view(B, T, C) @ p["attn.c_proj.weight"] + p["attn.c_proj.bias"]
    x1 = x + a
    h = Fn.layer_norm(x1, (C,), p["ln_2.weight"], p["ln_2.bias"], 1e-5)
    h = Fn.gelu(h @ p["mlp.c_fc.weight"] + p["mlp.c_fc.bias"], approximate="tanh")
    return x1 + h @ p["mlp.c_proj.weight"] + p["mlp.c_proj.bias"]


def tile_of(name: str, shape, cfg):
    tb, tt_, tc = cfg
    if len(shape) == 1:
        return (tc,)
    return (tc, tc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--B", type=int, default=8)
    ap.add_argument("--T", type=int, default=256)
    ap.add_argument("--C", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ncpu", type=int, default=os.cpu_count())
    ap.add_argument("--sched", default=None)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("benchmarks/block.py needs PyTorch: .venv/bin/pip install torch==2.13.0", file=sys.stderr)
        return 2
    torch.set_num_threads(args.ncpu)
    dtype = np.dtype(args.dtype)
    B, T, C, H = args.B, args.T, args.C, args.heads
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((B, T, C)).astype(dtype)
    g_np = rng.standard_normal((B, T, C)).astype(dtype)
    w_np = make_weights(C, rng, dtype)
    print(environment())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; block B={B} T={T} C={C} heads={H} "
          f"MLP 4C, {args.dtype}, {args.reps} repetitions (medians)", flush=True)

    tx = torch.tensor(x_np, requires_grad=True)
    tw = {k: torch.tensor(v, requires_grad=True) for k, v in w_np.items()}
    tg = torch.tensor(g_np)

    def torch_step() -> float:
        for t in [tx, *tw.values()]:
            t.grad = None
        t0 = time.perf_counter()
        torch_block(torch, tx, tw, H).backward(tg)
        return time.perf_counter() - t0

    torch_step()
    ref_y = torch_block(torch, tx, tw, H).detach().numpy()
    ref_grads = {"x": tx.grad.numpy(), **{k: v.grad.numpy() for k, v in tw.items()}}

    rows = []
    rtol = 2e-3 if dtype == np.float32 else 1e-9
    for name in args.configs:
        cfg = CONFIGS[name]
        times, torch_times = [], []
        with tt.init(ncpu=args.ncpu, sched=args.sched) as rt:
            X = tt.from_numpy(x_np, cfg).requires_grad_()
            G = tt.from_numpy(g_np, cfg)
            P = {k: tt.from_numpy(v, tile_of(k, v.shape, cfg)).requires_grad_() for k, v in w_np.items()}
            from tiletrain._ffi import lib
            ntasks0 = sum(lib.tt_kernel_ntasks(k) for k in range(lib.tt_kernel_count()))
            for rep in range(args.reps + 1):
                for t in [X, *P.values()]:
                    t.grad = None
                tt.wait()  # workers asleep from here
                torch_times.append(torch_step())
                t0 = time.perf_counter()
                y = tiletrain_block(X, P, H)
                y.backward(G)
                tt.wait()
                times.append(time.perf_counter() - t0)
                if rep == 0:
                    err = np.abs(y.detach().numpy() - ref_y).max() / np.abs(ref_y).max()
                    gerr = max(np.abs(P[k].grad.numpy() - ref_grads[k]).max() / np.abs(ref_grads[k]).max()
                               for k in P)
                    gerr = max(gerr, np.abs(X.grad.numpy() - ref_grads["x"]).max() / np.abs(ref_grads["x"]).max())
                    print(f"  {name} {cfg}: max relative difference to PyTorch: output {err:.1e}, "
                          f"gradients {gerr:.1e}", flush=True)
                    if err > rtol or gerr > rtol * 10:
                        print("  MISMATCH against PyTorch", flush=True)
                        return 1
                del y
            ntasks = sum(lib.tt_kernel_ntasks(k) for k in range(lib.tt_kernel_count())) - ntasks0
            sched = rt.sched
        times, torch_times = times[1:], torch_times[1:]
        rows.append([f"pytorch eager", "-", "-", "-", f"{median(torch_times) * 1e3:.0f}", "1.00"])
        rows.append([f"tiletrain {name}", "x".join(map(str, cfg)), sched, ntasks // (args.reps + 1),
                     f"{median(times) * 1e3:.0f}", f"{median(times) / median(torch_times):.2f}"])
        print(f"  {name}: tiletrain {median(times) * 1e3:.0f} ms, pytorch {median(torch_times) * 1e3:.0f} ms",
              flush=True)
    print()
    print(table(["program", "tiles (B,T,C)", "sched", "tasks/step", "ms", "time ratio vs torch"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
