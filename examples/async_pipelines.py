"""Pipelines without a flush on a small MLP: pipelined backpropagation with and without its
delay compensation, and local learning, against synchronous SGD (docs/pipelines-noflush.md).

    .venv/bin/python examples/async_pipelines.py --method pb-sc-lwp --stages 4 --epochs 5 --seed 0
    .venv/bin/python examples/async_pipelines.py --method local --stages 4 --epochs 5

Trains on scikit-learn's digits when scikit-learn is installed, else on a synthetic
digits-like task drawn with NumPy; stage s runs on worker s.  Prints ``epoch k accuracy X``
(held-out accuracy, a fraction) per epoch and a final ``idle Y``: the stage workers' mean idle
fraction measured from the recorded trace of the training.
"""
import argparse

import numpy as np

import tiletrain as tt
from tiletrain.experiments.async_pipelines import METHODS, run

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--method", choices=[m for m in METHODS], default="pb-sc-lwp")
p.add_argument("--stages", type=int, default=4)
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--microbatch", type=int, default=16, help="samples per micro-batch (one update each)")
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--momentum", type=float, default=0.9)
p.add_argument("--warmup", type=int, default=0, help="updates of linear learning-rate warm-up per stage (0: none)")
p.add_argument("--weights", choices=["stored", "ema"], default="stored",
               help="pb: keep the weight versions in-flight backwards need, or reconstruct them (moving average)")
p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
args = p.parse_args()
if args.stages < 1 or args.epochs < 1 or args.microbatch < 1 or args.warmup < 0:
    p.error("--stages, --epochs and --microbatch must be >= 1, --warmup >= 0")

with tt.init(ncpu=args.stages, profile=True):
    r = run(args.method, stages=args.stages, epochs=args.epochs, seed=args.seed, microbatch=args.microbatch,
            lr=args.lr, momentum=args.momentum, warmup=args.warmup, weights=args.weights,
            dtype=np.dtype(args.dtype), log=print)
print(f"idle {r.idle:.4f}")
print(f"# {r.data}; {r.samples_per_s:.0f} samples/s; weight memory per stage {r.weight_memory} bytes")
