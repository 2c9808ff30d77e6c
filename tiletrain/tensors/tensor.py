"""The Tensor core: a tiled array whose tiles are StarPU handles -- its C tensor and tile
life cycle, geometry, data in and out, autograd's fields.

``TensorBase`` is the class every tensor is made with; the user-facing ``tiletrain.Tensor``
(tiletrain/tensors/api.py) derives from it and adds torch's methods and operators, which
call the ops.  That class sits above the ops (which make tensors with ``TensorBase(...)``)
and registers itself here when imported (``set_tensor_class``): from then on every new tensor
is one of it.  docs/architecture.md has the layers."""
from __future__ import annotations

import numbers

import ml_dtypes
import numpy as np

from .._ffi import check, ffi, lib
from .. import distribution as D
from ..runtime import current
from .printing import format_tensor
from .traits import TensorTraits

float32, float64, int64 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64)
float16 = np.dtype(np.float16)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
# dtype -> the C library's code (enum tt_dtype in csrc/include/tiletrain.h)
DTYPES = {np.dtype(np.float32): lib.TT_F32, np.dtype(np.float64): lib.TT_F64, np.dtype(np.int64): lib.TT_I64,
          float16: lib.TT_F16, bfloat16: lib.TT_BF16}
# bool: one byte, 0 or 1 (comparisons, masks); `tiletrain.bool` is the lead's public alias to decide
bool_ = np.dtype(np.bool_)
DTYPES[bool_] = lib.TT_BOOL
# Storage types: ops that take them compute and accumulate in float32 and round once.
HALF_DTYPES = (float16, bfloat16)
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64)) + HALF_DTYPES


def is_float(dtype) -> bool:
    """float32, float64, float16 or bfloat16 (bfloat16's numpy kind is 'V', not 'f')."""
    return np.dtype(dtype) in FLOAT_DTYPES


def is_half(dtype) -> bool:
    return np.dtype(dtype) in HALF_DTYPES


_DEFAULT_FLOAT = [np.dtype(np.float32)]


def get_default_dtype() -> np.dtype:
    """torch.get_default_dtype: the float dtype of creation functions and layers given no dtype."""
    return _DEFAULT_FLOAT[0]


def set_default_dtype(d) -> None:
    """torch.set_default_dtype: float32 or float64 (also float16/bfloat16, as torch allows)."""
    dt = as_dtype(d)
    if not is_float(dt):
        raise TypeError(f"set_default_dtype: only floating-point types are supported as the default type, got {dt}")
    _DEFAULT_FLOAT[0] = dt


def default_float(dtype=None) -> np.dtype:
    """dtype as a NumPy dtype; None is the default float dtype (get_default_dtype)."""
    return _DEFAULT_FLOAT[0] if dtype is None else as_dtype(dtype)


def as_dtype(dtype) -> np.dtype:
    if isinstance(dtype, np.dtype) and dtype in DTYPES:  # the common case: nothing to convert
        return dtype
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype {dtype!r} is not a data type") from None
    if dt not in DTYPES:
        raise TypeError(f"unsupported dtype {dt}; tiletrain supports float32, float64, float16, bfloat16 "
                        "(ml_dtypes.bfloat16), int64 and bool")
    return dt


def _new_placed(traits: TensorTraits, code: int, out) -> None:
    """Create the tiles of a tensor under MPI, with owners chosen as tiletrain.distribution's
    docstring says: traits' distribution, else the innermost use() block, else placed by the
    first task writing each tile (fallback: the default distribution)."""
    dist = traits.dist
    if dist is None or D._in_backward:
        ctx = D.explicit()
        if ctx is not None:
            dist = ctx
        else:
            fallback = (dist or D.default()).owners(traits.grid)
            check(lib.tt_tensor_new_deferred(traits.ndim, traits.shape, traits.tiles, code,
                                             ffi.from_buffer("int[]", fallback), out))
            return
    owners = dist.owners(traits.grid)
    check(lib.tt_tensor_new_owned(traits.ndim, traits.shape, traits.tiles, code,
                                  ffi.from_buffer("int[]", owners), out))


