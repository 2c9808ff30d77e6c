"""Build, train and sample a small Llama (RMSNorm, rotary embeddings, grouped-query attention,
SwiGLU) on the byte corpus with tiletrain's model API.

    .venv/bin/python examples/train_llama.py
"""
import numpy as np

import tiletrain as tt
from tiletrain.data import ByteTokenizer, load_corpus
from tiletrain.nn import Llama, LlamaConfig, Tiling
from tiletrain.optim import AdamW, clip_grad_norm_, cosine_with_warmup
from tiletrain.inference import GenerationConfig, sample_text

B, T, STEPS = 8, 64, 40
tok = ByteTokenizer()
data = load_corpus(max_bytes=2_000_000)           # the Python standard library's sources
rng = np.random.default_rng(0)

with tt.init():                                   # StarPU on every core
    config = LlamaConfig(vocab_size=tok.vocab_size, hidden_size=128, intermediate_size=352,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=T, tie_word_embeddings=True)
    model = Llama(config, tiling=Tiling(time=64, width=128))  # how tensors are tiled: one argument
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

    # Hugging Face LlamaForCausalLM names and config: transformers loads these unchanged
    weights, hf_config = model.state_dict(), model.hf_config()
    print(f"{len(weights)} tensors, e.g. {next(iter(weights))}; model_type {hf_config['model_type']}")
    sampling = GenerationConfig(max_new_tokens=80, do_sample=True, temperature=0.8, top_k=None)  # transformers' names
    print(sample_text(model, tok, "def ", sampling)[0][0])  # past the context: a sliding window
