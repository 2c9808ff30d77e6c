"""torch.nn.MultiheadAttention, the Transformer encoder and decoder layers and stacks and
Transformer itself with torch's
parameter names, layouts, defaults and numerics (in_proj_weight (3E, E) xavier-uniform,
in_proj_bias zeros, out_proj a Linear with a zero bias; post-norm or norm_first; batch_first),
composed of linear, scaled_dot_product_attention (tiletrain.functional: the fused kernels
when nothing is masked, else matmul + masked softmax), layer_norm and dropout."""
from __future__ import annotations

import copy
import math

import numpy as np

from .. import functional as F
from ..functional.activations import attention_weights
from ..ops.index import index_get
from ..ops.shape import permute, reshape, transpose
from ..tensors import Tensor, from_numpy
from ..tensors.tensor import default_float
from . import init
from .layers import Dropout, LayerNorm, Linear, drawn
from .module import Module, ModuleList, Parameter

__all__ = ["MultiheadAttention", "Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
           "TransformerEncoderLayer"]


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention(embed_dim, num_heads, dropout=0.0, bias=True, ...,
    batch_first=False).  Not supported (a clear error): add_bias_kv, add_zero_attn, kdim/vdim
    other than embed_dim."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim=None, vdim=None,
                 batch_first: bool = False, device=None, dtype=None):
        super().__init__()
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("MultiheadAttention: add_bias_kv and add_zero_attn are not supported")
        if (kdim or embed_dim) != embed_dim or (vdim or embed_dim) != embed_dim:
            raise NotImplementedError("MultiheadAttention: kdim/vdim other than embed_dim are not supported")
        if embed_dim % num_heads:
            raise AssertionError("embed_dim must be divisible by num_heads")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        dtype = default_float(dtype)
        self.in_proj_weight = Parameter(drawn((3 * embed_dim, embed_dim), None, dtype, np.zeros))
        self.in_proj_bias = Parameter(drawn((3 * embed_dim,), None, dtype, np.zeros)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dtype)  # draws first, as torch's
        init.xavier_uniform_(self.in_proj_weight)
        if bias:
            init.constant_(self.out_proj.bias, 0.0)

    def _heads(self, x: Tensor, n: int) -> Tensor:
        """(T, N, E) -> (N, H, T, hd)."""
        return permute(reshape(x, (x.shape[0], n, self.num_heads, self.head_dim)), 1, 2, 0, 3)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask=None, need_weights: bool = True,
                attn_mask=None, average_attn_weights: bool = True, is_causal: bool = False):
        batched = query.ndim == 3
        if not batched:
            query, key, value = (reshape(t, (t.shape[0], 1, t.shape[1])) for t in (query, key, value))
        elif self.batch_first:
            query, key, value = (permute(t, 1, 0, 2) for t in (query, key, value))
        L, N, E = query.shape
        S = key.shape[0]
        w, b = self.in_proj_weight, self.in_proj_bias
        parts = [(index_get(w, slice(i * E, (i + 1) * E)), None if b is None else index_get(b, slice(i * E, (i + 1) * E)))
                 for i in range(3)]
        q, k, v = (self._heads(F.linear(t, pw, pb), N) for t, (pw, pb) in zip((query, key, value), parts))
        mask = _merged_mask(attn_mask, key_padding_mask, N, self.num_heads, L, S, is_causal)
        p = self.dropout if self.training else 0.0
        if need_weights:
            # torch scales q before the product here (its SDPA path scales the scores)
            scores = F.matmul(F.mul(q, math.sqrt(1.0 / self.head_dim)), transpose(k, -2, -1))
            weights = attention_weights(scores, mask, p)
            out = F.matmul(weights, v)
        else:
            out = F.scaled_dot_product_attention(q, k, v, mask, p, is_causal and mask is None)
            weights = None
        out = reshape(permute(out, 2, 0, 1, 3), (L, N, E))  # (N, H, L, hd) -> (L, N, E)
        out = self.out_proj(out)
        if self.batch_first and batched:
            out = permute(out, 1, 0, 2)
        if not batched:
            out = reshape(out, (L, E))
        if weights is not None:
            if average_attn_weights:
                weights = F.mean(weights, 1)
            if not batched:
                weights = reshape(weights, tuple(weights.shape[1:]))
        return out, weights


