"""The CLI with Hugging Face folders: `train --init-from` -> `export` -> transformers; `train
--tokenizer`; `generate --model` and of a Python-API checkpoint; overwrite refusal; bad input
refused with `tiletrain: error:` (exit 2); every option has help text and one default.
(A repeated option: argparse keeps the last, so TINY's values can be overridden after it.)"""
import argparse
import json

import numpy as np
import pytest

import tiletrain as tt
from tiletrain import checkpoint as ck
from tiletrain.cli import build_parser, main

from tiletrain.testing.tiny_hf import tiny_gpt2_folder, tiny_tokenizer  # noqa: E402

TEXT = ("def add(a, b):\n    return a + b\n\nclass Tile:\n    pass\n" * 300) + "naïve café 😀\n"
TINY = ["--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--seq-len", "16", "--batch", "2", "--steps", "2",
        "--eval-every", "2", "--eval-batches", "1", "--sample-tokens", "0", "--no-progress"]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILETRAIN_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def corpus(tmp_path):
    f = tmp_path / "corpus.txt"
    f.write_text(TEXT)
    return str(f)


@pytest.fixture
def hf_folder(tmp_path):
    """A transformers GPT-2 folder with a 300-token byte-level BPE tokenizer.json."""
    path = tiny_gpt2_folder(tmp_path / "hf", vocab_size=300, n_positions=32, n_layer=2)
    tiny_tokenizer(path, TEXT, vocab_size=300)
    return path


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _hf_logits(folder, idx):
    import torch
    import transformers
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64).eval()
    with torch.no_grad():
        return hf(torch.tensor(idx)).logits.numpy()


def test_init_from_train_export_transformers(tmp_path, corpus, hf_folder, capsys):
    """Fine-tune 3 steps at a negligible learning rate: the exported folder gives the original
    model's logits in transformers (so --init-from loaded it and export wrote it faithfully),
    and its tokenizer is the folder's."""
    import transformers
    ckd, out = tmp_path / "ck", tmp_path / "exported"
    rc, o, e = _run(capsys, "train", "--init-from", hf_folder, "--data", corpus, "--steps", 3, "--seq-len", 16,
                    "--batch", 2, "--lr", 1e-12, "--min-lr", 0, "--warmup", 0, "--weight-decay", 0,
                    "--dtype", "float64", "--eval-every", 3, "--eval-batches", 1, "--sample-tokens", 4,
                    "--no-progress", "--ckpt-dir", ckd)
    assert rc == 0, e
    assert f"gpt2 from {hf_folder}" in o and "vocab_size 300" in o and "step 3: train loss" in o + e
    meta = ck.load(ckd / ck.CHECKPOINT_NAME)[1]
    assert meta["model_type"] == "gpt2" and meta["tokenizer"] == (hf_folder / "tokenizer.json").read_text() \
        or json.loads(meta["tokenizer"]) == json.loads((hf_folder / "tokenizer.json").read_text())
    rc, o, e = _run(capsys, "export", "--ckpt-dir", ckd, "--out", out)
    assert rc == 0 and "at step 3" in o, e
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    idx = np.random.default_rng(0).integers(0, 300, (2, 13))
    np.testing.assert_allclose(_hf_logits(out, idx), _hf_logits(hf_folder, idx), rtol=1e-9, atol=1e-9)
    hf_tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(out / "tokenizer.json"))
    assert hf_tok.encode("class Tile:") == tt.data.Tokenizer.from_pretrained(hf_folder).encode("class Tile:")
    # exporting again into the same folder is refused unless --overwrite
    rc, _, e = _run(capsys, "export", "--ckpt-dir", ckd, "--out", out)
    assert rc == 2 and "already holds a model" in e and "--overwrite" in e
    assert _run(capsys, "export", "--ckpt-dir", ckd, "--out", out, "--overwrite")[0] == 0
    # generate from both: the folder's tokenizer decodes
    for src in (["--model", out], ["--ckpt-dir", ckd]):
        rc, o, e = _run(capsys, "generate", *src, "--prompt", "class ", "--tokens", 5, "--temperature", 0)
        assert rc == 0 and o.startswith("class "), e


