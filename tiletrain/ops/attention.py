"""Attention: head split/merge as tile-layout changes and flash attention.

``split_heads`` / ``merge_heads`` move between the (B, T, C) layout of a projection and
the (B, H, T, D) layout of attention with one permute task per head tile (a tile of the
(B, T, C) side holds one or several whole head tiles).  When a backward will follow and the
attention would have fewer query tiles than the runtime has workers, split_heads makes head
tiles of fewer heads (``parallel_head_tile``) and merge_heads fills the wide tile back from
them, so the attention and its backward run on every worker.

``scaled_dot_product_attention`` submits one task per (query tile, key tile) pair with an
online softmax, so the T x T score matrix never exists whole; its backward recomputes each
probability block from the saved row logsumexp (FlashAttention-2)."""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from ..runtime import mpi
from ..runtime.context import nworkers
from ..runtime.kernels import (attention_bwd, attention_decode, attention_fwd, heads_fill_parts, heads_merge,
                               heads_merge_part, heads_split, run_span, tensor_view, tile_view_as, view_tiles)
from ..tensors import Tensor, TensorTraits
from .autograd import PartialGradient, backward_rule, composite_grads, double_backward_rule, needs_grad, record
from .basic import _float_tensor
from .shape import _view, retile


def _int(v, what: str, name: str) -> int:
    if not isinstance(v, numbers.Integral) or isinstance(v, bool):
        raise TypeError(f"{what}: {name} must be an int, got {type(v).__name__}")
    return int(v)


def _heads_traits(x: TensorTraits, n_head: int, nparts: int, what: str, name: str = "x",
                  workers: int = 0) -> tuple[TensorTraits, int]:
    """The (B, H, T, D) traits of one part of x (B, T, nparts*C) and x's tile along its last
    axis that they need (whole heads of a single part: ``head_tile``).  workers > 0: the head
    tile is narrowed so that the attention has at least that many query tiles
    (``parallel_head_tile``)."""
    if x.ndim != 3:
        raise ValueError(f"{what}: {name} must be (B, T, C), got shape {x.shape}")
    B, T, W = x.shape
    tb, tt_, tc = x.tiles
    if W % nparts:
        raise ValueError(f"{what}: the width {W} of {name} is not divisible by nparts={nparts}")
    C = W // nparts
    if C % n_head:
        raise ValueError(f"{what}: n_head={n_head} does not divide the width C={C} of a part")
    D = C // n_head
    tc = head_tile(tc, C, D, nparts)
    th = tc // D
    if workers:
        th = parallel_head_tile(B, n_head, T, (tb, th, tt_), workers)
    return TensorTraits((B, n_head, T, D), (tb, th, tt_, D)), tc


