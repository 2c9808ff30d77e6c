"""Mini-CosmoFlow: a 3D CNN regressing the four power-spectrum parameters of synthetic
Gaussian random fields, trained with its volumes split in space over the ranks.

    .venv/bin/python examples/cosmoflow.py --size 32 --steps 5 --batch 4
    mpirun -np 2 .venv/bin/python examples/cosmoflow.py --size 64 --dist spatial --dtype float64

(under mpirun, with the README's per-rank variables: examples/mpirun_env.sh).  The model is
CosmoFlow's shape: 5 x (conv3d 3^3 + leaky ReLU + max pool 2), then 3 dense layers and 4
outputs, MSE loss, SGD with momentum.  --dist:

- none: one process (every tile on rank 0);
- spatial: every volume split along D over the ranks (Spatial(dims=(2,), grid=(world,)));
- data: the batch split over the ranks (Spatial(dims=(0,), grid=(world,)));
- hybrid: batch x D over a 2 x world/2 rank grid (Spatial(dims=(0, 2), grid=(2, world // 2))).

Each rank reads only its own sub-volumes from the dataset (tiletrain.data.volume; made on
first use under --data), each layer runs where its input tiles are, and only halo slabs and
weight-sized tensors cross ranks.  Prints ``step k loss X`` (rank 0), then per rank the bytes
it read, the halo bytes it sent per step, the median time per step (after the first), its
peak RSS and its peak of tile buffers (activations, gradients, parameters and the copies it
received: the runtime's accounting, ``memory()["peak_allocated_bytes"]``; n/a where the
buffer hooks are off, e.g. with GPU workers).  The same --seed
gives the same losses in every mode.
"""
import argparse
import os
import shutil
import time
from pathlib import Path

import numpy as np

import tiletrain as tt
import tiletrain.functional as F
from tiletrain import nn
from tiletrain.data.volume import VolumeDataset, make_cosmo_dataset
from tiletrain.distribution import Spatial
from tiletrain.optim import SGD
from tiletrain.runtime.kernels import conv_halo_stats


def leaky_relu(x, slope=0.3):
    return F.relu(x) - F.relu(F.scale(x, -slope))     # max(x, 0) + slope * min(x, 0)


class CosmoFlow(nn.Module):
    """5 x (conv3d + leaky ReLU + max pool), flatten, 3 dense layers (leaky ReLU), 4 outputs."""

    def __init__(self, size: int, width: int = 8, dtype=np.float32, rng=None):
        super().__init__()
        chans = [1, width, 2 * width, 4 * width, 4 * width, 4 * width]
        self.convs = nn.ModuleList([nn.Conv3d(chans[i], chans[i + 1], 3, padding=1, dtype=dtype, rng=rng)
                                    for i in range(5)])
        flat = chans[-1] * (size // 32) ** 3
        self.fc1 = nn.Linear(flat, 64, dtype=dtype, rng=rng)
        self.fc2 = nn.Linear(64, 32, dtype=dtype, rng=rng)
        self.out = nn.Linear(32, 4, dtype=dtype, rng=rng)

    def forward(self, x):                               # (B, 1, S, S, S)
        for conv in self.convs:
            x = F.max_pool3d(leaky_relu(conv(x)), 2)    # (B, C, S/2^i, ...)
        x = F.flatten(x, 1)                             # (B, C * (S/32)^3)
        x = leaky_relu(self.fc2(leaky_relu(self.fc1(x))))
        return self.out(x)                              # (B, 4)


def distribution(mode: str, world: int):
    if mode == "none":
        return None
    if mode == "spatial":
        return Spatial(dims=(2,), grid=(world,))
    if mode == "data":
        return Spatial(dims=(0,), grid=(world,))
    if world % 2:
        raise SystemExit(f"--dist hybrid needs an even number of ranks, got {world}")
    return Spatial(dims=(0, 2), grid=(2, world // 2))


def dataset(root: Path, n: int, size: int, seed: int) -> VolumeDataset:
    """The dataset, generated on first use (every rank makes its own copy and renames it into
    place: no rank waits for another)."""
    if not (root / "targets.npy").is_file():
        tmp = root.with_name(f"{root.name}.tmp-{os.getpid()}")
        make_cosmo_dataset(tmp, n, size, seed)
        try:
            os.rename(tmp, root)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)     # another rank was first
    return VolumeDataset(root)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=32, choices=(32, 64, 128))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--dist", default="none", choices=("none", "spatial", "data", "hybrid"))
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--width", type=int, default=8, help="channels of the first conv (then 2x, 4x)")
    ap.add_argument("--samples", type=int, default=16, help="volumes in the dataset")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--data", default="runs/cosmoflow-data", help="dataset directory (a folder per size/seed)")
    ap.add_argument("--mem-limit", default=None, help="cap on each rank's tile memory, e.g. 512M (tt.init's mem_limit)")
    args = ap.parse_args(argv)
    dtype = np.dtype(args.dtype)
    ds = dataset(Path(args.data) / f"s{args.size}-n{args.samples}-seed{args.seed}", args.samples, args.size,
                 args.seed)
    with tt.init(mem_limit=args.mem_limit):
        r, world = tt.rank(), tt.world_size()
        sp = distribution(args.dist, world)
        model = CosmoFlow(args.size, args.width, dtype, rng=np.random.default_rng(args.seed))
        opt = SGD(model.parameters(), lr=args.lr, momentum=0.9)
        order = np.random.default_rng(args.seed + 1)
        rt = tt.runtime.current()
        halo0, times = conv_halo_stats()[0], []
        for step in range(args.steps):
            t0 = time.perf_counter()
            idx = order.choice(len(ds), size=args.batch, replace=False)
            x, y = ds.batch(idx, sp, dtype=dtype)
            opt.zero_grad()
            with tt.distribution.use(sp) if sp else _nothing():
                loss = F.mse_loss(model(x), y)
                loss.backward()
            opt.step()
            value = float(loss)
            tt.wait()
            times.append(time.perf_counter() - t0)
            if r == 0:
                print(f"step {step} loss {value:.12g}", flush=True)
        dt = float(np.median(times[1:] if len(times) > 1 else times)) if times else 0.0
        halo = (conv_halo_stats()[0] - halo0) / max(args.steps, 1)
        peak = rt.memory()["peak_allocated_bytes"]
        tiles = "n/a" if peak is None else f"{peak / 2**20:.1f}"
        print(f"rank {r}/{world}: read {ds.bytes_read} bytes of volumes, halo {halo:.0f} bytes/step sent, "
              f"{dt:.3f} s/step, peak RSS {peak_rss_mb():.0f} MiB, peak tiles {tiles} MiB", flush=True)


def peak_rss_mb() -> float:
    """This process' peak resident memory (VmHWM), MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None


if __name__ == "__main__":
    main()