class TensorBase:
    """A tensor split into tiles; every tile is one StarPU data handle.

    Operations submit tile tasks and return at once; ``.numpy()`` waits for the tasks
    that write the tensor and gathers its tiles.  ``TensorBase(traits, dtype)`` makes a
    tensor of the registered user-facing class (tiletrain.Tensor, see set_tensor_class)."""

    __slots__ = ("traits", "dtype", "_ptr", "_session", "_base", "requires_grad", "grad", "_node",
                 "value_range", "_read", "__weakref__")

    def __new__(cls, *args, **kwargs):
        return object.__new__(_TENSOR_CLASS[0] if cls is TensorBase else cls)

    def __init__(self, traits: TensorTraits, dtype=np.float32, _owners=None):
        self.traits = traits
        self.dtype = dtype = as_dtype(dtype)
        self._ptr = ffi.NULL
        self._base = None          # set on views that share another tensor's tiles
        self.requires_grad = False
        self.grad: TensorBase | None = None
        self._node = None          # autograd node that produced this tensor (tiletrain.ops.autograd)
        # (lo, hi): integer values known to lie in [lo, hi] without reading them -- set by
        # from_numpy (the array's min and max) and argmax (0 .. n - 1), None once written in place
        self.value_range = None
        self._read = False         # weak references to the recorded ops that read it (ops.autograd.record)
        rt = current(start=True)  # the first tensor of a process starts the runtime (defaults)
        if traits.dist is not None and isinstance(traits.dist, D.Spatial):  # made with dist=Spatial(...): whole blocks per rank
            traits.dist.check_layout(traits.shape, traits.tiles, whole_ok=True)
        out = ffi.new("tt_tensor **")
        if _owners is not None:  # placed like another tensor (autograd's leaf gradients)
            check(lib.tt_tensor_new_owned(traits.ndim, traits.shape, traits.tiles, DTYPES[dtype],
                                          ffi.from_buffer("int[]", _owners), out))
        elif lib.tt_mpi_enabled():
            _new_placed(traits, DTYPES[dtype], out)
        else:  # one process: every tile is local
            check(lib.tt_tensor_new(traits.ndim, traits.shape, traits.tiles, DTYPES[dtype], out))
        self._ptr = out[0]
        self._session = rt.session

    @classmethod
    def _of_ptr(cls, ptr, traits: TensorTraits, dtype, session, base: "TensorBase | None" = None) -> "TensorBase":
        """A Python tensor for C tensor ``ptr`` made elsewhere (a view of ``base``'s tiles, which
        stays alive while it lives, or a tensor of its own when base is None)."""
        t = cls.__new__(cls)
        t.traits, t.dtype, t._session, t._ptr, t._base = traits, dtype, session, ptr, base
        t.requires_grad, t.grad, t._node, t.value_range, t._read = False, None, None, None, False
        return t

    @classmethod
    def _view_of(cls, base: "TensorBase") -> "TensorBase":
        """A new Python tensor sharing base's tiles (no copy); base stays alive while it lives."""
        return cls._of_ptr(base._ptr, base.traits, base.dtype, base._session,
                           base if base._base is None else base._base)

    _STATE = ("traits", "dtype", "_ptr", "_session", "_base", "requires_grad", "grad", "_node", "value_range",
              "_read")

    def _hand_over(self) -> "TensorBase":
        """A new Python tensor holding this one's tiles, gradient and node; this one is left
        empty until it ``_take``s another's (in-place ops on tensors of the autograd graph)."""
        t = type(self).__new__(type(self))
        for k in self._STATE:
            setattr(t, k, getattr(self, k))
        self._ptr, self._base, self._node, self.grad = ffi.NULL, None, None, None
        return t

    def _take(self, other: "TensorBase") -> None:
        """This tensor takes other's tiles and node; other is left empty."""
        for k in self._STATE:
            setattr(self, k, getattr(other, k))
        other._ptr, other._base, other._node = ffi.NULL, None, None

    def detach(self) -> "TensorBase":
        """The same tiles, cut from the autograd graph (no copy)."""
        self._handle("detach")
        return TensorBase._view_of(self)

    def requires_grad_(self, flag: bool = True) -> "TensorBase":
        if flag and not is_float(self.dtype):
            raise TypeError(f"requires_grad_: gradients need a float tensor, this one is {self.dtype}")
        if not flag and self._node is not None:
            raise RuntimeError("requires_grad_(False) on a tensor computed by a recorded op; use detach()")
        self.requires_grad = bool(flag)
        return self

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    @property
    def grad_fn(self):
        """The autograd node that computed this tensor (None for a leaf), as torch's grad_fn:
        ``name()`` gives e.g. ``MulBackward0``."""
        return self._node

    # -- geometry -------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.traits.shape

    @property
    def tiles(self) -> tuple[int, ...]:
        return self.traits.tiles

    @property
    def grid(self) -> tuple[int, ...]:
        return self.traits.grid

    @property
    def ndim(self) -> int:
        return len(self.traits.shape)

    @property
    def dist(self):
        """The distribution this tensor's tiles were placed with (tiletrain.distribution)."""
        return self.traits.dist or D.default()

    def owners(self) -> np.ndarray:
        """Owner rank of every tile, shaped like the tile grid (all 0 without MPI; -1 for a tile
        whose owner is chosen by its first writer and that has not been written yet)."""
        ptr = self._handle("owners()")
        out = np.empty(self.traits.ntiles, dtype=np.int32)
        check(lib.tt_tensor_owners(ptr, ffi.from_buffer("int[]", out), out.size))
        return out.reshape(self.grid)

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # -- lifetime -------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._ptr != ffi.NULL and bool(lib.tt_tensor_alive(self._ptr))

    def _handle(self, what: str = "tensor"):
        """The C pointer, after checking that the tensor's runtime is still running."""
        if self._ptr == ffi.NULL or not lib.tt_tensor_alive(self._ptr):
            raise RuntimeError(f"{what}: this tensor belongs to a tiletrain runtime that has shut down")
        return self._ptr

    def __del__(self):
        ptr = getattr(self, "_ptr", None)
        if getattr(self, "_base", None) is not None:
            return  # a view: the base frees the tiles
        if ptr is not None and ptr != ffi.NULL:
            try:
                # its tiles are kept for the next tensors of their size once their last task
                # ends, or unregistered then (csrc/tile.c, "reuse")
                lib.tt_tensor_free(ptr)
            except Exception:  # interpreter teardown
                pass
            self._ptr = ffi.NULL

    # -- data -----------------------------------------------------------------------
    def _to_numpy(self, out: np.ndarray | None = None) -> np.ndarray:
        """Wait for pending writers and gather the tiles into a C-contiguous array (whether
        or not the tensor requires grad: tiletrain.Tensor.numpy is the torch-facing method).

        Under MPI this is collective: every rank must call it at the same point, and every
        rank gets the full value (each tile is sent from its owner to every rank)."""
        ptr = self._handle("numpy()")
        if out is None:
            out = np.empty(self.shape, dtype=self.dtype)
        else:
            if not isinstance(out, np.ndarray):
                raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
            if out.shape != self.shape or out.dtype != self.dtype:
                raise ValueError(f"out has shape {out.shape} and dtype {out.dtype}; "
                                 f"expected {self.shape} and {self.dtype}")
            if not out.flags.c_contiguous:
                raise ValueError("out must be C-contiguous")
            if not out.flags.writeable:
                raise ValueError("out is read-only")
        check(lib.tt_tensor_read(ptr, ffi.from_buffer(out, require_writable=True)))
        current().idle()
        return out

    def item(self) -> float | int:
        if self.numel() != 1:
            raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
        return self._to_numpy().reshape(()).item()

    def __float__(self) -> float:
        return float(self.item())

    def tolist(self):
        """The values as nested Python lists (a Python number for a 0-d tensor); waits for writers."""
        a = self._to_numpy()
        return (a.astype(np.float32) if is_half(a.dtype) else a).tolist()

    def __iter__(self):
        """Rows along axis 0, each a new tensor (a copy, outside autograd) tiled like self's other axes."""
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        a = self._to_numpy()
        return iter([from_numpy(row, tiles=self.tiles[1:] or None) for row in a])

    def __repr__(self) -> str:
        """torch's layout: ``tensor([...], dtype=tiletrain.float64, requires_grad=True)``; dtype is
        omitted for float32, int64 and bool (as torch), ``tiles=`` is shown when the tensor has
        more than one tile, ``grad_fn=<MulBackward0>`` for a tensor computed by a recorded op.
        Reads the values (waits for the tasks writing them)."""
        suffixes = [] if self.dtype in (float32, int64, bool_) else [f"dtype=tiletrain.{self.dtype.name}"]
        if self.traits.ntiles > 1:
            suffixes.append(f"tiles={self.tiles}")
        if self._node is not None:
            suffixes.append(f"grad_fn={self._node!r}")
        elif self.requires_grad:
            suffixes.append("requires_grad=True")
        if not self.alive:
            return "tensor(<shut down>, " + ", ".join([f"shape={self.shape}"] + suffixes) + ")"
        try:
            values = self._to_numpy()
        except ValueError:  # created with empty() and never written: nothing to read
            return "tensor(<not written yet>, " + ", ".join([f"shape={self.shape}"] + suffixes) + ")"
        return format_tensor(values, is_float(self.dtype), suffixes)

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError(f"Boolean value of a tensor with {self.numel()} values is ambiguous")
        return bool(self.item())

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[self.traits.normalize_axis(dim)]

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        return self.traits.size