def _query_tiles(B: int, H: int, T: int, tiles) -> int:
    """The number of (batch, head, time) tiles of a (B, H, T, D) tensor tiled ``tiles``."""
    tb, th, tt_ = tiles[:3]
    return -(-B // tb) * -(-H // th) * -(-T // tt_)


def parallel_head_tile(B: int, H: int, T: int, tiles, workers: int) -> int:
    """The head tile th = tiles[1] of (B, H, T, D) tiled ``tiles``, or where that gives fewer
    query tiles than ``workers`` (one attention task per query tile and key tile: fewer would
    leave workers idle), its largest divisor that gives at least as many (1 if none does)."""
    th = tiles[1]
    for d in range(th, 0, -1):
        if th % d == 0 and _query_tiles(B, H, T, (tiles[0], d, tiles[2])) >= workers:
            return d
    return 1


def _merged_head_tile(y: TensorTraits, workers: int) -> int:
    """The heads per tile of merge_heads' result: the most, a multiple of y's head tile, from
    which split_heads (``parallel_head_tile``) makes y's head tile; y's own when none does."""
    B, H, T, _ = y.shape
    th = y.tiles[1]
    for h0 in range(H - H % th, th, -th):
        if parallel_head_tile(B, H, T, (y.tiles[0], h0, y.tiles[2]), workers) == th:
            return h0
    return th


def head_tile(tc: int, C: int, D: int, nparts: int) -> int:
    """The tile along the width that split_heads needs, closest below ``tc``: whole heads
    (a multiple of D) and, with several parts, a divisor of the part width C."""
    if tc % D == 0 and (nparts == 1 or C % tc == 0):
        return tc
    heads = C // D
    return D * max(h for h in range(1, heads + 1) if (nparts == 1 or heads % h == 0) and h * D <= max(tc, D))


# (x's shape, x's tiles, n_head, nparts, workers) -> (the heads' traits, x's tile along its last
# axis), for geometries already validated
_HEADS: dict = {}


def split_heads(x: Tensor, n_head: int, part: int = 0, nparts: int = 1) -> Tensor:
    """Part ``part`` of x (B, T, nparts*C) as heads (B, n_head, T, D), D = C // n_head.

    With nparts=3 this splits the fused q|k|v output of a c_attn projection.  x's tile
    along the last axis should be a multiple of D and (with several parts) divide C; other
    tilings are re-tiled first (``head_tile``).  The result is tiled (tile_B, tile_C // D,
    tile_T, D), or, when x needs a gradient and that gives the attention fewer query tiles
    (batch, head, time) than the runtime has workers, with fewer heads per tile: the largest
    divisor of tile_C // D that gives at least as many (``parallel_head_tile``)."""
    what = "split_heads"
    _float_tensor(x, what, "x")
    workers = nworkers() if needs_grad(x) else 0
    key = (x.traits.shape, x.traits.tiles, n_head, nparts, workers)
    hit = _HEADS.get(key) if type(n_head) is int and type(nparts) is int and type(part) is int else None
    if hit is None or not 0 <= part < nparts:  # (a hit: the same geometry validated before)
        n_head = _int(n_head, what, "n_head")
        nparts = _int(nparts, what, "nparts")
        part = _int(part, what, "part")
        if n_head < 1:
            raise ValueError(f"{what}: n_head must be >= 1, got {n_head}")
        if nparts < 1:
            raise ValueError(f"{what}: nparts must be >= 1, got {nparts}")
        if not 0 <= part < nparts:
            raise ValueError(f"{what}: part {part} out of range for nparts={nparts}")
        hit = _heads_traits(x.traits, n_head, nparts, what, workers=workers)
        if len(_HEADS) > 1024:
            _HEADS.clear()
        _HEADS[(x.traits.shape, x.traits.tiles, n_head, nparts, workers)] = hit
    traits, tc = hit
    if x.tiles[2] != tc:  # heads straddle tiles: re-tiled first (copy tasks)
        x = retile(x, x.tiles[:2] + (tc,))
    y = _one_position_view(x, traits, part, nparts) if x.shape[1] == 1 else None
    if y is None:
        y = Tensor(traits, x.dtype)
        heads_split(x, part, nparts, y)
    return record("split_heads", y, (x,), part=part, nparts=nparts, traits=x.traits)


def _one_position_view(x: Tensor, traits: TensorTraits, part: int = 0, nparts: int = 1) -> Tensor | None:
    """With one position (T = 1, a decode step) a tile of x (B, 1, C) and the tile of its
    heads (B, H, 1, D) hold the same elements in the same order: the part's tiles of x seen
    as ``traits`` (no copy, no task), or None where they cannot be (under MPI).  Also the other
    way, for merge_heads (x (B, H, 1, D) seen as (B, 1, H*D), part 0 of 1)."""
    if mpi.enabled():
        return None
    if nparts == 1:  # all of x: a reshape view
        if view_tiles(x, traits.shape) != traits.tiles:
            return None
        return _view(x, tensor_view(x, traits.shape), traits.shape, traits.tiles)
    n = x.grid[-1] // nparts
    lo, hi = [0] * x.ndim, list(x.grid)
    lo[-1], hi[-1] = part * n, (part + 1) * n
    got = tile_view_as(x, lo, hi, traits.shape)
    if got is None or got[1] != traits.tiles:
        return None
    return _view(x, got[0], traits.shape, traits.tiles)


@backward_rule("split_heads")
def _split_heads_bwd(node, g):
    c = node.ctx
    part, nparts = c["part"], c["nparts"]
    if nparts == 1:
        dx = Tensor(c["traits"], g.dtype)
        heads_merge(g, 0, 1, dx)
        return (dx,)
    # the part's columns from g, zeros elsewhere: written into x's gradient by the engine
    # (the q, k and v parts of a fused projection fill it with no zero tile and no sum)
    return (PartialGradient(c["traits"], g.dtype, part, nparts,
                            write=lambda acc: heads_merge_part(g, part, nparts, acc),
                            fill=lambda acc, mask: heads_fill_parts(acc, nparts, mask),
                            group=("split_heads", c["traits"], nparts)),)


# Double backward: split_heads and merge_heads move elements (linear); each one's gradient is
# the other's move, recorded as that op's node (a part of a fused projection: merge_heads_part,
# zeros in the other parts, whose gradient is split_heads of that part).
@double_backward_rule("split_heads")
def _split_heads_double(node, g):
    c = node.ctx
    dx = Tensor(c["traits"], g.dtype)
    if c["nparts"] == 1:
        heads_merge(g, 0, 1, dx)
        return (record("merge_heads", dx, (g,), traits=g.traits),)
    heads_merge_part(g, c["part"], c["nparts"], dx)
    heads_fill_parts(dx, c["nparts"], 1 << c["part"])
    return (record("merge_heads_part", dx, (g,), part=c["part"], nparts=c["nparts"], traits=g.traits),)


@backward_rule("merge_heads_part", differentiable=True)
def _merge_heads_part_bwd(node, h):
    c = node.ctx
    dy = Tensor(c["traits"], h.dtype)
    heads_split(h, c["part"], c["nparts"], dy)
    return (record("split_heads", dy, (h,), part=c["part"], nparts=c["nparts"], traits=h.traits),)


def merge_heads(y: Tensor) -> Tensor:
    """(B, H, T, D) -> (B, T, H*D), the inverse of split_heads (D is made a single tile).
    The result is tiled (tile_B, tile_T, tile_H * D); when y needs a gradient, (tile_B, tile_T,
    h * D) with h the most heads, a multiple of tile_H, that split_heads would narrow to
    tile_H (the tiling split_heads had: one tile of the result is filled from several of y)."""
    what = "merge_heads"
    _float_tensor(y, what, "y")
    if y.ndim != 4:
        raise ValueError(f"{what}: y must be (B, H, T, D), got shape {y.shape}")
    B, H, T, D = y.shape
    tb, th, tt_, td = y.tiles
    if td != D:  # D is one tile: re-tiled first (copy tasks)
        y = retile(y, (tb, th, tt_, D))
    if th < H and needs_grad(y):
        th = _merged_head_tile(y.traits, nworkers())
    traits = TensorTraits((B, T, H * D), (tb, tt_, th * D))
    x = _one_position_view(y, traits) if T == 1 else None
    if x is None:
        x = Tensor(traits, y.dtype)
        heads_merge(y, 0, 1, x)
    return record("merge_heads", x, (y,), traits=y.traits)


@backward_rule("merge_heads")
def _merge_heads_bwd(node, g):
    dy = Tensor(node.ctx["traits"], g.dtype)
    heads_split(g, 0, 1, dy)
    return (dy,)


@double_backward_rule("merge_heads")
def _merge_heads_double(node, g):
    dy = Tensor(node.ctx["traits"], g.dtype)
    heads_split(g, 0, 1, dy)
    return (record("split_heads", dy, (g,), part=0, nparts=1, traits=g.traits),)


@dataclass(frozen=True)
class CausalBias:
    """A causal mask as PyTorch's ``torch.nn.attention.bias.CausalBias``: pass it as
    ``attn_mask``.  Only the lower-right variant (``causal_lower_right``): a query at row i of
    seq_len_q attends to the keys up to position i + seq_len_kv - seq_len_q, i.e. the queries
    are the last positions of the keys (a prefix of earlier keys and values)."""
    variant: str
    seq_len_q: int
    seq_len_kv: int


def causal_lower_right(seq_len_q: int, seq_len_kv: int) -> CausalBias:
    """PyTorch's ``torch.nn.attention.bias.causal_lower_right``: the causal mask aligned to the
    lower-right corner (seq_len_kv >= seq_len_q)."""
    what = "causal_lower_right"
    q, kv = _int(seq_len_q, what, "seq_len_q"), _int(seq_len_kv, what, "seq_len_kv")
    if not 1 <= q <= kv:
        raise ValueError(f"{what}: needs 1 <= seq_len_q <= seq_len_kv, got {q} and {kv}")
    return CausalBias("lower_right", q, kv)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask=None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None, enable_gqa: bool = False, *,
                                 causal: bool | None = None) -> Tensor:
    """softmax(query key^T * scale (+ causal mask)) value on (B, H, T, D) tensors.

    PyTorch's name, argument order and defaults (``attn_mask`` None or
    ``causal_lower_right(Tq, Tk)``, ``dropout_p`` 0, ``is_causal=False``: no mask unless
    asked); ``causal=`` is accepted for ``is_causal=``.
    scale defaults to 1/sqrt(D).  query, key and value must share shape and dtype (T need not
    be a multiple of its tile); other tilings are re-tiled (D becomes a single tile).  With
    ``attn_mask=causal_lower_right(Tq, Tk)`` (PyTorch's lower-right causal bias; is_causal is
    then not read) key and value have Tk >= Tq positions and the queries are the last Tq of
    them: a causal attention over a prefix of earlier keys and values, with its backward.

    ``enable_gqa=True`` (grouped-query attention, as PyTorch): key and value may have Hkv
    heads, Hkv dividing H; query head h attends with kv head h // (H // Hkv).  The kv heads
    are read in place by the tasks (never repeated in memory).

    One task per (query tile, key tile) pair updates a running row max, row sum and
    unnormalised output (online softmax); causal attention skips the key tiles above the
    diagonal and masks the diagonal tile inside the kernel.  Saved for backward: the
    inputs, the output and the row logsumexp."""
    what = "scaled_dot_product_attention"
    names = ("query", "key", "value")
    q, k, v = (_float_tensor(t, what, n) for t, n in zip((query, key, value), names))
    if attn_mask is not None and not isinstance(attn_mask, CausalBias):
        raise TypeError(f"{what}: attn_mask must be None or causal_lower_right(Tq, Tk) (got "
                        f"{type(attn_mask).__name__}); use is_causal= (pass it by keyword)")
    if not isinstance(dropout_p, numbers.Real) or isinstance(dropout_p, bool) or dropout_p != 0:
        raise ValueError(f"{what}: dropout_p must be 0 (attention dropout is not supported), "
                         f"got {dropout_p!r}")
    if causal is not None:
        is_causal = causal
    if not isinstance(is_causal, (bool, numbers.Integral)):
        raise TypeError(f"{what}: is_causal must be a bool, got {type(is_causal).__name__}")
    is_causal = bool(is_causal) or attn_mask is not None
    for t, n in zip((q, k, v), names):
        if t.ndim != 4:
            raise ValueError(f"{what}: {n} must be (B, H, T, D), got shape {t.shape}")
    if not isinstance(enable_gqa, (bool, numbers.Integral)):
        raise TypeError(f"{what}: enable_gqa must be a bool, got {type(enable_gqa).__name__}")
    H, Tq = q.shape[1], q.shape[2]
    Tk = k.shape[2] if attn_mask is not None else Tq   # a prefix: only with the lower-right mask
    if attn_mask is not None and (attn_mask.seq_len_q, attn_mask.seq_len_kv) != (Tq, Tk):
        raise ValueError(f"{what}: attn_mask is causal_lower_right({attn_mask.seq_len_q}, {attn_mask.seq_len_kv}) "
                         f"but query has {Tq} positions and key {Tk}")
    for t, n in ((k, "key"), (v, "value")):
        if t.dtype != q.dtype:
            raise TypeError(f"{what}: dtype mismatch, query is {q.dtype} and {n} is {t.dtype}")
        want = q.shape[:2] + (Tk,) + q.shape[3:]
        same = t.shape == want or (enable_gqa and t.shape[:1] + t.shape[2:] == want[:1] + want[2:]
                                   and H % t.shape[1] == 0)
        if not same or t.shape != k.shape:
            rule = ("equal to query's but for a number of heads dividing query's" if enable_gqa else "equal")
            rule += " (and positions: causal_lower_right(Tq, Tk) for a key/value prefix)" if Tk == Tq else ""
            raise ValueError(f"{what}: {n} has shape {t.shape}, query has {q.shape} (key {k.shape}); "
                             f"they must be {rule}")
    q, k, v = _attention_tiles(q, k, v, q.tiles[2])
    scale = _scale(scale, q.shape[3], what)
    o = Tensor(q.traits, q.dtype)
    lse = Tensor(q.traits.drop_axis(3), q.dtype)
    attention_fwd(q, k, v, scale, is_causal, o, lse)
    if not needs_grad(q, k, v):
        return o
    # The caller gets a view of o, so that the node can save o without a reference cycle.
    out = Tensor._view_of(o)
    return record("scaled_dot_product_attention", out, (q, k, v), saved=(q, k, v, o, lse), scale=scale,
                  causal=is_causal)