def test_train_with_tokenizer_and_resume_checks(tmp_path, corpus, capsys):
    tok = tiny_tokenizer(tmp_path / "tok", TEXT, vocab_size=280)
    ckd = tmp_path / "ck"
    rc, o, e = _run(capsys, "train", "--data", corpus, "--tokenizer", tok, *TINY, "--ckpt-dir", ckd)
    assert rc == 0 and "vocab_size 280" in o, e
    assert len(list((tmp_path / "cache" / "tokens").iterdir())) == 1  # the tokenised corpus, cached
    meta = ck.load(ckd / ck.CHECKPOINT_NAME)[1]
    assert meta["config"]["vocab_size"] == 280 and meta["tokenizer"]
    # resuming with another tokenizer (here: bytes) is refused
    rc, _, e = _run(capsys, "train", "--data", corpus, *TINY, "--steps", 3, "--ckpt-dir", ckd, "--resume")
    assert rc == 2 and "different configuration: vocab_size checkpoint=280 requested=256" in e
    rc, o, e = _run(capsys, "generate", "--ckpt-dir", ckd, "--prompt", "def ", "--tokens", 3)
    assert rc == 0 and o.startswith("def "), e


def test_refuses_to_overwrite_a_checkpoint(tmp_path, corpus, capsys):
    ckd = tmp_path / "ck"
    assert _run(capsys, "train", "--data", corpus, *TINY, "--ckpt-dir", ckd)[0] == 0
    before = (ckd / ck.CHECKPOINT_NAME).read_bytes()
    rc, _, e = _run(capsys, "train", "--data", corpus, *TINY, "--ckpt-dir", ckd)
    assert rc == 2 and e.startswith(f"tiletrain: error: --ckpt-dir {ckd} already holds a checkpoint")
    assert "--resume" in e and "--overwrite" in e
    assert (ckd / ck.CHECKPOINT_NAME).read_bytes() == before
    with pytest.raises(SystemExit) as exc:  # argparse: the two exclude each other
        main(["train", "--ckpt-dir", str(ckd), "--resume", "--overwrite"])
    assert exc.value.code == 2
    rc, o, e = _run(capsys, "train", "--data", corpus, *TINY, "--seed", 1, "--ckpt-dir", ckd, "--overwrite")
    assert rc == 0 and (ckd / ck.CHECKPOINT_NAME).read_bytes() != before, e


def test_generate_reads_a_python_api_checkpoint(tmp_path, capsys):
    """What examples/train_gpt.py writes: weights + {"config": ...} under any file name."""
    from tiletrain.nn import GPT, GPTConfig
    config = GPTConfig(vocab_size=256, block_size=16, n_layer=1, n_head=2, n_embd=16)
    with tt.init():
        model = GPT(config, seed=1)
        sd = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
        ck.save(tmp_path / "run" / "model.safetensors", sd, {"config": vars(config)})  # streamed from the tiles
        sd = {k: v.numpy() for k, v in sd.items()}
    tt.shutdown()
    for where in (tmp_path / "run", tmp_path / "run" / "model.safetensors"):
        rc, o, e = _run(capsys, "generate", "--ckpt-dir", where, "--prompt", "ab", "--tokens", 4, "--temperature", 0)
        assert rc == 0 and o.startswith("ab") and len(o.rstrip("\n")) >= 3, e
    ck.save(tmp_path / "run" / "other.safetensors", sd, {"config": vars(config)})
    rc, _, e = _run(capsys, "generate", "--ckpt-dir", tmp_path / "run")
    assert rc == 2 and "several .safetensors files (model.safetensors, other.safetensors)" in e


