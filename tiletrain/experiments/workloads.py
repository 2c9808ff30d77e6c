"""Workloads for scheduling experiments (tiletrain bench sched, tiletrain trace run).

A workload builds its tensors once (``setup``) and then submits one step per ``step()``
call without waiting.  Forward work is tagged phase="fwd"; backward and optimizer steps are
tagged by autograd and tiletrain.optim.

  gemm        C = A @ B, n x n float32 (tile: the square tile size)
  block       one pre-LN transformer block forward + backward (GPT-2 style)
  pipeline    the synthetic p-stage pipeline of tiletrain.pipeline (sleeping tasks)
  gpt         a full GPT training step (tiletrain.nn.GPT, AdamW; see GPTStep)
"""
from __future__ import annotations

import numpy as np

import tiletrain as tt
import tiletrain.functional as F

from ..nn import GPT, GPTConfig, Tiling
from ..ops.activations import affine  # GPT-2's (in, out) weights
from ..pipeline.synthetic import build_plan, data_names, submit
from ..runtime.context import nworkers
from ..tensors import from_numpy


class Workload:
    name = "?"

    def __init__(self, tile: int, dtype=np.float32, seed: int = 0, **params):
        self.tile = tile
        self.dtype = np.dtype(dtype)
        self.rng = np.random.default_rng(seed)
        self.params = params

    def setup(self) -> None:
        raise NotImplementedError

    def step(self) -> None:
        raise NotImplementedError

    def teardown(self) -> None:
        for k in list(vars(self)):
            if k.startswith("t_"):
                delattr(self, k)

    def describe(self) -> str:
        return f"{self.name} tile={self.tile} {self.params}"


class Gemm(Workload):
    name = "gemm"

    def setup(self) -> None:
        n = int(self.params.get("n", 2048))
        self.n = n
        self.t_a = tt.from_numpy(self.rng.standard_normal((n, n)).astype(self.dtype), self.tile)
        self.t_b = tt.from_numpy(self.rng.standard_normal((n, n)).astype(self.dtype), self.tile)
        self.t_c = None

    def step(self) -> None:
        with tt.tag(phase="fwd"):
            self.t_c = self.t_a @ self.t_b

    def describe(self) -> str:
        return f"gemm {self.n}x{self.n} {self.dtype.name} tiles {self.tile}"