def _merged_mask(attn_mask, key_padding_mask, N, H, L, S, is_causal):
    """One mask broadcastable to (N, H, L, S): bool (True takes part) or float (added); torch's
    attn_mask and key_padding_mask say True where a position is NOT allowed."""
    from ..tensors import from_numpy
    if attn_mask is None and is_causal:
        attn_mask = from_numpy(np.triu(np.ones((L, S), dtype=np.bool_), 1))
    masks = []
    for m, shape in ((attn_mask, None), (key_padding_mask, (N, 1, 1, S))):
        if m is None:
            continue
        if m.ndim == 3 and shape is None:  # (N * H, L, S)
            m = reshape(m, (N, H, L, S))
        elif shape is not None:
            m = reshape(m, shape)
        masks.append(F.logical_not(m) if m.dtype == np.bool_ else m)
    if not masks:
        return None
    if len(masks) == 1:
        return masks[0]
    a, b = masks
    if a.dtype == np.bool_ and b.dtype == np.bool_:
        return F.logical_and(a, b)
    to_float = (lambda m: F.where(m, 0.0, -math.inf) if m.dtype == np.bool_ else m)
    return F.add(to_float(a), to_float(b))


def _activation(activation):
    if isinstance(activation, str):
        if activation not in ("relu", "gelu"):
            raise RuntimeError(f"activation should be relu/gelu, not {activation}")
        return F.relu if activation == "relu" else F.gelu
    return activation


class TransformerEncoderLayer(Module):
    """torch.nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=2048, dropout=0.1,
    activation=relu, layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True)."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            dtype=dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)
        self.activation = _activation(activation)

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src: Tensor, src_mask=None, src_key_padding_mask=None, is_causal: bool = False) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x


class TransformerEncoder(Module):
    """torch.nn.TransformerEncoder(encoder_layer, num_layers, norm=None): num_layers deep copies
    of encoder_layer, then norm."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int, norm=None,
                 enable_nested_tensor: bool = True, mask_check: bool = True):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm

    def forward(self, src: Tensor, mask=None, src_key_padding_mask=None, is_causal=None) -> Tensor:
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return x if self.norm is None else self.norm(x)


class TransformerDecoderLayer(Module):
    """torch.nn.TransformerDecoderLayer(d_model, nhead, dim_feedforward=2048, dropout=0.1,
    activation=relu, layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True):
    self-attention on the target, attention over the encoder's memory, feed-forward."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            dtype=dtype)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                 batch_first=batch_first, dtype=dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        self.norm1, self.norm2, self.norm3 = (LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
                                              for _ in range(3))
        self.dropout1, self.dropout2, self.dropout3 = Dropout(dropout), Dropout(dropout), Dropout(dropout)
        self.activation = _activation(activation)

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        return self.dropout1(self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                                            need_weights=False, is_causal=is_causal)[0])

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal):
        return self.dropout2(self.multihead_attn(x, mem, mem, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                                                 need_weights=False, is_causal=is_causal)[0])

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False, memory_is_causal: bool = False) -> Tensor:
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
            x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
            x = self.norm3(x + self._ff_block(x))
        return x


class TransformerDecoder(Module):
    """torch.nn.TransformerDecoder(decoder_layer, num_layers, norm=None): num_layers deep copies
    of decoder_layer, then norm."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm=None):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal: bool = False) -> Tensor:
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask, tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=bool(tgt_is_causal),
                      memory_is_causal=memory_is_causal)
        return x if self.norm is None else self.norm(x)


class Transformer(Module):
    """torch.nn.Transformer(d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
    dim_feedforward=2048, dropout=0.1, activation=relu, custom_encoder=None, custom_decoder=None,
    layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True): an encoder and a
    decoder stack, each ending in a LayerNorm; every parameter of two or more dimensions
    xavier-uniform, as torch's."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6, num_decoder_layers: int = 6,
                 dim_feedforward: int = 2048, dropout: float = 0.1, activation="relu", custom_encoder=None,
                 custom_decoder=None, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__()
        kw = dict(dim_feedforward=dim_feedforward, dropout=dropout, activation=activation,
                  layer_norm_eps=layer_norm_eps, batch_first=batch_first, norm_first=norm_first, bias=bias, dtype=dtype)
        self.encoder = custom_encoder if custom_encoder is not None else TransformerEncoder(
            TransformerEncoderLayer(d_model, nhead, **kw), num_encoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
        self.decoder = custom_decoder if custom_decoder is not None else TransformerDecoder(
            TransformerDecoderLayer(d_model, nhead, **kw), num_decoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(self, src: Tensor, tgt: Tensor, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None,
                src_is_causal=None, tgt_is_causal=None, memory_is_causal: bool = False) -> Tensor:
        batched = src.ndim == 3
        if batched and src.shape[0 if self.batch_first else 1] != tgt.shape[0 if self.batch_first else 1]:
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
        """A float (sz, sz) mask: -inf above the diagonal, 0 elsewhere."""
        m = np.triu(np.full((sz, sz), -np.inf), 1).astype(np.dtype(default_float(dtype)))
        return from_numpy(m)
