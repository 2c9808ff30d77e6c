"""Build, train, checkpoint and sample a small GPT with tiletrain's model API.

    .venv/bin/python examples/train_gpt.py
"""
import numpy as np

import tiletrain as tt
from tiletrain import checkpoint
from tiletrain.data import ByteTokenizer, load_corpus
from tiletrain.nn import GPT, GPTConfig, Tiling
from tiletrain.optim import AdamW, clip_grad_norm_, cosine_with_warmup
from tiletrain.inference import GenerationConfig, sample_text

B, T, STEPS = 8, 64, 60
tok = ByteTokenizer()
data = load_corpus(max_bytes=2_000_000)           # the Python standard library's sources
rng = np.random.default_rng(0)

with tt.init():                                   # StarPU on every core
    config = GPTConfig(vocab_size=tok.vocab_size, block_size=T, n_layer=2, n_head=4, n_embd=128)
    model = GPT(config, tiling=Tiling(time=64, width=128))   # how tensors are tiled: one argument
    opt = AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)

    for step in range(STEPS):
        for g in opt.param_groups:
            g["lr"] = cosine_with_warmup(step, lr=3e-3, warmup=10, total=STEPS, min_lr=3e-4)
        x, y = data.batch("train", B, T, rng)     # (B, T) int arrays
        loss = model.loss(x, y)                   # submits the forward pass as tile tasks
        loss.backward()                           # ... and the backward pass, without waiting
        clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        if step % 10 == 0 or step == STEPS - 1:
            print(f"step {step:3d}  loss {float(loss):.3f}")   # reading the loss waits for it

    with tt.no_grad():
        x, y = data.batch("val", B, T, rng)
        print(f"validation loss {float(model.loss(x, y)):.3f}")

    # weights under Hugging Face GPT-2 names with the model's config, written atomically;
    # sample from it with `.venv/bin/tiletrain generate --ckpt-dir runs/example`
    checkpoint.save("runs/example/model.safetensors",
                    {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"},
                    {"config": vars(config)})
    model.save_pretrained("runs/example-hf")      # a Hugging Face folder (transformers loads it)
    sampling = GenerationConfig(max_new_tokens=80, do_sample=True, temperature=0.8, top_k=None)  # transformers' names
    print(sample_text(model, tok, "def ", sampling)[0][0])  # past the context: a sliding window
