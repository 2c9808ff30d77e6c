"""TensorTraits: the one place that knows tile geometry (shape, tile shape, grid,
the smaller last tile along each axis)."""
from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Iterator, Sequence

from ..config import env_max_tiles
from ..distribution import Distribution, default

DEFAULT_TILE = 512

# (shape, tiles) as given -> validated (shape, tiles, grid) (TensorTraits.__init__)
_GEOMETRY: dict = {}
_INT = frozenset((int,))


def _env_max_tiles() -> int:
    return env_max_tiles()  # TILETRAIN_MAX_TILES, read by tiletrain.config (the one place)


# Most tiles one tensor may have (every tile is a StarPU handle with its own bookkeeping: a
# tiling of millions of tiny tiles eats memory before any data).  Default 1,000,000; set it
# with tiletrain.set_max_tiles(n) or the environment variable TILETRAIN_MAX_TILES (read at import).
_MAX_TILES = _env_max_tiles()


def set_max_tiles(n: int) -> int:
    """Set the most tiles one tensor may have (default 1,000,000, or the environment variable
    TILETRAIN_MAX_TILES); returns the previous limit.  A tiling beyond it is refused with a
    ValueError before anything is allocated."""
    global _MAX_TILES
    if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:
        raise ValueError(f"set_max_tiles: n must be a positive int, got {n!r}")
    old, _MAX_TILES = _MAX_TILES, int(n)
    _GEOMETRY.clear()  # cached geometries were checked against the old limit
    return old


def get_max_tiles() -> int:
    """The most tiles one tensor may have (tiletrain.set_max_tiles)."""
    return _MAX_TILES


def _as_dims(value, name: str) -> tuple[int, ...]:
    if type(value) is tuple and _INT.issuperset(map(type, value)):
        return value  # the common case (another tensor's shape): nothing to convert
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return (int(value),)
    try:
        dims = tuple(value)
    except TypeError:
        raise TypeError(f"{name} must be an int or a sequence of ints, got {type(value).__name__}") from None
    for i, d in enumerate(dims):
        if not isinstance(d, numbers.Integral) or isinstance(d, bool):
            raise TypeError(f"{name}[{i}] must be an int, got {type(d).__name__} ({d!r})")
    return tuple(int(d) for d in dims)


