"""A plain-PyTorch GPT-2 with the parameter names and layouts of transformers'
GPT2LMHeadModel (Conv1D weights in (in, out) layout, lm_head tied to transformer.wte),
written independently of tiletrain: explicit softmax attention with a causal mask, the
tanh GELU, LayerNorm eps 1e-5.  Used as the reference in the model tests."""
import math

import numpy as np
import torch
from torch import nn


class Conv1D(nn.Module):
    def __init__(self, nx, nf):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        return x @ self.weight + self.bias


class Attention(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.c_attn, self.c_proj, self.n_head = Conv1D(C, 3 * C), Conv1D(C, C), H

    def forward(self, x):
        B, T, C = x.shape
        H, D = self.n_head, C // self.n_head
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc, self.c_proj = Conv1D(C, 4 * C), Conv1D(4 * C, C)

    def forward(self, x):
        return self.c_proj(nn.functional.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(C, eps=1e-5), Attention(C, H)
        self.ln_2, self.mlp = nn.LayerNorm(C, eps=1e-5), MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TorchGPT2(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd):
        super().__init__()
        C = n_embd
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, C), wpe=nn.Embedding(block_size, C),
            h=nn.ModuleList([Block(C, n_head) for _ in range(n_layer)]), ln_f=nn.LayerNorm(C, eps=1e-5)))
        self.lm_head = nn.Linear(C, vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, idx, targets=None):
        B, T = idx.shape
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits
        return logits, nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def random_hf_state_dict(cfg, rng, dtype=np.float64) -> dict:
    """Random GPT-2 weights under HF names (lm_head.weight included, the same array as wte),
    with non-trivial LayerNorm weights and biases so that every gradient is exercised."""
    C, V = cfg.n_embd, cfg.vocab_size

    def w(*shape, s=0.2):
        return (rng.standard_normal(shape) * s).astype(dtype)

    sd = {"transformer.wte.weight": w(V, C, s=0.5), "transformer.wpe.weight": w(cfg.block_size, C, s=0.3)}
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}."
        sd.update({
            p + "ln_1.weight": 1 + w(C, s=0.1), p + "ln_1.bias": w(C, s=0.1),
            p + "attn.c_attn.weight": w(C, 3 * C, s=0.3), p + "attn.c_attn.bias": w(3 * C, s=0.1),
            p + "attn.c_proj.weight": w(C, C), p + "attn.c_proj.bias": w(C, s=0.1),
            p + "ln_2.weight": 1 + w(C, s=0.1), p + "ln_2.bias": w(C, s=0.1),
            p + "mlp.c_fc.weight": w(C, 4 * C), p + "mlp.c_fc.bias": w(4 * C, s=0.1),
            p + "mlp.c_proj.weight": w(4 * C, C), p + "mlp.c_proj.bias": w(C, s=0.1),
        })
    sd["transformer.ln_f.weight"] = 1 + w(C, s=0.1)
    sd["transformer.ln_f.bias"] = w(C, s=0.1)
    sd["lm_head.weight"] = sd["transformer.wte.weight"]
    return sd


def torch_model(cfg, sd: dict, dtype=np.float64) -> TorchGPT2:
    tdtype = torch.float64 if np.dtype(dtype) == np.float64 else torch.float32
    m = TorchGPT2(cfg.vocab_size, cfg.block_size, cfg.n_layer, cfg.n_head, cfg.n_embd).to(tdtype)
    m.load_state_dict({k: torch.tensor(np.asarray(v, dtype=dtype)) for k, v in sd.items()}, strict=True)
    return m