# The class new tensors get: set once by tiletrain/tensors/api.py (the user-facing Tensor).
_TENSOR_CLASS: list[type] = [TensorBase]


def set_tensor_class(cls: type) -> None:
    """Make ``cls`` (a subclass of TensorBase with no fields of its own) the class of every
    tensor made from now on."""
    if not (isinstance(cls, type) and issubclass(cls, TensorBase)) or cls.__dict__.get("__slots__") != ():
        raise TypeError(f"set_tensor_class: {cls!r} must subclass TensorBase with __slots__ = ()")
    _TENSOR_CLASS[0] = cls


# The core's own name for the class: tiletrain.tensors.Tensor, what the ops make and check
# tensors with (every instance is of the registered class, tiletrain.Tensor).
Tensor = TensorBase


def value_range_of(t: Tensor) -> tuple[int, int] | None:
    """t's values' known bounds (lo, hi) without reading them, or None: its own
    ``value_range``, else that of the tensor whose tiles it views (a view shows some of its
    base's values; a write through any view forgets its bases' ranges, forget_value_range,
    and a write into the base forgets the base's), for a view of the same dtype."""
    while True:
        r = t.value_range
        base = t._base
        if r is not None or base is None or base.dtype != t.dtype:
            return r
        t = base


def known_within(t: Tensor, n: int) -> bool:
    """True when t's values are known, without reading them (``value_range``), to lie in [0, n)."""
    r = value_range_of(t)
    return r is not None and 0 <= r[0] and r[1] < n