def _attention_tiles(q: Tensor, k: Tensor, v: Tensor, kv_time_tile: int):
    """q, k, v re-tiled (by copy tasks) where the attention expanders need it: D in one tile,
    q's head tile whole groups of G = H / Hkv query heads (or a divisor of G), key and value
    tiled as q but for their head tile (q's / G) and their tile along T."""
    D, G = q.shape[3], q.shape[1] // k.shape[1]
    th = gqa_head_tile(q.tiles[1], G)
    want, kv_want = (q.tiles[0], th, q.tiles[2], D), (q.tiles[0], max(th // G, 1), kv_time_tile, D)
    if q.tiles != want or k.tiles != kv_want or v.tiles != kv_want:
        q = retile(q, want) if q.tiles != want else q
        k, v = (retile(t, kv_want) if t.tiles != kv_want else t for t in (k, v))
    return q, k, v


def _scale(scale, D: int, what: str) -> float:
    """The softmax scale: 1/sqrt(D) by default."""
    if scale is None:
        return 1.0 / math.sqrt(D)
    if not isinstance(scale, numbers.Real) or isinstance(scale, bool) or not math.isfinite(scale):
        raise TypeError(f"{what}: scale must be a finite real number or None, got {scale!r}")
    return float(scale)


def gqa_head_tile(th: int, G: int) -> int:
    """The head tile of a query with G query heads per kv head, closest below ``th``: a
    multiple of G, or a divisor of G when th < G (so each query tile reads one kv tile)."""
    if th >= G:
        return th - th % G
    return max(d for d in range(1, th + 1) if G % d == 0)


def decode_attention(query: Tensor, key: Tensor, value: Tensor, q_start: int, scale: float | None = None) -> Tensor:
    """Causal attention of ``query`` (B, H, Tq, D), the tokens at positions q_start .. q_start
    + Tq - 1, over ``key``/``value`` (B, Hkv, Tk, D) with Tk >= q_start + Tq: a key/value cache
    whose positions beyond the last query are never read (they may hold anything).  Hkv
    divides H (grouped-query attention, no repeated K/V); the cache may be tiled along T
    independently of the query.  Forward only (inference): no gradient is recorded."""
    what = "decode_attention"
    names = ("query", "key", "value")
    q, k, v = (_float_tensor(t, what, n) for t, n in zip((query, key, value), names))
    q_start = _int(q_start, what, "q_start")
    for t, n in zip((q, k, v), names):
        if t.ndim != 4:
            raise ValueError(f"{what}: {n} must be (B, H, T, D), got shape {t.shape}")
        if t.dtype != q.dtype:
            raise TypeError(f"{what}: dtype mismatch, query is {q.dtype} and {n} is {t.dtype}")
    B, H, Tq, D = q.shape
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D or H % k.shape[1]:
        raise ValueError(f"{what}: key {k.shape} and value {v.shape} must be equal and (B, Hkv, Tk, D) with Hkv "
                         f"dividing query's H (query {q.shape})")
    if q_start < 0 or q_start + Tq > k.shape[2]:
        raise ValueError(f"{what}: queries at positions {q_start}..{q_start + Tq - 1} need a cache of at least "
                         f"{q_start + Tq} positions, key has {k.shape[2]}")
    if needs_grad(q, k, v):
        raise RuntimeError(f"{what} has no backward: call it under tiletrain.no_grad() (inference)")
    q, k, v = _attention_tiles(q, k, v, k.tiles[2])  # the cache keeps its own tile along T
    o = Tensor(q.traits, q.dtype)
    attention_decode(q, k, v, _scale(scale, D, what), q_start, o)
    return o


@backward_rule("scaled_dot_product_attention")
def _sdpa_bwd(node, g):
    q, k, v, o, lse = node.saved
    dq = Tensor(q.traits, q.dtype)
    dk, dv = (Tensor(k.traits, k.dtype) for _ in range(2))
    attention_bwd(q, k, v, o, g, lse, node.ctx["scale"], node.ctx["causal"], dq, dk, dv)
    return tuple(d if inp is not None else None for d, inp in zip((dq, dk, dv), node.inputs))


@double_backward_rule("scaled_dot_product_attention")
def _sdpa_double(node, g):
    """Differentiable form: softmax(q k^T * scale + causal mask) v recomputed with recorded ops
    (the T x T scores exist whole here); grouped-query kv heads repeated by index_select."""
    import numpy as np

    from ..tensors import from_numpy
    from .elementwise import add
    from .index import index_select
    from .linalg import matmul
    from .softmax import softmax
    q, k, v, _, _ = node.saved
    scale, causal = node.ctx["scale"], node.ctx["causal"]
    H, Tq, Tk = q.shape[1], q.shape[2], k.shape[2]
    bias = None
    if causal:   # lower right: query i sees the keys up to i + Tk - Tq
        i, j = np.arange(Tq)[:, None], np.arange(Tk)[None, :]
        bias = from_numpy(np.where(j <= i + Tk - Tq, 0.0, -np.inf).astype(q.dtype))
    heads = from_numpy(np.arange(H, dtype=np.int64) // (H // k.shape[1])) if k.shape[1] != H else None

    def forward(q, k, v):
        if heads is not None:
            k, v = index_select(k, 1, heads), index_select(v, 1, heads)
        s = matmul(q, k, transpose_b=True, alpha=scale)
        return matmul(softmax(s if bias is None else add(s, bias), -1), v)
    return composite_grads(node, g, forward, q, k, v)


def rotary_embedding(x: Tensor, theta: float = 10000.0, offset: int = 0) -> Tensor:
    """Rotary position embedding of x (B, H, T, D) at positions 0..T-1, Hugging Face Llama's
    rotate-half convention: with x1, x2 the halves of the last axis and angle t * inv_freq,
    inv_freq[i] = 1 / theta^(2i / D), y = (x1 cos - x2 sin, x2 cos + x1 sin).  One task per
    tile (D is one tile; other tilings are re-tiled); the backward rotates by -angle.
    ``offset``: the positions are offset .. offset + T - 1 (new tokens after a cached context)."""
    what = "rotary_embedding"
    _float_tensor(x, what, "x")
    if x.ndim != 4:
        raise ValueError(f"{what}: x must be (B, H, T, D), got shape {x.shape}")
    D = x.shape[3]
    if D % 2:
        raise ValueError(f"{what}: the head size D={D} must be even")
    if not isinstance(theta, numbers.Real) or isinstance(theta, bool) or not math.isfinite(theta) or theta <= 0:
        raise ValueError(f"{what}: theta must be a positive finite number, got {theta!r}")
    offset = _int(offset, what, "offset")
    if offset < 0:
        raise ValueError(f"{what}: offset must be >= 0, got {offset}")
    if x.tiles[3] != D:
        x = retile(x, x.tiles[:3] + (D,))
    return _rope(x, 0, float(theta), offset)


def _rope(x: Tensor, inverse: int, theta: float, offset: int) -> Tensor:
    """x rotated by +angle (inverse 0) or -angle (1), recorded: the gradient of one is the
    other (so the rule is its own differentiable form)."""
    y = Tensor(x.traits, x.dtype)
    run_span("rope", 2, 1, [x, y], inverse=inverse, pos0=offset, theta=theta)
    return record("rotary_embedding", y, (x,), theta=theta, offset=offset, inverse=inverse)


@backward_rule("rotary_embedding", differentiable=True)
def _rope_bwd(node, g):
    c = node.ctx
    return (_rope(g, 1 - c["inverse"], c["theta"], c["offset"]),)


__all__ = ["split_heads", "merge_heads", "scaled_dot_product_attention", "CausalBias", "causal_lower_right",
           "decode_attention", "rotary_embedding"]
