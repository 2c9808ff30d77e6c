"""Basic layers: Linear (torch's layout), Conv1D (GPT-2's layout), LayerNorm, RMSNorm, Embedding,
Dropout.

Parameters are initialised on the host and written into tiled tensors with the tile shape the
caller gives (``tiles``; None means the default tile shape) one block of tile rows at a time
(tensors.tensor.from_rows), so building a model never holds a whole weight in host memory.
Without ``rng`` a layer draws as torch's does, from the default generator in torch's order
(so ``manual_seed(s)`` then the same modules gives torch's initial values); with ``rng`` (a
NumPy generator: tiletrain's models take one from their config's seed) it draws from that."""
from __future__ import annotations

import math
import numbers

import numpy as np

from .. import functional as F
from ..ops.activations import affine
from ..ops.autograd import no_grad
from ..tensors import Tensor, TensorTraits, default_generator, from_numpy
from ..tensors.creation import _drawn
from ..tensors.rng import NormalStream
from ..tensors.tensor import default_float
from .module import Module, Parameter

__all__ = ["Bilinear", "Conv1D", "EmbeddingBag",
           "Linear", "LayerNorm", "RMSNorm", "Embedding", "Dropout", "param_tiles"]



def param_tiles(shape, tiles) -> tuple[int, ...] | None:
    """A tile shape for a parameter of ``shape``: ``tiles`` may be None (the default tile
    shape), an int, or a tuple whose None entries take the default along that axis."""
    if tiles is None:
        return None
    if isinstance(tiles, numbers.Integral):
        tiles = (int(tiles),) * len(shape)
    tiles = tuple(tiles)
    default = TensorTraits(shape).tiles
    if len(tiles) != len(shape):
        raise ValueError(f"tiles {tiles} has {len(tiles)} entries for a parameter of shape {tuple(shape)}")
    return tuple(d if t is None else t for t, d in zip(tiles, default))


def _int(v, what: str, name: str) -> int:
    if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{what}: {name} must be a positive int, got {v!r}")
    return int(v)


def drawn(shape, tiles, dtype, draw) -> Tensor:
    """A tensor of ``shape`` whose values are ``draw((k,))``'s k values at a time in row order
    (a NumPy sampler such as rng.standard_normal, or a torch-stream draw), rounded to dtype:
    the same values as one draw of the whole shape, one block of tile rows in host memory
    (tensors.creation._drawn, as the random creation functions)."""
    shape = tuple(shape)
    return _drawn("init", TensorTraits(shape, param_tiles(shape, tiles)), dtype, None, None, False,
                  lambda k: draw((k,)))


def normal(shape, std: float, rng, dtype, tiles=None) -> Tensor:
    """N(0, std^2) as a tensor with tile shape ``tiles``: torch's ``normal_(0, std)`` draws from
    the default generator, or (``rng``, a NumPy generator) float64 draws from rng, so float32
    and float64 models built from one seed hold the same values up to rounding."""
    dtype = default_float(dtype)
    if rng is not None:
        return drawn(shape, tiles, dtype, lambda s: rng.standard_normal(s) * std)
    stream = NormalStream(default_generator, int(np.prod(shape, dtype=np.int64)), dtype, 0.0, std)
    return drawn(shape, tiles, dtype, lambda s: stream.take(s[0]))


def uniform(shape, bound: float, rng, dtype, tiles=None) -> Tensor:
    """U(-bound, bound): torch's ``uniform_(-bound, bound)`` draws from the default generator,
    or (``rng``) NumPy's."""
    dtype = default_float(dtype)
    if rng is not None:
        return drawn(shape, tiles, dtype, lambda s: rng.uniform(-bound, bound, s))
    g = default_generator
    return drawn(shape, tiles, dtype, lambda s: g.uniform(s[0], dtype, -bound, bound))


def kaiming_bound(fan_in: int) -> float:
    """The bound of torch's default weight init, kaiming_uniform_(a=sqrt(5)), in its own
    floating-point steps (bit for bit): sqrt(3) * gain / sqrt(fan_in)."""
    gain = math.sqrt(2.0 / (1 + math.sqrt(5) ** 2))
    return math.sqrt(3.0) * (gain / math.sqrt(fan_in))