class Block(Workload):
    """x1 = x + proj(attn(ln_1(x))); y = x1 + fc2(gelu(fc1(ln_2(x1)))); backward of <y, G>."""
    name = "block"

    def setup(self) -> None:
        B, T, C, H = (int(self.params.get(k, d)) for k, d in (("B", 4), ("T", 256), ("C", 256), ("heads", 4)))
        self.shape = (B, T, C, H)
        tc = min(self.tile, C)
        tt_ = min(self.tile, T)
        if C % tc or (C // H) > tc or tc % (C // H):
            raise ValueError(f"block: tile {self.tile} must hold whole heads of width {C // H} "
                             f"and divide C={C}")
        cfg = (1, tt_, tc)
        r = self.rng

        def w(*shape, scale=0.02):
            return (r.standard_normal(shape) * scale).astype(self.dtype)
        weights = {
            "ln_1.weight": (1 + r.standard_normal(C) * 0.1).astype(self.dtype), "ln_1.bias": w(C),
            "attn.c_attn.weight": w(C, 3 * C), "attn.c_attn.bias": w(3 * C),
            "attn.c_proj.weight": w(C, C), "attn.c_proj.bias": w(C),
            "ln_2.weight": (1 + r.standard_normal(C) * 0.1).astype(self.dtype), "ln_2.bias": w(C),
            "mlp.c_fc.weight": w(C, 4 * C), "mlp.c_fc.bias": w(4 * C),
            "mlp.c_proj.weight": w(4 * C, C), "mlp.c_proj.bias": w(C),
        }
        self.t_p = {k: tt.from_numpy(v, (tc,) if v.ndim == 1 else (tc, tc)).requires_grad_()
                    for k, v in weights.items()}
        self.t_x = tt.from_numpy(r.standard_normal((B, T, C)).astype(self.dtype), cfg).requires_grad_()
        self.t_g = tt.from_numpy(r.standard_normal((B, T, C)).astype(self.dtype), cfg)

    def forward(self):
        p, x, H = self.t_p, self.t_x, self.shape[3]
        with tt.tag(phase="fwd", layer=0):
            h = F.layer_norm(x, x.shape[-1:], p["ln_1.weight"], p["ln_1.bias"], 1e-5)
            qkv = affine(h, p["attn.c_attn.weight"], p["attn.c_attn.bias"])
            q, k, v = (F.split_heads(qkv, H, part=i, nparts=3) for i in range(3))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x1 = x + affine(F.merge_heads(a), p["attn.c_proj.weight"], p["attn.c_proj.bias"])
        with tt.tag(phase="fwd", layer=1):
            h = F.layer_norm(x1, x1.shape[-1:], p["ln_2.weight"], p["ln_2.bias"], 1e-5)
            h = affine(h, p["mlp.c_fc.weight"], p["mlp.c_fc.bias"], gelu="tanh")  # gelu in the gemm epilogue
            return x1 + affine(h, p["mlp.c_proj.weight"], p["mlp.c_proj.bias"])

    def step(self) -> None:
        for t in [self.t_x, *self.t_p.values()]:
            t.grad = None
        self.forward().backward(self.t_g)

    def describe(self) -> str:
        B, T, C, H = self.shape
        return f"block B={B} T={T} C={C} heads={H} {self.dtype.name} tiles {self.tile}"


class Pipeline(Workload):
    """Synthetic pipeline (tiletrain.pipeline.build_plan): p stages (one per worker), m
    micro-batches, F=B=`usec` sleeping tasks; tile is ignored."""
    name = "pipeline"

    def setup(self) -> None:
        p = int(self.params.get("p", nworkers()))
        m = int(self.params.get("m", 8))
        us = float(self.params.get("usec", 2000))
        self.plan = build_plan(p, m, us, us, nworkers=nworkers())
        self.t_data = {n: from_numpy(np.zeros(1)) for n in data_names(self.plan)}

    def step(self) -> None:
        submit(self.plan, sleep=True, data=self.t_data)

    def describe(self) -> str:
        return f"pipeline p={self.plan.p} m={self.plan.m} F=B={self.plan.F:g}us (sleeping tasks)"


class GPTStep(Workload):
    """One full GPT training step: forward, cross-entropy, backward and AdamW (the optimizer
    tags its tasks `opt`, backward `bwd`).  Params: n_layer, n_embd, n_head, T, B, vocab;
    `tile` is the width tile (it must hold whole heads and divide n_embd)."""
    name = "gpt"

    def setup(self) -> None:
        L, C, H, T, B, V = (int(self.params.get(k, d)) for k, d in
                            (("n_layer", 2), ("n_embd", 256), ("n_head", 4), ("T", 128), ("B", 4), ("vocab", 256)))
        self.shape = (L, C, H, T, B, V)
        cfg = GPTConfig(vocab_size=V, block_size=T, n_layer=L, n_head=H, n_embd=C)
        width = min(self.tile, C)
        self.t_model = GPT(cfg, tiling=Tiling(time=min(self.tile, T), width=width), dtype=self.dtype,
                           seed=int(self.rng.integers(1 << 30)))
        self.t_opt = tt.optim.AdamW(self.t_model.parameters(), lr=1e-4)
        self.x = self.rng.integers(0, V, (B, T))
        self.y = self.rng.integers(0, V, (B, T))

    def step(self) -> None:
        with tt.tag(phase="fwd"):
            loss = self.t_model.loss(self.x, self.y)
        loss.backward()
        self.t_opt.step()
        self.t_opt.zero_grad()

    def describe(self) -> str:
        L, C, H, T, B, V = self.shape
        return f"gpt {L}x{C} heads={H} T={T} B={B} vocab={V} {self.dtype.name} tiles {self.tile}"


WORKLOADS = {w.name: w for w in (Gemm, Block, Pipeline, GPTStep)}


def make(name: str, tile: int, **params) -> Workload:
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
    return WORKLOADS[name](tile, **params)


__all__ = ["Workload", "Gemm", "Block", "Pipeline", "GPTStep", "WORKLOADS", "make"]
