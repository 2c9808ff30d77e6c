"""Pipeline serving (tiletrain.inference.serving.generate_pipeline) of a tiny random GPT or
Llama (float64), greedy; also the single-process cached generate as the reference.
argv: out tag model(gpt|llama) streams [new_tokens [trained]] (trained: the model placed
and a backward run before serving, so its parameters have gradients).  Saves
<out>/<tag>-rank<r>.npz with the greedy tokens, the reference, tokens sampled with a fixed
seed, tokens sampled with top-k, top-p and an eos id that ends some rows early ("filtered",
and "filtered_ref": generate's before placement), speculative greedy tokens with an
unplaced 1-layer draft sharing the model's embeddings, final norm and head ("spec", and
the accepted tokens per round), speculative sampled tokens with one stream
("spec_sampled", and "spec_sampled_ref": generate's before placement), and the owner ranks
of the first and last layers' parameters and of the first and last layers' key/value cache
tiles.  Tag 'bad' (a layout that does not fit) prints FAULT-AT before the first pipelined call."""
import sys
import time

import numpy as np

import tiletrain as tt
from tiletrain.inference import KVCache, generate
from tiletrain.inference.serving import generate_pipeline
from tiletrain.nn import GPT, GPTConfig, Llama, LlamaConfig, Tiling
from tiletrain.parallel import place

out, tag, kind, streams = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
new = int(sys.argv[5]) if len(sys.argv) > 5 else 8
trained = "trained" in sys.argv[6:]  # placed and a backward run first: parameters have gradients
rt = tt.init()
r, w = tt.rank(), tt.world_size()
if kind == "gpt":
    model = GPT(GPTConfig(vocab_size=40, block_size=32, n_layer=3, n_head=2, n_embd=16), Tiling(time=4, width=8),
                dtype=np.float64, seed=1)
    first, last = model.transformer.h[0].attn.c_attn.weight, model.transformer.h[-1].attn.c_attn.weight
    draft = GPT(GPTConfig(vocab_size=40, block_size=32, n_layer=1, n_head=2, n_embd=16), Tiling(time=4, width=8),
                dtype=np.float64, seed=9)
else:
    model = Llama(LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=3,
                              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32),
                  Tiling(time=4, width=8), dtype=np.float64, seed=1)
    first, last = model.model.layers[0].self_attn.q_proj.weight, model.model.layers[-1].self_attn.q_proj.weight
    draft = Llama(LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32),
                  Tiling(time=4, width=8), dtype=np.float64, seed=9)
# a random draft (nearly) never agrees: the model's embeddings, final norm and head
draft.load_state_dict({k: v for k, v in model.state_dict().items() if ".layers." not in k and ".h." not in k},
                      strict=False)
prompts = np.random.default_rng(7).integers(0, 40, (4, 5))
ref = generate(model, prompts, new, temperature=0, time_tile=4)  # before placement: every tile on rank 0
sampling = dict(temperature=1.1, top_k=12, top_p=0.9, seed=6, time_tile=4)
free = generate(model, prompts, new, **sampling)
eos = [int(e) for e in free[0, 6:8] if not all(e in row[5:] for row in free)][:1]  # ends row 0, not all rows
filtered_ref = generate(model, prompts, new, eos_token_id=eos, **sampling)
speculative = dict(draft=draft, num_draft_tokens=3, time_tile=4)
spec_sampled_ref = generate(model, prompts, new, temperature=1.3, seed=8, **speculative)
if trained:
    place(model, "pipeline")
    model.loss(prompts[:, :-1], prompts[:, 1:]).backward()
if tag == "bad":  # the call below is rejected: the test times the job's exit from here
    print(f"FAULT-AT {time.time():.3f}", file=sys.stderr, flush=True)
got, stats = generate_pipeline(model, prompts, new, streams=streams, time_tile=4, return_stats=True)
sampled = generate_pipeline(model, prompts, new, streams=streams, temperature=1.3, seed=5, time_tile=4)
filtered = generate_pipeline(model, prompts, new, streams=streams, eos_token_id=eos, **sampling)
spec, spec_stats = generate_pipeline(model, prompts, new, streams=streams, return_stats=True, **speculative)
spec_sampled = generate_pipeline(model, prompts, new, temperature=1.3, seed=8, **speculative)
# where a fresh cache's tiles go: the layer's stage
cache = KVCache(model.config.n_layer, 6, 4)
with tt.no_grad():
    model.forward_cached(prompts[:, :5], cache, 0).numpy()
np.savez(f"{out}/{tag}-rank{r}.npz", got=got, ref=ref, sampled=sampled, stages=stats.stages, streams=stats.streams,
         filtered=filtered, filtered_ref=filtered_ref, eos=eos, spec=spec, accepted=spec_stats.accepted,
         spec_sampled=spec_sampled, spec_sampled_ref=spec_sampled_ref,
         owner_first=first.owners().max(), owner_last=last.owners().max(),
         cache_first=cache.k[0].owners().max(), cache_last=cache.k[-1].owners().max())
print(f"rank {r}/{w} {kind} streams={streams}: {stats}", flush=True)
tt.shutdown()