def test_bad_hf_input(tmp_path, corpus, hf_folder, capsys):
    big = tiny_tokenizer(tmp_path / "big", TEXT, vocab_size=400)
    rc, _, e = _run(capsys, "train", "--init-from", hf_folder, "--tokenizer", big, "--data", corpus, *TINY)
    assert rc == 2 and "vocabulary of 400 tokens, larger than the model's vocab_size 300" in e
    rc, _, e = _run(capsys, "generate", "--model", hf_folder, "--tokenizer", big)
    assert rc == 2 and "400 tokens, more than the model's vocab_size 300" in e
    rc, _, e = _run(capsys, "train", "--init-from", hf_folder, "--data", corpus, *TINY, "--seq-len", 64)
    assert rc == 2 and "--seq-len 64 exceeds the context length 32" in e
    cfg = json.loads((hf_folder / "config.json").read_text())
    (hf_folder / "config.json").write_text(json.dumps(dict(cfg, model_type="t5")))
    rc, _, e = _run(capsys, "train", "--init-from", hf_folder, "--data", corpus, *TINY)
    assert rc == 2 and "model_type 't5' is not supported" in e
    rc, _, e = _run(capsys, "generate", "--ckpt-dir", hf_folder)
    assert rc == 2 and "is a Hugging Face model folder" in e and "--model" in e
    rc, _, e = _run(capsys, "train", "--init-from", tmp_path / "nowhere", "--data", corpus, *TINY)
    assert rc == 2 and "neither a model folder nor a .safetensors file" in e
    # a folder without tokenizer.json and a vocabulary smaller than bytes': --tokenizer needed
    small = tiny_gpt2_folder(tmp_path / "small", vocab_size=50)
    rc, _, e = _run(capsys, "generate", "--model", small)
    assert rc == 2 and "pass --tokenizer" in e


def _subcommands(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub
                yield from ((f"{name} {n}", s) for n, s in _subcommands(sub))


def test_every_option_has_help_and_one_default():
    parsers = dict(_subcommands(build_parser()))
    for name in ("train", "generate", "export", "bench sched"):
        p = parsers[name]
        for action in p._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"{name} {action.option_strings or action.dest}: no help text"
        text = p.format_help()
        for block in text.split("\n  -")[1:]:  # one block per option
            assert block.count("(default") <= 1, f"{name}: {block}"
    assert "(default: 4)" in parsers["train"].format_help()


def test_llama_from_scratch_export_and_fine_tune(tmp_path, corpus, capsys):
    """--arch llama (grouped-query attention) trains, exports a folder transformers loads with
    tiletrain's logits, and that folder fine-tunes with --init-from."""
    import torch
    import transformers
    ckd, out = tmp_path / "ck", tmp_path / "llama-hf"
    rc, o, e = _run(capsys, "train", *TINY, "--arch", "llama", "--n-head", 4, "--n-kv-head", 2, "--data", corpus,
                    "--ckpt-dir", ckd)
    assert rc == 0, e
    assert _run(capsys, "export", "--ckpt-dir", ckd, "--out", out)[0] == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["num_key_value_heads"] == 2 and cfg["intermediate_size"] == 128
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(hf).__name__ == "LlamaForCausalLM"
    idx = np.random.default_rng(1).integers(0, 256, (2, 11))
    with torch.no_grad():
        want = hf(torch.tensor(idx)).logits.numpy()
    with tt.init(ncpu=1):
        np.testing.assert_allclose(tt.nn.from_pretrained(out)(idx).detach().numpy(), want, rtol=1e-4, atol=1e-4)
    rc, o, e = _run(capsys, "train", *TINY, "--init-from", out, "--data", corpus, "--ckpt-dir", tmp_path / "ft")
    assert rc == 0 and f"llama from {out}" in o, e
    rc, _, e = _run(capsys, "train", *TINY, "--arch", "llama", "--n-head", 4, "--n-kv-head", 3, "--data", corpus)
    assert rc == 2 and "--n-kv-head 3 must divide --n-head 4" in e
