"""Hugging Face model folders: tiletrain.nn.from_pretrained reads what transformers'
save_pretrained writes (one file or shards), save_pretrained writes what
AutoModelForCausalLM.from_pretrained reads, and bad folders give errors naming the problem."""
import json

import numpy as np
import pytest

import tiletrain.nn as ttnn
from tiletrain.nn import GPT, GPTConfig, Tiling

import torch
import transformers
from safetensors.numpy import load_file, save_file  # noqa: E402

FINE = Tiling(batch=1, time=4, width=8, hidden=24, vocab=8)  # leftover tiles on every axis
IDX = np.array([[1, 5, 22, 7, 0, 3, 9, 11, 2, 14, 6], [21, 4, 4, 8, 19, 1, 0, 13, 17, 3, 10]])


def _hf_model(seed=0):
    cfg = transformers.GPT2Config(vocab_size=23, n_positions=16, n_layer=2, n_head=2, n_embd=16,
                                  bos_token_id=0, eos_token_id=0)
    torch.manual_seed(seed)
    return transformers.GPT2LMHeadModel(cfg).double().eval()


def _hf_logits(hf):
    with torch.no_grad():
        return hf(torch.tensor(IDX)).logits.numpy()


@pytest.fixture
def folder(tmp_path):
    hf = _hf_model()
    hf.save_pretrained(tmp_path / "gpt2")
    return tmp_path / "gpt2", _hf_logits(hf)


@pytest.mark.parametrize("shard", [None, "4KB"])
def test_from_pretrained_reads_transformers_folders(tmp_path, shard):
    hf = _hf_model()
    kw = {} if shard is None else {"max_shard_size": shard}
    hf.save_pretrained(tmp_path / "m", **kw)
    files = sorted(p.name for p in (tmp_path / "m").iterdir())
    if shard:
        assert "model.safetensors.index.json" in files and len([f for f in files if f.endswith(".safetensors")]) > 2
    else:
        assert "model.safetensors" in files
    model = ttnn.from_pretrained(tmp_path / "m", dtype=np.float64, tiling=FINE)
    assert isinstance(model, GPT) and model.config == GPTConfig(23, 16, 2, 2, 16)
    np.testing.assert_allclose(model(IDX).detach().numpy(), _hf_logits(hf), rtol=1e-9, atol=1e-12)


def test_from_pretrained_single_file_and_gpt_classmethod(folder):
    path, want = folder
    for model in (ttnn.from_pretrained(path / "model.safetensors", dtype=np.float64),
                  GPT.from_pretrained(path, dtype=np.float64, tiling=FINE)):
        np.testing.assert_allclose(model(IDX).detach().numpy(), want, rtol=1e-9, atol=1e-12)
    assert ttnn.from_pretrained(path, dropout=0.1).config.dropout == 0.1  # config overrides
    assert ttnn.from_pretrained(path).dtype == np.float32


def test_save_pretrained_loads_in_transformers(tmp_path):
    model = GPT(GPTConfig(23, 16, 2, 2, 16), FINE, dtype=np.float64, seed=4)
    out = model.save_pretrained(tmp_path / "out")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]  # atomic: no temporaries
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "gpt2" and cfg["architectures"] == ["GPT2LMHeadModel"]
    assert "lm_head.weight" not in load_file(out / "model.safetensors")  # tied, stored once as transformers does
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float64).eval()
    assert type(hf).__name__ == "GPT2LMHeadModel"
    assert hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr()
    np.testing.assert_allclose(_hf_logits(hf), model(IDX).detach().numpy(), rtol=1e-9, atol=1e-12)
    # and back: a round trip is exact
    back = ttnn.from_pretrained(out, dtype=np.float64, tiling=FINE)
    np.testing.assert_array_equal(back(IDX).detach().numpy(), model(IDX).detach().numpy())


