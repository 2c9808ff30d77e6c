"""Distributions: which MPI rank owns each tile (docs/architecture.md principle 7, "Distribution is data").

A distribution is a small immutable value that maps a tile grid to owner ranks.  It lives
on ``TensorTraits`` (``TensorTraits(shape, tiles, dist=...)``), so ops whose outputs reuse an
input's traits put the output where the input lives; traits made without one take the
current default (``SingleRank(0)`` unless changed with :func:`use`).  Without MPI every
tile is local whatever the distribution says (owners are taken modulo the world size, which
is 1), so the same script runs in one process and under ``mpirun``.

Where a tensor made by an op lives (under MPI; :class:`tiletrain.tensors.Tensor`):

1. its traits' distribution, if they name one (``dist=`` on creation, or an op's output
   reusing such an input's traits) -- except for gradients made in ``backward()``;
2. else the innermost ``with use(dist):`` block (a pipeline stage, a data-parallel shard;
   ``backward()`` re-enters the block each op was recorded in, so gradients are made where
   the forward ran);
3. else its tiles are placed by their first writer: each output tile goes to the owner of
   the first tile the task writing it reads (the corresponding input tile), in C
   (csrc/mpi.c), else to the default distribution.  ``Tensor.owners()`` shows -1 for a tile
   not written yet.

Under ``mpirun`` every rank creates the same tensors in the same order with the same
distributions; StarPU-MPI runs each task on the rank that owns the tile it writes and moves
the tiles it reads.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np

from .runtime.mpi import rank, world_size  # (the runtime's: here too for code that thinks in distributions)
from .runtime.mpi import session_world_size as _runtime_world_size

__all__ = ["Distribution", "SingleRank", "BlockCyclic", "Explicit", "Spatial", "use", "default", "explicit", "rank",
           "world_size"]


# owners() of the immutable distributions, by (distribution, grid, world): every op creates
# tensors, and under MPI each needs its owner table (read-only arrays, shared)
_OWNERS_CACHE: dict = {}


class Distribution:
    """Maps a tile grid to owner ranks.  Subclasses implement ``_owners(grid)``, returning
    raw ranks (before reduction modulo the world size) for every tile, row-major."""

    def owners(self, grid: Sequence[int], world: int | None = None) -> np.ndarray:
        """int32 owner rank of every tile (row-major over ``grid``) for ``world`` ranks
        (default: the running session's; 1 without MPI).  With more than one rank, a
        distribution that does not fit the job raises ValueError (check())."""
        world = _runtime_world_size() if world is None else int(world)
        cacheable = type(self) in (SingleRank, BlockCyclic, Spatial)
        if cacheable:
            key = (self, tuple(grid), world)
            hit = _OWNERS_CACHE.get(key)
            if hit is not None:
                return hit
        if world > 1:
            self.check(world)
        raw = np.asarray(self._owners(tuple(int(g) for g in grid)), dtype=np.int64).reshape(-1)
        if raw.size != math.prod(grid):
            raise ValueError(f"{self!r} gave {raw.size} owners for a tile grid {tuple(grid)}")
        out = (raw % world).astype(np.int32)
        if cacheable:
            out.flags.writeable = False
            if len(_OWNERS_CACHE) > 4096:
                _OWNERS_CACHE.clear()
            _OWNERS_CACHE[key] = out
        return out

    def _owners(self, grid: tuple[int, ...]) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def check(self, world: int) -> None:
        """Raise ValueError if this distribution cannot run on ``world`` ranks."""


class SingleRank(Distribution):
    """Every tile on one rank (the default: rank 0)."""

    __slots__ = ("rank",)

    def __init__(self, rank: int = 0):
        if not isinstance(rank, numbers.Integral) or isinstance(rank, bool) or rank < 0:
            raise ValueError(f"SingleRank: rank must be an int >= 0, got {rank!r}")
        self.rank = int(rank)

    def _owners(self, grid):
        return np.full(math.prod(grid), self.rank, dtype=np.int64)

    def check(self, world: int) -> None:
        if self.rank >= world:
            raise ValueError(f"SingleRank({self.rank}) needs at least {self.rank + 1} ranks; the job has {world}")

    def __eq__(self, other):
        return isinstance(other, SingleRank) and other.rank == self.rank

    def __hash__(self):
        return hash(("SingleRank", self.rank))

    def __repr__(self):
        return f"SingleRank({self.rank})"


class BlockCyclic(Distribution):
    """Tiles dealt cyclically over a process grid ``pgrid`` (ScaLAPACK-style, one tile per
    block): tile (i0, i1, ...) belongs to the rank at (i0 % p0, i1 % p1, ...) of the process
    grid, numbered row-major.  The process grid applies to the leading axes; a tensor with
    fewer axes uses the first entries, one with more axes ignores the extra ones (they are
    not split).  ``BlockCyclic()`` is a 1-D cyclic over the first axis on every rank."""

    __slots__ = ("pgrid",)

    def __init__(self, pgrid: Sequence[int] | int | None = None):
        if pgrid is None:
            pgrid = (0,)  # resolved to the world size
        elif isinstance(pgrid, numbers.Integral) and not isinstance(pgrid, bool):
            pgrid = (int(pgrid),)
        pgrid = tuple(pgrid)
        if not pgrid:
            raise ValueError("BlockCyclic: the process grid is empty")
        for i, p in enumerate(pgrid):
            if not isinstance(p, numbers.Integral) or isinstance(p, bool) or p < 0 or (p == 0 and len(pgrid) > 1):
                raise ValueError(f"BlockCyclic: pgrid[{i}] must be an int >= 1, got {p!r}")
        self.pgrid = tuple(int(p) for p in pgrid)

    def _resolved(self, world: int) -> tuple[int, ...]:
        return (world,) if self.pgrid == (0,) else self.pgrid

    def _owners(self, grid):
        world = _runtime_world_size()
        pgrid = self._resolved(world)
        n = len(grid)
        if n == 0:
            return np.zeros(1, dtype=np.int64)
        idx = np.indices(grid).reshape(n, -1)
        owner = np.zeros(idx.shape[1], dtype=np.int64)
        k = min(len(pgrid), n)
        # row-major rank over the first k process-grid axes
        for d in range(k):
            owner = owner * pgrid[d] + idx[d] % pgrid[d]
        return owner

    def check(self, world: int) -> None:
        nprocs = math.prod(self._resolved(world))
        if nprocs > world:
            raise ValueError(f"BlockCyclic{self.pgrid}: the process grid has {nprocs} ranks; the job has {world}")

    def __eq__(self, other):
        return isinstance(other, BlockCyclic) and other.pgrid == self.pgrid

    def __hash__(self):
        return hash(("BlockCyclic", self.pgrid))

    def __repr__(self):
        return "BlockCyclic()" if self.pgrid == (0,) else f"BlockCyclic({self.pgrid})"


class Explicit(Distribution):
    """Owners given tile by tile (an array shaped like the tile grid, or flat row-major)."""

    __slots__ = ("table",)

    def __init__(self, owners):
        a = np.asarray(owners)
        if a.dtype.kind not in "iu" or (a.size and a.min() < 0):
            raise ValueError("Explicit: owners must be non-negative integers")
        self.table = a.astype(np.int64)

    def _owners(self, grid):
        if self.table.size != math.prod(grid):
            raise ValueError(f"Explicit: {self.table.size} owners for a tile grid {grid} "
                             f"({math.prod(grid)} tiles)")
        return self.table.reshape(-1)

    def check(self, world: int) -> None:
        if self.table.size and int(self.table.max()) >= world:
            raise ValueError(f"Explicit: owner rank {int(self.table.max())} but the job has {world} ranks")

    def __repr__(self):
        return f"Explicit({self.table.tolist()})"


class Spatial(Distribution):
    """Activations split in space (and optionally batch) over a grid of ranks, by blocks:
    ``Spatial(dims=(2,), grid=(2,))`` gives the first half of an (N, C, D, H, W) tensor's
    tiles along D to rank 0 and the second half to rank 1; ``Spatial(dims=(0, 2), grid=(2, 2))``
    is data x spatial (hybrid) on 4 ranks, rank = row-major position in ``grid``.  Tile i of
    n along axis ``dims[j]`` is at grid coordinate ``i * grid[j] // n``, so every tensor made
    under ``with use(sp):`` -- each layer's output and, in backward, its gradient -- lives
    with the input tiles it was computed from when its tiles line up with the input's (the
    conv/pool outputs do: tiletrain/ops/conv.py); tensors without those axes, or with one
    tile along them (weights, statistics, the dense head), are on grid coordinate 0.  The
    one documented way to split a CNN in space: docs/cnn3d.md."""

    __slots__ = ("dims", "grid")

    def __init__(self, dims: Sequence[int], grid: Sequence[int]):
        dims, grid = tuple(dims), tuple(grid)
        if not dims or len(dims) != len(grid):
            raise ValueError(f"Spatial: dims and grid must be non-empty and of one length, got dims={dims!r} "
                             f"grid={grid!r}")
        for name, vals, low in (("dims", dims, 0), ("grid", grid, 1)):
            for v in vals:
                if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < low:
                    raise ValueError(f"Spatial: {name} must be ints >= {low}, got {vals!r}")
        if len(set(dims)) != len(dims) or 1 in dims:
            raise ValueError(f"Spatial: dims must be distinct tensor axes other than the channel axis 1, "
                             f"got {dims!r}")
        self.dims, self.grid = tuple(int(d) for d in dims), tuple(int(g) for g in grid)

    @property
    def nranks(self) -> int:
        return math.prod(self.grid)

    def _owners(self, tgrid):
        n = len(tgrid)
        if n == 0:
            return np.zeros(1, dtype=np.int64)
        idx = np.indices(tgrid).reshape(n, -1)
        owner = np.zeros(idx.shape[1], dtype=np.int64)
        for d, g in zip(self.dims, self.grid):
            coord = idx[d] * g // tgrid[d] if d < n else 0
            owner = owner * g + coord
        return owner

    def tiles(self, shape: Sequence[int]) -> tuple[int, ...]:
        """The tile shape that gives every rank one block of ``shape``: axis ``dims[j]`` cut in
        ``grid[j]`` equal tiles (ValueError when it does not divide), the others whole."""
        shape = tuple(int(s) for s in shape)
        tiles = list(shape)
        for d, g in zip(self.dims, self.grid):
            if d >= len(shape):
                raise ValueError(f"Spatial: axis {d} is not an axis of a tensor of shape {shape}")
            if shape[d] % g:
                raise ValueError(f"Spatial: the grid of {g} ranks along axis {d} does not divide its size "
                                 f"{shape[d]} (shape {shape}); use a size that is a multiple of {g}")
            tiles[d] = shape[d] // g
        return tuple(tiles)

    def check_layout(self, shape: Sequence[int], tiles: Sequence[int], whole_ok: bool = False) -> None:
        """ValueError unless the grid divides the tile count along every split axis (an input
        placed with this distribution: each rank must get whole blocks of tiles).  whole_ok: a
        tensor with no such axis, or one tile along it, is not split there (on coordinate 0),
        as every tensor made with ``dist=`` this distribution may be."""
        for d, g in zip(self.dims, self.grid):
            if d >= len(shape):
                if whole_ok:
                    continue
                raise ValueError(f"Spatial: axis {d} is not an axis of a tensor of shape {tuple(shape)}")
            n = -(-int(shape[d]) // int(tiles[d]))
            if n % g and not (whole_ok and n == 1):
                raise ValueError(f"Spatial: the grid of {g} ranks along axis {d} does not divide its {n} tiles "
                                 f"(shape {tuple(shape)}, tiles {tuple(tiles)}); use a multiple of {g} tiles")

    def check(self, world: int) -> None:
        if self.nranks > world:
            raise ValueError(f"Spatial{self.grid}: the grid has {self.nranks} ranks; the job has {world}")

    def __eq__(self, other):
        return isinstance(other, Spatial) and other.dims == self.dims and other.grid == self.grid

    def __hash__(self):
        return hash(("Spatial", self.dims, self.grid))

    def __repr__(self):
        return f"Spatial(dims={self.dims}, grid={self.grid})"


_default: Distribution = SingleRank(0)
_explicit: list[Distribution] = []   # the use() blocks entered, innermost last
_in_backward = 0                     # > 0 while backward() submits gradient tasks


def explicit() -> Distribution | None:
    """The distribution of the innermost ``with use(...)`` block, None outside any."""
    return _explicit[-1] if _explicit else None


def default() -> Distribution:
    """The distribution of tensors whose traits do not name one."""
    return _default


class use:
    """``with use(dist):`` -- tensors created inside (whose traits name no distribution) get
    ``dist``.  (A class rather than a generator: modules enter one at every call.)"""

    __slots__ = ("dist", "_old")

    def __init__(self, dist: Distribution):
        if not isinstance(dist, Distribution):
            raise TypeError(f"use() expects a Distribution, got {type(dist).__name__}")
        self.dist = dist

    def __enter__(self) -> Distribution:
        global _default
        world = _runtime_world_size()
        if world > 1:  # in one process every tile is local whatever the distribution says
            self.dist.check(world)
        self._old, _default = _default, self.dist
        _explicit.append(self.dist)
        return self.dist

    def __exit__(self, *exc) -> None:
        global _default
        _explicit.pop()
        _default = self._old
