"""Fine-tune a Hugging Face GPT-2 state dict with tiletrain and export it back.

With `transformers` installed and weights on disk, pass a GPT2LMHeadModel to GPT.from_hf;
without them this builds a randomly initialised GPT-2-shaped state dict with the same
names and layouts (Conv1D (in, out) weights, tied lm_head), so it runs anywhere offline.

    .venv/bin/python examples/finetune_hf_gpt2.py
"""
import numpy as np

import tiletrain as tt
from tiletrain.data import load_corpus
from tiletrain.nn import GPT, GPTConfig
from tiletrain.optim import AdamW

config = GPTConfig(vocab_size=256, block_size=64, n_layer=2, n_head=4, n_embd=128)


def random_hf_state_dict(cfg: GPTConfig, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    C, sd = cfg.n_embd, {}
    sd["transformer.wte.weight"] = rng.normal(0, 0.02, (cfg.vocab_size, C))
    sd["transformer.wpe.weight"] = rng.normal(0, 0.01, (cfg.block_size, C))
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}."
        for ln in ("ln_1", "ln_2"):
            sd[p + ln + ".weight"], sd[p + ln + ".bias"] = np.ones(C), np.zeros(C)
        for name, (n_in, n_out) in {"attn.c_attn": (C, 3 * C), "attn.c_proj": (C, C),
                                    "mlp.c_fc": (C, 4 * C), "mlp.c_proj": (4 * C, C)}.items():
            sd[p + name + ".weight"] = rng.normal(0, 0.02, (n_in, n_out))
            sd[p + name + ".bias"] = np.zeros(n_out)
    sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"] = np.ones(C), np.zeros(C)
    sd["lm_head.weight"] = sd["transformer.wte.weight"]  # tied
    return {k: v.astype(np.float32) for k, v in sd.items()}


try:
    from transformers import GPT2LMHeadModel  # noqa: F401  (use GPT.from_hf(model) with real weights)
except ImportError:
    pass

hf = random_hf_state_dict(config)
data = load_corpus(max_bytes=1_000_000)
rng = np.random.default_rng(0)
with tt.init():
    model = GPT.from_hf(hf, config=config)
    opt = AdamW(model.parameters(), lr=1e-3)
    for step in range(10):
        loss = model.loss(*data.batch("train", 4, 64, rng))
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step}  loss {float(loss):.3f}")
    out = model.to_hf_state_dict()          # numpy arrays under the same names
changed = np.abs(out["transformer.h.0.attn.c_attn.weight"] - hf["transformer.h.0.attn.c_attn.weight"]).max()
print(f"exported {len(out)} arrays; c_attn weight moved by up to {changed:.2e}; "
      f"lm_head tied: {np.array_equal(out['lm_head.weight'], out['transformer.wte.weight'])}")