class TensorTraits:
    """Shape and tiling of a tensor.  ``tiles`` is the tile shape (the last tile along an
    axis may be smaller); ``grid`` is the number of tiles along each axis."""

    __slots__ = ("shape", "tiles", "grid", "dist")

    def __init__(self, shape: Sequence[int] | int, tiles: Sequence[int] | int | None = None, dist=None):
        key = None
        if type(shape) is tuple and (tiles is None or type(tiles) is tuple):
            key = (shape, tiles)
            geom = _GEOMETRY.get(key)
            # a hit must also be ints (8.0 == 8 would match a cached int shape)
            if geom is not None and _INT.issuperset(map(type, shape)) and (
                    tiles is None or _INT.issuperset(map(type, tiles))):
                self.shape, self.tiles, self.grid = geom
                self.dist = None
                if dist is not None:
                    self._set_dist(dist)
                return
        shape = _as_dims(shape, "shape")
        if len(shape) > 8:
            raise ValueError(f"shape has {len(shape)} dimensions; tiletrain supports at most 8")
        for i, d in enumerate(shape):
            if d < 1:
                raise ValueError(f"shape[{i}] must be >= 1, got {d}")
        if tiles is None:
            tiles = tuple(min(d, DEFAULT_TILE) for d in shape)
        elif isinstance(tiles, numbers.Integral) and not isinstance(tiles, bool):
            tiles = (int(tiles),) * len(shape)
        else:
            tiles = _as_dims(tiles, "tiles")
        if len(tiles) != len(shape):
            raise ValueError(f"tiles has {len(tiles)} dimensions but shape {shape} has {len(shape)}")
        for i, t in enumerate(tiles):
            if t < 1:
                raise ValueError(f"tiles[{i}] must be >= 1, got {t}")
        self.shape: tuple[int, ...] = shape
        self.tiles: tuple[int, ...] = tuple(min(t, d) for t, d in zip(tiles, shape))
        self.grid: tuple[int, ...] = tuple(math.ceil(d / t) for d, t in zip(shape, self.tiles))
        ntiles = math.prod(self.grid)
        if ntiles > _MAX_TILES:
            raise ValueError(f"shape {shape} with tiles {self.tiles} makes {ntiles:,} tiles "
                             f"(grid {self.grid}), more than the limit of {_MAX_TILES:,} tiles per tensor; use larger tiles, or "
                             "raise the limit with tiletrain.set_max_tiles(n) or the environment variable "
                             "TILETRAIN_MAX_TILES")
        if key is not None:  # every op makes traits: remember validated geometries
            if len(_GEOMETRY) > 4096:
                _GEOMETRY.clear()
            _GEOMETRY[key] = (self.shape, self.tiles, self.grid)
        # Which rank owns each tile (tiletrain.distribution); None: the default at tensor
        # creation.  Not part of equality: ops combine tensors of any distributions.
        self.dist = None
        if dist is not None:
            self._set_dist(dist)

    def _set_dist(self, dist) -> None:
        if not isinstance(dist, Distribution):
            raise TypeError(f"dist must be a tiletrain.distribution.Distribution, got {type(dist).__name__}")
        self.dist = dist

    def with_dist(self, dist) -> "TensorTraits":
        """The same geometry with another distribution."""
        return TensorTraits(self.shape, self.tiles, dist)

    def owners(self, world: int | None = None):
        """int32 owner rank of every tile, row-major (the distribution, else the default)."""
        return (self.dist or default()).owners(self.grid, world)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def ntiles(self) -> int:
        return math.prod(self.grid)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def leftover(self) -> tuple[int, ...]:
        """Size of the last tile along each axis (equal to ``tiles`` where it divides evenly)."""
        return tuple(d - (g - 1) * t for d, t, g in zip(self.shape, self.tiles, self.grid))

    def tile_shape_at(self, idx: Sequence[int]) -> tuple[int, ...]:
        idx = tuple(idx)
        if len(idx) != self.ndim:
            raise ValueError(f"tile index {idx} has {len(idx)} dimensions, expected {self.ndim}")
        out = []
        for axis, (i, g, t, d) in enumerate(zip(idx, self.grid, self.tiles, self.shape)):
            if not 0 <= i < g:
                raise IndexError(f"tile index {i} out of range [0, {g}) along axis {axis}")
            out.append(min(t, d - i * t))
        return tuple(out)

    def tile_offset(self, idx: Sequence[int]) -> tuple[int, ...]:
        return tuple(i * t for i, t in zip(idx, self.tiles))

    def tile_indices(self) -> Iterator[tuple[int, ...]]:
        """All tile indices, row-major over the grid (the order of the tile handles)."""
        return itertools.product(*(range(g) for g in self.grid))

    def drop_axis(self, axis: int, naxes: int = 1) -> "TensorTraits":
        """These traits without axes [axis, axis + naxes)."""
        end = axis + naxes
        return TensorTraits(self.shape[:axis] + self.shape[end:], self.tiles[:axis] + self.tiles[end:], self.dist)

    def keep_axis(self, axis: int, naxes: int = 1) -> "TensorTraits":
        """These traits with axes [axis, axis + naxes) of size 1 in tiles of 1 (keepdim: the same
        grid and tile memory as drop_axis)."""
        end = axis + naxes
        one = (1,) * naxes
        return TensorTraits(self.shape[:axis] + one + self.shape[end:], self.tiles[:axis] + one + self.tiles[end:],
                            self.dist)

    def axis_span(self, axis) -> tuple[int, int]:
        """(first axis, count) for an int axis or a tuple of consecutive axes (negatives allowed)."""
        if isinstance(axis, (tuple, list)):
            if not axis:
                raise ValueError("axis tuple is empty")
            axes = sorted(self.normalize_axis(a) for a in axis)
            if axes != list(range(axes[0], axes[0] + len(axes))):
                raise ValueError(f"axes {tuple(axis)} must be consecutive")
            return axes[0], len(axes)
        return self.normalize_axis(axis), 1

    def normalize_axis(self, axis: int) -> int:
        if not isinstance(axis, numbers.Integral) or isinstance(axis, bool):
            raise TypeError(f"axis must be an int, got {type(axis).__name__}")
        if not -self.ndim <= axis < self.ndim:
            raise ValueError(f"axis {axis} out of range for a rank-{self.ndim} tensor")
        return int(axis) % self.ndim

    def __eq__(self, other) -> bool:
        return isinstance(other, TensorTraits) and self.shape == other.shape and self.tiles == other.tiles

    def __hash__(self) -> int:
        return hash((self.shape, self.tiles))

    def __repr__(self) -> str:
        d = "" if self.dist is None else f", dist={self.dist!r}"
        return f"TensorTraits(shape={self.shape}, tiles={self.tiles}, grid={self.grid}{d})"