class Linear(Module):
    """y = x @ weight^T + bias, as torch.nn.Linear: weight (out_features, in_features) and bias
    initialised U(-1/sqrt(in_features), 1/sqrt(in_features)) (torch's default).
    ``tiles`` = (tile along out, tile along in); ``rng`` draws the initial values (NumPy)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, dtype=None,
                 tiles=None, rng: np.random.Generator | None = None):
        super().__init__()
        self.in_features = _int(in_features, "Linear", "in_features")
        self.out_features = _int(out_features, "Linear", "out_features")
        dtype = default_float(dtype)
        shape = (self.out_features, self.in_features)
        self.weight = Parameter(uniform(shape, kaiming_bound(self.in_features), rng, dtype, tiles))
        bound = 1.0 / math.sqrt(self.in_features)
        self.bias = Parameter(uniform((self.out_features,), bound, rng, dtype, self.weight.tiles[:1])) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)  # (..., in) -> (..., out)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Bilinear(Module):
    """torch.nn.Bilinear: y = x1^T W[o] x2 + b[o], weight (out_features, in1_features,
    in2_features) and bias (out_features,) initialised U(-1/sqrt(in1_features),
    1/sqrt(in1_features)), as torch.  ``forward(input1, input2)``: (..., in1), (..., in2) ->
    (..., out)."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None, *, rng: np.random.Generator | None = None):
        super().__init__()
        self.in1_features = _int(in1_features, "Bilinear", "in1_features")
        self.in2_features = _int(in2_features, "Bilinear", "in2_features")
        self.out_features = _int(out_features, "Bilinear", "out_features")
        dtype = default_float(dtype)
        bound = 1.0 / math.sqrt(self.in1_features)
        shape = (self.out_features, self.in1_features, self.in2_features)
        self.weight = Parameter(uniform(shape, bound, rng, dtype))
        self.bias = Parameter(uniform((self.out_features,), bound, rng, dtype)) if bias else None

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:  # noqa: A002
        return F.bilinear(input1, input2, self.weight, self.bias)  # (..., in1), (..., in2) -> (..., out)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class Conv1D(Module):
    """y = x @ weight + bias with weight (nx, nf) = (in, out): GPT-2's Conv1D of Hugging Face
    (same argument order: ``Conv1D(nf, nx)``, nf = out features).  N(0, std^2) weight, zero bias.
    ``tiles`` = (tile along in, tile along out)."""

    def __init__(self, nf: int, nx: int, bias: bool = True, *, tiles=None, dtype=None, std: float = 0.02,
                 rng: np.random.Generator | None = None):
        super().__init__()
        self.nf = _int(nf, "Conv1D", "nf")
        self.nx = _int(nx, "Conv1D", "nx")
        dtype = default_float(dtype)
        shape = (self.nx, self.nf)
        self.weight = Parameter(normal(shape, std, rng, dtype, tiles))
        self.bias = Parameter(np.zeros(self.nf, dtype), self.weight.tiles[1]) if bias else None

    def forward(self, x: Tensor, gelu: str | None = None) -> Tensor:
        """x @ weight + bias; with ``gelu`` ('none' or 'tanh'), gelu of it, fused into the gemm."""
        return affine(x, self.weight, self.bias, gelu=gelu, what="Conv1D")  # (..., nx) -> (..., nf)

    def extra_repr(self) -> str:
        return f"nf={self.nf}, nx={self.nx}, bias={self.bias is not None}"


def _normalized_shape(v, what: str) -> tuple[int, ...]:
    """torch's normalized_shape: an int or a sequence of positive ints."""
    shape = (v,) if isinstance(v, numbers.Integral) else tuple(v) if isinstance(v, (tuple, list)) else None
    if not shape or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d > 0 for d in shape):
        raise TypeError(f"{what}: normalized_shape must be a positive int or a sequence of them, got {v!r}")
    return tuple(int(d) for d in shape)


