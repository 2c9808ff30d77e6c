"""Fine-tune a Hugging Face GPT-2 folder with tiletrain and write it back as a folder that
transformers loads.

    .venv/bin/python examples/finetune_hf_gpt2.py [HF_FOLDER]

HF_FOLDER is a model folder (config.json + model.safetensors, tokenizer.json if any), e.g. a
downloaded openai-community/gpt2.  Without one, a small random GPT2LMHeadModel is made with
transformers (in the test extra) and saved to runs/hf-gpt2-tiny, so this runs offline.
The same from the command line:

    .venv/bin/tiletrain train --init-from HF_FOLDER --ckpt-dir runs/ft --steps 100
    .venv/bin/tiletrain export --ckpt-dir runs/ft --out runs/ft-hf
"""
import sys
from pathlib import Path

import numpy as np
import torch
import transformers

import tiletrain as tt
from tiletrain.data import ByteTokenizer, Tokenizer, load_corpus
from tiletrain.nn import from_pretrained
from tiletrain.optim import AdamW

B, T, STEPS = 4, 64, 10

if len(sys.argv) > 1:
    src = Path(sys.argv[1])
else:  # a random GPT-2 over bytes (vocabulary 256), written by transformers itself
    src = Path("runs/hf-gpt2-tiny")
    cfg = transformers.GPT2Config(vocab_size=256, n_positions=T, n_layer=2, n_head=4, n_embd=128)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(src)
tok = Tokenizer.from_pretrained(src) if (src / "tokenizer.json").is_file() else ByteTokenizer()
data = load_corpus(max_bytes=1_000_000, tokenizer=tok)   # the Python standard library's sources
rng = np.random.default_rng(0)

with tt.init():
    model = from_pretrained(src)                 # a tiletrain GPT, by config.json's model_type
    opt = AdamW(model.parameters(), lr=1e-3)
    for step in range(STEPS):
        loss = model.loss(*data.batch("train", B, min(T, model.config.block_size), rng))
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step}  loss {float(loss):.3f}")
    out = model.save_pretrained("runs/hf-gpt2-finetuned", tokenizer=tok)
    idx = data.batch("val", 2, 16, rng)[0]
    ours = model(idx).detach().numpy()

hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()   # transformers reads it unchanged
with torch.no_grad():
    theirs = hf(torch.tensor(idx)).logits.numpy()
print(f"wrote {out}; transformers' {type(hf).__name__} gives the same logits "
      f"(max difference {np.abs(theirs - ours).max():.1e})")