def forget_value_range(t: Tensor) -> None:
    """t is about to be written in place: neither it nor the tensors whose tiles it shares
    (a view's bases) keep a known value range."""
    while t is not None:
        t.value_range = None
        t = t._base


def wont_use(t: Tensor) -> None:
    """A hint: t's tiles are not needed again soon (under a memory limit StarPU may evict them
    first)."""
    check(lib.tt_tensor_wont_use(t._ptr))


def migrate_(t: Tensor, owners) -> Tensor:
    """t itself, its tile i handed to rank owners[i] (collective under MPI; StarPU-MPI moves
    the data, no task): the owners become part of its traits."""
    owners = np.ascontiguousarray(owners, dtype=np.int32).reshape(-1)
    check(lib.tt_tensor_migrate(t._handle("migrate"), ffi.from_buffer("int[]", owners)))
    t.traits = t.traits.with_dist(D.SingleRank(int(owners[0])) if (owners == owners[0]).all() else D.Explicit(owners))
    return t


def from_numpy(a, tiles=None, dist=None) -> Tensor:
    """Copy a NumPy array into a new tiled tensor (any strides; the array is not kept).

    Under MPI this is collective: every rank passes the same array and stores the tiles it
    owns (``dist``, else the default distribution)."""
    if not isinstance(a, np.ndarray):
        if isinstance(a, (numbers.Number, list, tuple)):
            a = np.asarray(a)
        else:
            raise TypeError(f"from_numpy expects a numpy.ndarray, got {type(a).__name__}")
    as_dtype(a.dtype)
    t = Tensor(TensorTraits(a.shape, tiles if a.ndim else None, dist), a.dtype)
    # The C side walks the tiles with the array's byte strides (any layout, negative too);
    # `a` stays referenced for the duration of the synchronous call.
    strides = ffi.new("int64_t[]", list(a.strides) or [0])
    check(lib.tt_tensor_write(t._handle("from_numpy"), ffi.cast("void *", a.ctypes.data), strides))
    if a.dtype.kind in "iu" and a.size:  # ids, targets: their range is known without reading them back
        t.value_range = (int(a.min()), int(a.max()))
    return t