class LayerNorm(Module):
    """torch.nn.LayerNorm: layer normalisation over the last dimensions ``normalized_shape``
    (an int: the last axis; eps 1e-5), a unit weight and a zero bias of that shape
    (``elementwise_affine=False``: neither; ``bias=False``: no bias); ``tile`` is the tile of
    the normalised axis (x's last tile) for a 1-D normalized_shape."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True, *,
                 tile=None, dtype=None):
        super().__init__()
        self.normalized_shape = _normalized_shape(normalized_shape, "LayerNorm")
        self.n, self.eps = int(np.prod(self.normalized_shape)), float(eps)
        self.elementwise_affine = bool(elementwise_affine)
        dtype, ns = default_float(dtype), self.normalized_shape
        tiles = param_tiles(ns, None if tile is None or len(ns) > 1 else (tile,))
        self.weight = Parameter(np.ones(ns, dtype), tiles) if self.elementwise_affine else None
        self.bias = Parameter(np.zeros(ns, dtype), tiles) if self.elementwise_affine and bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class RMSNorm(Module):
    """torch.nn.RMSNorm: x / sqrt(mean(x^2) + eps) * weight over the last dimensions
    ``normalized_shape``; eps=None is the machine epsilon of x's dtype; a unit weight of
    that shape unless ``elementwise_affine=False``."""

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True, *,
                 tile=None, dtype=None):
        super().__init__()
        self.normalized_shape = _normalized_shape(normalized_shape, "RMSNorm")
        self.eps = None if eps is None else float(eps)
        self.elementwise_affine = bool(elementwise_affine)
        ns = self.normalized_shape
        tiles = param_tiles(ns, None if tile is None or len(ns) > 1 else (tile,))
        self.weight = Parameter(np.ones(ns, default_float(dtype)), tiles) if self.elementwise_affine else None

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class Embedding(Module):
    """torch.nn.Embedding: a (num_embeddings, embedding_dim) table initialised N(0, std^2)
    (std 1, torch's default), ``padding_idx``'s row zero and given no gradient;
    ``forward(ids)`` gathers rows for int64 ids (a tiletrain Tensor, or a NumPy int array).
    ``tiles`` = (tile along rows, along dim)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, max_norm=None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False, _weight=None,
                 _freeze: bool = False, device=None, dtype=None, *, tiles=None, std: float = 1.0,
                 rng: np.random.Generator | None = None):
        super().__init__()
        if scale_grad_by_freq or sparse:
            raise NotImplementedError("Embedding: scale_grad_by_freq and sparse are not supported")
        self.max_norm, self.norm_type = max_norm, norm_type
        self.num_embeddings = _int(num_embeddings, "Embedding", "num_embeddings")
        self.embedding_dim = _int(embedding_dim, "Embedding", "embedding_dim")
        shape = (self.num_embeddings, self.embedding_dim)
        if padding_idx is not None:
            if (isinstance(padding_idx, bool) or not isinstance(padding_idx, numbers.Integral)
                    or not -self.num_embeddings <= padding_idx < self.num_embeddings):
                raise ValueError(f"Embedding: padding_idx must be within num_embeddings, got {padding_idx!r}")
            padding_idx = int(padding_idx) % self.num_embeddings
        self.padding_idx = padding_idx
        if _weight is not None:
            if tuple(_weight.shape) != shape:
                raise ValueError(f"Embedding: _weight has shape {tuple(_weight.shape)}, expected {shape}")
            self.weight = Parameter(_weight.detach().clone(), requires_grad=not _freeze)
        else:
            self.weight = Parameter(normal(shape, std, rng, dtype, tiles), requires_grad=not _freeze)
            if padding_idx is not None:
                with no_grad():
                    self.weight[padding_idx] = 0.0

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True, padding_idx: int | None = None, **kwargs):
        """torch.nn.Embedding.from_pretrained: the table is ``embeddings`` (copied), frozen by default."""
        if not isinstance(embeddings, Tensor) or embeddings.ndim != 2:
            raise ValueError("Embeddings parameter is expected to be 2-dimensional")
        m = cls(embeddings.shape[0], embeddings.shape[1], padding_idx, dtype=embeddings.dtype)
        with no_grad():
            m.weight.copy_(embeddings)
        m.weight.requires_grad_(not freeze)
        return m

    def forward(self, ids) -> Tensor:
        if not isinstance(ids, Tensor):
            a = np.asarray(ids)
            if a.dtype.kind not in "iu":
                raise TypeError(f"Embedding: ids must be integers, got dtype {a.dtype}")
            ids = from_numpy(a.astype(np.int64))
        return F.embedding(ids, self.weight, self.padding_idx, self.max_norm, self.norm_type)  # ids.shape + (dim,)

    def extra_repr(self) -> str:
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"


