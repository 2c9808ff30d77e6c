"""3-D volumes: a dataset of ``.npy`` volumes read by memmap, each rank reading only the
sub-volumes of the tiles it owns, and a seeded generator of Gaussian random fields whose
power-spectrum parameters are the regression targets (a synthetic CosmoFlow).

A dataset is a directory holding ``x_00000.npy`` ... (one (C, D, H, W) volume per sample) and
``targets.npy`` ((n, T) float); :func:`write_volumes` makes one, :func:`make_cosmo_dataset`
fills one with :func:`gaussian_random_fields`.  ``VolumeDataset(root).batch(indices, dist)``
returns the (N, C, D, H, W) input tensor tiled and placed as ``dist`` says (a
:class:`tiletrain.distribution.Spatial`: each rank gets one block of every volume) and the
(N, T) targets; under ``mpirun`` every rank calls it with the same arguments (it is
collective) and reads from disk only the bytes of the tiles it owns (``bytes_read``).
docs/cnn3d.md shows it in use."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np

from ..distribution import Distribution, Spatial
from ..runtime.mpi import rank as _rank
from ..tensors import Tensor, from_numpy

__all__ = ["VolumeDataset", "write_volumes", "gaussian_random_fields", "make_cosmo_dataset", "COSMO_PARAMS"]

# the generator's parameters (the targets), each drawn uniformly from its range
COSMO_PARAMS = {"amplitude": (0.5, 2.0), "slope": (1.0, 3.0), "cutoff": (0.15, 0.45), "skew": (-0.3, 0.3)}


def gaussian_random_fields(n: int, size: int, seed: int = 0, dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """``n`` volumes (n, 1, size, size, size) and their targets (n, 4): Gaussian random fields
    made with NumPy's FFT from white noise, with power spectrum
    ``P(k) = amplitude * (k / k1)^-slope * exp(-(k / cutoff)^2)`` (k in cycles per voxel,
    k1 = 1 / size), then a quadratic non-Gaussianity ``g + skew * (g^2 - 1)``.  The targets
    are the four parameters scaled to [-1, 1] over :data:`COSMO_PARAMS`' ranges.  Seeded:
    the same arguments give the same arrays."""
    if not isinstance(n, int) or n < 1 or not isinstance(size, int) or size < 2:
        raise ValueError(f"gaussian_random_fields: n >= 1 and size >= 2 expected, got n={n!r} size={size!r}")
    rng = np.random.default_rng(seed)
    lo = np.array([r[0] for r in COSMO_PARAMS.values()])
    hi = np.array([r[1] for r in COSMO_PARAMS.values()])
    theta = lo + (hi - lo) * rng.random((n, 4))
    f = np.fft.fftfreq(size)
    fr = np.fft.rfftfreq(size)
    k = np.sqrt(f[:, None, None] ** 2 + f[None, :, None] ** 2 + fr[None, None, :] ** 2)
    k[0, 0, 0] = 1.0                                   # (the mean is set to 0 below)
    x = np.empty((n, 1, size, size, size), dtype)
    for i, (amp, slope, cut, skew) in enumerate(theta):
        power = amp * (k * size) ** (-slope) * np.exp(-(k / cut) ** 2)
        power[0, 0, 0] = 0.0
        noise = np.fft.rfftn(rng.standard_normal((size, size, size)))
        g = np.fft.irfftn(noise * np.sqrt(power), s=(size, size, size), axes=(0, 1, 2))
        g /= max(float(g.std()), 1e-12)
        g = g * math.sqrt(amp) + skew * (g * g - 1.0)
        x[i, 0] = g
    y = (2 * (theta - lo) / (hi - lo) - 1).astype(dtype)
    return x, y


def write_volumes(root, x: np.ndarray, y: np.ndarray) -> Path:
    """Write volumes x (n, C, D, H, W) and targets y (n, T) as a VolumeDataset directory."""
    root = Path(root)
    x, y = np.asarray(x), np.asarray(y)
    if x.ndim != 5 or y.ndim != 2 or len(x) != len(y):
        raise ValueError(f"write_volumes: x (n, C, D, H, W) and y (n, T) expected, got {x.shape} and {y.shape}")
    root.mkdir(parents=True, exist_ok=True)
    for i, v in enumerate(x):
        np.save(root / f"x_{i:05d}.npy", np.ascontiguousarray(v))
    np.save(root / "targets.npy", y)
    return root


def make_cosmo_dataset(root, n: int, size: int, seed: int = 0, dtype=np.float32) -> Path:
    """A VolumeDataset of ``n`` Gaussian random fields of ``size``^3 (gaussian_random_fields)."""
    return write_volumes(root, *gaussian_random_fields(n, size, seed, dtype))


class VolumeDataset:
    """The volumes of a directory written by :func:`write_volumes`, opened by memmap (nothing is
    read until a batch asks for it)."""

    def __init__(self, root):
        self.root = Path(root)
        files = sorted(self.root.glob("x_*.npy"))
        if not files or not (self.root / "targets.npy").is_file():
            raise FileNotFoundError(f"VolumeDataset: {self.root} holds no x_*.npy volumes and targets.npy")
        self.volumes = [np.load(f, mmap_mode="r") for f in files]
        self.targets = np.load(self.root / "targets.npy")
        shapes = {v.shape for v in self.volumes}
        if len(shapes) != 1 or len(self.volumes[0].shape) != 4 or len(self.targets) != len(self.volumes):
            raise ValueError(f"VolumeDataset: {self.root}: volumes must all be (C, D, H, W) of one shape, one "
                             f"target row each (shapes {sorted(shapes)}, {len(self.targets)} targets)")
        self.shape = self.volumes[0].shape
        self.dtype = self.volumes[0].dtype
        self.bytes_read = 0   # bytes this rank read from the volumes

    def __len__(self) -> int:
        return len(self.volumes)

    def batch(self, indices: Sequence[int], dist: Distribution | None = None, tiles=None,
              dtype=None) -> tuple[Tensor, Tensor]:
        """(x (N, C, D, H, W), y (N, T)) for the samples ``indices``; x tiled as ``tiles``
        (default: ``dist.tiles(shape)`` for a Spatial distribution, else one tile per sample)
        and placed by ``dist``; y tiled like x's batch axis.  Collective under MPI: each rank
        reads only its own tiles' sub-volumes from disk."""
        idx = [int(i) for i in indices]
        if not idx or any(i < 0 or i >= len(self) for i in idx):
            raise IndexError(f"VolumeDataset.batch: indices must be in [0, {len(self)}), got {list(indices)!r}")
        dtype = np.dtype(dtype or self.dtype)
        shape = (len(idx),) + tuple(self.shape)
        if tiles is None:
            tiles = dist.tiles(shape) if isinstance(dist, Spatial) else (1,) + tuple(self.shape)
        tiles = tuple(int(t) for t in tiles)
        if isinstance(dist, Spatial):
            dist.check_layout(shape, tiles)
        grid = tuple(-(-s // t) for s, t in zip(shape, tiles))
        owners = (dist.owners(grid) if dist is not None else np.zeros(math.prod(grid), np.int32)).reshape(grid)
        me = _rank()
        a = np.zeros(shape, dtype)   # calloc'ed: the pages of other ranks' tiles are never touched
        for t in np.ndindex(*grid):
            if owners[t] != me:
                continue
            box = tuple(slice(i * s, min((i + 1) * s, n)) for i, s, n in zip(t, tiles, shape))
            for n in range(box[0].start, box[0].stop):
                part = self.volumes[idx[n]][box[1:]]
                a[(n,) + box[1:]] = part
                self.bytes_read += part.nbytes
        x = from_numpy(a, tiles, dist=dist)
        y = from_numpy(self.targets[idx].astype(dtype), (tiles[0], self.targets.shape[1]))
        return x, y