def _edit_config(path, **change):
    cfg = json.loads((path / "config.json").read_text())
    for k, v in change.items():
        if v is None:
            cfg.pop(k)
        else:
            cfg[k] = v
    (path / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("change,message", [
    (dict(n_embd=None), "no 'n_embd'"),
    (dict(model_type="bert"), "model_type 'bert' is not supported"),
    (dict(model_type=None), "no 'model_type'"),
    (dict(activation_function="relu"), "activation_function='relu'"),
    (dict(n_inner=32), "n_inner=32"),
    (dict(scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx"),
    (dict(reorder_and_upcast_attn=True), "reorder_and_upcast_attn"),
    (dict(n_layer=3), "missing keys: transformer.h.2"),
])
def test_bad_config(folder, change, message):
    path, _ = folder
    _edit_config(path, **change)
    with pytest.raises(ValueError, match=message):
        ttnn.from_pretrained(path)


def test_bad_tensors(folder):
    path, _ = folder
    sd = load_file(path / "model.safetensors")
    key = "transformer.h.1.attn.c_attn.weight"
    bad = dict(sd, **{key: np.ascontiguousarray(sd[key].T)})  # nn.Linear's layout instead of Conv1D's
    save_file(bad, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=rf"{key}: shape \(48, 16\) in the state dict, \(16, 48\)"):
        ttnn.from_pretrained(path)
    save_file({k: v for k, v in sd.items() if k != "transformer.ln_f.bias"}, path / "model.safetensors")
    with pytest.raises(ValueError, match="missing keys: transformer.ln_f.bias"):
        ttnn.from_pretrained(path)
    save_file(dict(sd, extra=np.zeros(2)), path / "model.safetensors")
    with pytest.raises(ValueError, match="unexpected keys: extra"):
        ttnn.from_pretrained(path)
    (path / "model.safetensors").write_bytes(b"\x00" * 20)
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        ttnn.from_pretrained(path)
    (path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="no model.safetensors or model.safetensors.index.json"):
        ttnn.from_pretrained(path)
    (path / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        ttnn.from_pretrained(path)
    with pytest.raises(FileNotFoundError, match="neither a model folder nor a .safetensors file"):
        ttnn.from_pretrained(path / "nothing")


def test_missing_shard(tmp_path):
    _hf_model().save_pretrained(tmp_path / "m", max_shard_size="4KB")
    index = json.loads((tmp_path / "m" / "model.safetensors.index.json").read_text())
    shard = sorted(set(index["weight_map"].values()))[0]
    (tmp_path / "m" / shard).unlink()
    with pytest.raises(FileNotFoundError, match=f"shard {shard} listed in .* is missing"):
        ttnn.from_pretrained(tmp_path / "m")


def test_gpt_from_pretrained_refuses_other_model_types(folder):
    path, _ = folder
    _edit_config(path, model_type="llama")
    with pytest.raises(ValueError, match="model_type 'llama', not 'gpt2'"):
        GPT.from_pretrained(path)


def test_from_hf_takes_a_config_json_dict(folder):
    path, want = folder
    cfg = json.loads((path / "config.json").read_text())
    model = GPT.from_hf(load_file(path / "model.safetensors"), config=cfg, tiling=FINE, dtype=np.float64)
    np.testing.assert_allclose(model(IDX).detach().numpy(), want, rtol=1e-9, atol=1e-12)


def test_bfloat16_folder(tmp_path):
    """transformers folders are often bfloat16: read (as float32, exactly) like any other."""
    hf = _hf_model().to(torch.bfloat16)
    hf.save_pretrained(tmp_path / "bf16")
    model = ttnn.from_pretrained(tmp_path / "bf16", dtype=np.float64, tiling=FINE)
    want = hf.float().double()
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v, want.state_dict()[k].numpy(), err_msg=k)


def test_save_pretrained_over_a_sharded_folder(tmp_path):
    _hf_model().save_pretrained(tmp_path / "m", max_shard_size="4KB")
    model = GPT(GPTConfig(23, 16, 2, 2, 16), FINE, dtype=np.float64, seed=7)
    model.save_pretrained(tmp_path / "m")
    left = sorted(p.name for p in (tmp_path / "m").iterdir())
    assert left == ["config.json", "generation_config.json", "model.safetensors"]
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "m", dtype=torch.float64).eval()
    np.testing.assert_allclose(_hf_logits(hf), model(IDX).detach().numpy(), rtol=1e-9, atol=1e-12)


def _hf_llama(tie: bool, seed=0):
    cfg = transformers.LlamaConfig(vocab_size=23, hidden_size=16, intermediate_size=40, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
                                   tie_word_embeddings=tie, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("tie,shard", [(False, None), (True, "2KB")])
def test_llama_folders_both_ways(tmp_path, tie, shard):
    """A Llama folder transformers writes (grouped-query attention; tied or untied; one file or
    shards) loads with its logits, and save_pretrained writes one transformers loads back."""
    hf = _hf_llama(tie)
    hf.save_pretrained(tmp_path / "m", **({} if shard is None else {"max_shard_size": shard}))
    if shard:
        assert (tmp_path / "m" / "model.safetensors.index.json").is_file()
    model = ttnn.from_pretrained(tmp_path / "m", tiling=FINE)
    assert isinstance(model, ttnn.Llama) and model.config.num_key_value_heads == 2
    assert model.config.tie_word_embeddings == tie
    np.testing.assert_allclose(model(IDX).detach().numpy(), _hf_logits(hf), rtol=1e-4, atol=1e-5)
    out = model.save_pretrained(tmp_path / "out")
    back = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(back).__name__ == "LlamaForCausalLM" and back.config.tie_word_embeddings == tie
    np.testing.assert_allclose(_hf_logits(back), _hf_logits(hf), rtol=0, atol=0)  # the same weights, exactly