class EmbeddingBag(Module):
    """torch.nn.EmbeddingBag: a (num_embeddings, embedding_dim) table initialised N(0, 1)
    (``padding_idx``'s row zero) whose ``forward(input, offsets=None,
    per_sample_weights=None)`` is F.embedding_bag: the sum, mean (the default) or max of the
    rows over each bag, (B, embedding_dim).  ``_weight``: the table to use (its tiles are
    shared, as torch shares its storage).  scale_grad_by_freq and sparse raise
    NotImplementedError."""

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm=None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False, _weight=None,
                 include_last_offset: bool = False, padding_idx: int | None = None, device=None, dtype=None, *,
                 rng: np.random.Generator | None = None):
        super().__init__()
        self.num_embeddings = _int(num_embeddings, "EmbeddingBag", "num_embeddings")
        self.embedding_dim = _int(embedding_dim, "EmbeddingBag", "embedding_dim")
        self.max_norm, self.norm_type, self.scale_grad_by_freq = max_norm, norm_type, scale_grad_by_freq
        if scale_grad_by_freq or sparse:
            name = "scale_grad_by_freq" if scale_grad_by_freq else "sparse"
            raise NotImplementedError(f"EmbeddingBag: {name}=True is not supported")
        if mode not in ("sum", "mean", "max"):
            raise ValueError("mode has to be one of sum, mean or max")
        if padding_idx is not None:
            if not -self.num_embeddings <= padding_idx < self.num_embeddings:
                raise AssertionError("padding_idx must be within num_embeddings")
            padding_idx = int(padding_idx) % self.num_embeddings
        self.padding_idx = padding_idx
        shape = (self.num_embeddings, self.embedding_dim)
        if _weight is None:
            self.weight = Parameter(normal(shape, 1.0, rng, dtype))
            if padding_idx is not None:
                with no_grad():
                    self.weight[padding_idx] = 0.0
        else:
            if tuple(_weight.shape) != shape:
                raise AssertionError("Shape of weight does not match num_embeddings and embedding_dim")
            self.weight = _weight if isinstance(_weight, Parameter) else Parameter(_weight)
        self.mode, self.sparse, self.include_last_offset = mode, sparse, include_last_offset

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True, max_norm=None, norm_type: float = 2.0,
                        scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                        include_last_offset: bool = False, padding_idx: int | None = None):
        """torch.nn.EmbeddingBag.from_pretrained: the table is ``embeddings``, frozen by default."""
        if not isinstance(embeddings, Tensor) or embeddings.ndim != 2:
            raise ValueError("Embeddings parameter is expected to be 2-dimensional")
        m = cls(embeddings.shape[0], embeddings.shape[1], max_norm, norm_type, scale_grad_by_freq, mode, sparse,
                embeddings, include_last_offset, padding_idx)
        m.weight.requires_grad_(not freeze)
        return m

    def forward(self, input: Tensor, offsets=None, per_sample_weights=None) -> Tensor:  # noqa: A002
        return F.embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type, self.scale_grad_by_freq,
                               self.mode, self.sparse, per_sample_weights, self.include_last_offset,
                               self.padding_idx)  # (B, embedding_dim)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        s += f", mode={self.mode!r}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s


class Dropout(Module):
    """Zero elements with probability p (torch's default 0.5) in training mode (scaling the
    rest by 1/(1-p)); the identity in eval mode or for p = 0.  ``inplace`` is accepted (the
    result is a new tensor)."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not isinstance(p, numbers.Real) or isinstance(p, bool) or not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout: p must be a number in [0, 1), got {p!r}")
        self.p = float(p)

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class LocalHeads(Module):
    """Auxiliary classifiers for local learning (PPLL; ``tiletrain.pipeline.noflush``, schedule
    ``local``): one small head per stage boundary, head s mapping stage s's output
    (``widths[s]`` features) to ``classes`` logits -- a Linear, or Linear, ReLU, Linear with
    ``hidden`` > 0.  ``heads[s](y)``; ``len(heads)`` boundaries (stages - 1)."""

    def __init__(self, widths, classes: int, hidden: int = 0, *, dtype=np.float32,
                 rng: np.random.Generator | None = None):
        super().__init__()
        widths = [_int(w, "LocalHeads", "widths") for w in widths]
        if not widths:
            raise ValueError("LocalHeads: give one width per stage boundary (at least one)")
        classes = _int(classes, "LocalHeads", "classes")
        if not isinstance(hidden, int) or isinstance(hidden, bool) or hidden < 0:
            raise ValueError(f"LocalHeads: hidden must be an int >= 0, got {hidden!r}")
        from .activation import ReLU
        from .module import ModuleList, Sequential
        self.heads = ModuleList([
            Linear(w, classes, dtype=dtype, rng=rng) if not hidden else
            Sequential(Linear(w, hidden, dtype=dtype, rng=rng), ReLU(), Linear(hidden, classes, dtype=dtype, rng=rng))
            for w in widths])

    def __len__(self) -> int:
        return len(self.heads)

    def __getitem__(self, s: int) -> Module:
        return self.heads[s]

    def __iter__(self):
        return iter(self.heads)
