"""The model contract (tiletrain/nn/causal_lm.py): a new architecture is its module and one
registration.  A tiny model defined here -- token embedding without positions, the decoder
Block with its own attention and MLP -- is registered, and then `tiletrain train --arch`,
checkpoints, `tiletrain generate`, the cached generate and the pipeline placement take it
with no other change."""
from dataclasses import dataclass

import numpy as np
import pytest

import tiletrain as tt
import tiletrain.functional as F
from tiletrain import nn
from tiletrain.cli import main
from tiletrain.nn import MODELS, CausalLM, DecoderBlock, LMHead, load_model, register_model
from tiletrain.parallel import plan


@dataclass
class TinyConfig:
    vocab_size: int
    block_size: int
    n_layer: int
    n_head: int
    n_embd: int
    recompute: str = "none"


class TinyAttention(nn.Module):
    def __init__(self, c: TinyConfig, t, kw):
        super().__init__()
        self.qkv = nn.Linear(c.n_embd, 3 * c.n_embd, bias=False, tiles=(t.width, t.width), **kw)
        self.out = nn.Linear(c.n_embd, c.n_embd, bias=False, tiles=(t.width, t.width), **kw)
        self.n_head = c.n_head

    def forward(self, x, cache=None, layer=0, pos=0):
        qkv = self.qkv(x)                                                                # (B, T, 3C)
        q, k, v = (F.split_heads(qkv, self.n_head, part=i, nparts=3) for i in range(3))  # (B, nh, T, hs)
        y = (F.scaled_dot_product_attention(q, k, v, is_causal=True) if cache is None
             else cache.attend(layer, q, k, v, pos))
        return self.out(F.merge_heads(y))                                                # (B, T, C)


class TinyMLP(nn.Module):
    def __init__(self, c: TinyConfig, t, kw):
        super().__init__()
        self.up = nn.Linear(c.n_embd, 4 * c.n_embd, tiles=(t.hidden, t.width), **kw)
        self.down = nn.Linear(4 * c.n_embd, c.n_embd, tiles=(t.width, t.hidden), **kw)

    def forward(self, x):
        return self.down(F.relu(self.up(x)))


class TinyBlock(DecoderBlock):
    def __init__(self, c: TinyConfig, t, kw):
        super().__init__(c, norm_1=nn.LayerNorm(c.n_embd, tile=t.width, dtype=kw["dtype"]),
                         attn=TinyAttention(c, t, kw),
                         norm_2=nn.LayerNorm(c.n_embd, tile=t.width, dtype=kw["dtype"]), mlp=TinyMLP(c, t, kw))

    @staticmethod
    def add_norm(x, r, ln):
        return F.add_layer_norm(x, r, ln.weight, ln.bias, ln.eps)


class TinyLM(CausalLM):
    config_class = TinyConfig
    model_type = "tiny-test"
    train_sizes = ("n_layer", "n_head", "n_embd")

    def __init__(self, config: TinyConfig, tiling=None, dtype=np.float32, seed: int = 0):
        super().__init__(config, tiling, dtype)
        t, kw = self.tiling, dict(dtype=self.dtype, rng=np.random.default_rng(seed))
        self.wte = nn.Embedding(config.vocab_size, config.n_embd, tiles=(t.vocab, t.width), std=0.02, **kw)
        self.h = nn.ModuleList([TinyBlock(config, t, kw) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, tile=t.width, dtype=self.dtype)
        self.lm_head = LMHead(self.wte.weight)

    blocks = property(lambda self: self.h)
    final_norm = property(lambda self: self.ln_f)
    embeddings = property(lambda self: (self.wte,))

    def embed(self, idx, pos):
        return self.wte(idx)

    @classmethod
    def train_config(cls, vocab_size, block_size, n_layer, n_head, n_embd):
        return TinyConfig(vocab_size, block_size, n_layer, n_head, n_embd)


@pytest.fixture
def tiny():
    register_model(TinyLM)
    yield TinyLM
    del MODELS[TinyLM.model_type]


def test_a_registered_model_trains_generates_and_is_placed(tiny, tmp_path, capsys):
    corpus, ckpt = tmp_path / "corpus.txt", tmp_path / "ck"
    corpus.write_text("def add(a, b):\n    return a + b\n" * 300)
    tt.shutdown()  # `tiletrain train` starts its own runtime
    rc = main(["train", "--arch", "tiny-test", "--n-layer", "2", "--n-head", "2", "--n-embd", "16", "--seq-len", "8",
               "--batch", "2", "--steps", "2", "--eval-every", "1", "--eval-batches", "1", "--sample-tokens", "4",
               "--dtype", "float64", "--data", str(corpus), "--ckpt-dir", str(ckpt), "--no-progress"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "model: tiny-test from scratch" in out and "sample:\ndef " in out
    assert main(["generate", "--ckpt-dir", str(ckpt), "--tokens", "3", "--temperature", "0"]) == 0, \
        capsys.readouterr().err

    tt.init(ncpu=2)
    model, _, meta = load_model(ckpt_dir=ckpt)
    assert type(model) is TinyLM and meta["model_type"] == "tiny-test" and model.dtype == np.float64
    ids = np.array([[5, 6, 7], [8, 9, 10]])
    seq = ids
    for _ in range(4):  # greedy without a cache: the whole sequence through forward
        seq = np.concatenate([seq, model(seq).detach().numpy()[:, -1].argmax(-1)[:, None]], axis=1)
    np.testing.assert_array_equal(model.generate(ids, 4, temperature=0), seq)
    pl = plan(model, "pipeline", world=2)  # the embedding with the first block, the head with the last
    assert dict(pl.modules) == {"wte": 0, "h.0": 0, "h.1": 1, "ln_f": 1, "lm_head": 1}


def test_tiling_defaults_and_a_wide_width_tile_widens_the_hidden_one():
    """Tiling.resolve: the width tile the largest of whole heads up to 1024 dividing n_embd, the
    MLP's hidden tile min(4 n_embd, 1024), unless a given width tile is larger (the MLP's weights
    then in tiles as large: `--tiles B,T,4096` for a 4096-wide model)."""
    from tiletrain.nn import GPTConfig, Tiling
    small = Tiling().resolve(GPTConfig(vocab_size=256, block_size=64, n_layer=1, n_head=4, n_embd=256))
    assert (small.width, small.hidden, small.vocab) == (256, 1024, 256)
    wide = GPTConfig(vocab_size=256, block_size=64, n_layer=1, n_head=4, n_embd=4096)
    assert (Tiling().resolve(wide).width, Tiling().resolve(wide).hidden) == (1024, 1024)
    assert Tiling.from_tiles((4, 128, 4096)).resolve(wide).hidden == 4096
    assert Tiling(width=2048).resolve(wide).hidden == 2048
    assert Tiling(width=4096, hidden=512).resolve(wide).hidden == 512  # a given hidden tile is kept
    with pytest.raises(ValueError, match="multiple of the head size 1024"):
        Tiling(width=1536).resolve(wide)
