"""A plain-PyTorch GPT-2 with Hugging Face parameter names and Conv1D (in, out) layouts, written
for speed (PyTorch's fused scaled_dot_product_attention): the opponent in the benchmarks.
The model tests use their own, deliberately naive reference (tests/models/torch_gpt2_ref.py:
explicit masked softmax) so that correctness is not checked against fused kernels."""
from __future__ import annotations

import math


def make_torch_gpt(torch, vocab_size: int, block_size: int, n_layer: int, n_head: int, n_embd: int,
                   dtype=None):
    nn, F = torch.nn, torch.nn.functional

    class Conv1D(nn.Module):
        def __init__(self, nin, nout):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(nin, nout, dtype=dtype).normal_(0, 0.02))
            self.bias = nn.Parameter(torch.zeros(nout, dtype=dtype))

        def forward(self, x):
            return x @ self.weight + self.bias

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = Conv1D(n_embd, 3 * n_embd)
            self.c_proj = Conv1D(n_embd, n_embd)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(x).split(C, dim=2)
            q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = Conv1D(n_embd, 4 * n_embd)
            self.c_proj = Conv1D(4 * n_embd, n_embd)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(n_embd, eps=1e-5, dtype=dtype)
            self.attn = Attention()
            self.ln_2 = nn.LayerNorm(n_embd, eps=1e-5, dtype=dtype)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(vocab_size, n_embd, dtype=dtype),
                wpe=nn.Embedding(block_size, n_embd, dtype=dtype),
                h=nn.ModuleList([Block() for _ in range(n_layer)]),
                ln_f=nn.LayerNorm(n_embd, eps=1e-5, dtype=dtype)))
            self.lm_head = nn.Linear(n_embd, vocab_size, bias=False, dtype=dtype)
            self.lm_head.weight = self.transformer.wte.weight  # tied
            nn.init.normal_(self.transformer.wte.weight, 0.0, 0.02)   # GPT-2's initialisation
            nn.init.normal_(self.transformer.wpe.weight, 0.0, 0.01)
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))

        def forward(self, idx, targets=None):
            B, T = idx.shape
            x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T, device=idx.device))
            for block in self.transformer.h:
                x = block(x)
            logits = self.lm_head(self.transformer.ln_f(x))
            if targets is None:
                return logits
            return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))

    return GPT()