# -- streaming: whole tile rows at a time (checkpoints, initialisation) --------------------

ROW_BLOCK_BYTES = 8 << 20  # a streaming block: about this many bytes, at least one tile row


def row_block_bytes() -> int:
    """The bytes of a streaming block: ROW_BLOCK_BYTES, or under a memory limit an eighth of
    the limit when that is less (a block's tiles and its NumPy rows are held at once, and
    under MPI rank 0 also holds the block's received tiles)."""
    limit = lib.tt_memory_limit()
    return ROW_BLOCK_BYTES if limit <= 0 else max(1, min(ROW_BLOCK_BYTES, limit // 8))


def tile_rows(t: Tensor, max_bytes: int | None = None):
    """(lo, hi, r0, r1) for runs of whole tile rows [lo, hi) along axis 0, holding rows
    r0:r1, each about ``max_bytes`` (default :func:`row_block_bytes`; at least one tile
    row); a 0-d tensor is one run."""
    if max_bytes is None:
        max_bytes = row_block_bytes()
    if t.ndim == 0:
        yield 0, 1, 0, 1
        return
    tile0, n0 = t.tiles[0], t.shape[0]
    row_bytes = int(np.prod(t.shape[1:], dtype=np.int64)) * t.dtype.itemsize
    per = max(1, max_bytes // max(1, tile0 * row_bytes))
    grid0 = t.grid[0]
    for lo in range(0, grid0, per):
        hi = min(grid0, lo + per)
        yield lo, hi, lo * tile0, min(hi * tile0, n0)


def _rows_shape(t: Tensor, lo: int, hi: int, block, what: str) -> None:
    if not isinstance(block, np.ndarray):
        raise TypeError(f"{what}: expected a numpy.ndarray, got {type(block).__name__}")
    grid0 = t.grid[0] if t.ndim else 1
    if not 0 <= lo < hi <= grid0:
        raise ValueError(f"{what}: tile rows [{lo}, {hi}) outside [0, {grid0})")
    rows = (min(hi * t.tiles[0], t.shape[0]) - lo * t.tiles[0],) + t.shape[1:] if t.ndim else ()
    if block.shape != rows or block.dtype != t.dtype:
        raise ValueError(f"{what}: tile rows [{lo}, {hi}) of a {t.shape} {t.dtype} tensor need a {rows} "
                         f"{t.dtype} array, got {block.shape} {block.dtype}")


def write_rows_(t: Tensor, lo: int, hi: int, block: np.ndarray | None) -> None:
    """Write the tiles of tile rows [lo, hi) from ``block`` (those rows, t's dtype, any
    strides).  Waits for the tasks using those tiles; collective under MPI (as from_numpy):
    there a rank that owns none of these tiles (``rows_owned``) may pass ``block=None``."""
    forget_value_range(t)
    if block is None and lib.tt_mpi_enabled():
        check(lib.tt_tensor_write_rows(t._handle("write"), lo, hi, ffi.NULL, ffi.NULL))
        return
    _rows_shape(t, lo, hi, block, "write_rows_")
    strides = ffi.new("int64_t[]", list(block.strides) or [0])
    src = ffi.cast("void *", block.ctypes.data)
    check(lib.tt_tensor_write_rows(t._handle("write"), lo, hi, src, strides))


def read_rows(t: Tensor, lo: int, hi: int, out: np.ndarray | None,
              root: int | None = None) -> np.ndarray | None:
    """Read the tiles of tile rows [lo, hi) into ``out`` (C-contiguous, those rows, t's
    dtype).  Waits for their writers; collective under MPI (as numpy()): every rank gets the
    rows, or with ``root`` only that rank (the others pass ``out=None`` and get None; the
    copies sent to root are dropped after the read, so streaming a tensor through root never
    holds more than one block there)."""
    ptr = t._handle("read")
    if root is not None and not 0 <= root < lib.tt_mpi_size():
        raise ValueError(f"read_rows: root {root} is not a rank (world size {lib.tt_mpi_size()})")
    if out is None and root is not None and root != lib.tt_mpi_rank():
        check(lib.tt_tensor_read_rows_on(ptr, lo, hi, ffi.NULL, root))
        return None
    _rows_shape(t, lo, hi, out, "read_rows")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("read_rows: out must be C-contiguous and writable")
    check(lib.tt_tensor_read_rows_on(ptr, lo, hi, ffi.from_buffer(out, require_writable=True),
                                     -1 if root is None else root))
    return out


def rows_owned(t: Tensor) -> np.ndarray:
    """For each tile row along axis 0 (one for a 0-d tensor): does this rank own one of its
    tiles (or one not placed yet)?  All True in one process."""
    if not lib.tt_mpi_enabled():
        return np.ones(t.grid[0] if t.ndim else 1, dtype=bool)
    owners = t.owners().reshape(t.grid[0] if t.ndim else 1, -1)
    return ((owners == lib.tt_mpi_rank()) | (owners < 0)).any(axis=1)


def from_rows(traits: TensorTraits, dtype, fill) -> Tensor:
    """A new tensor written one block of tile rows at a time: ``fill(r0, r1, out)`` writes
    rows r0:r1 (in order) into ``out``; only one block is ever held in host memory."""
    t = Tensor(traits, dtype)
    for lo, hi, r0, r1 in tile_rows(t):
        block = np.empty((r1 - r0,) + t.shape[1:] if t.ndim else (), t.dtype)
        fill(r0, r1, block)
        write_rows_(t, lo, hi, block)
    return t


def gather_per_rank(values) -> np.ndarray:
    """Collective (under MPI, every rank calls it at the same point of its flow): this rank's
    float ``values`` and every other rank's, as a NumPy array (world size, len(values)); row
    r holds rank r's.  One process: just ``[values]``.  Used to agree on up-front checks."""
    current()
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if not lib.tt_mpi_enabled():
        return values[None, :].copy()
    table = np.zeros((lib.tt_mpi_size(), values.size))
    table[lib.tt_mpi_rank()] = values  # each rank stores only its own row (its tile)
    return from_numpy(table, (1, values.size), dist=D.BlockCyclic())._to_numpy()
