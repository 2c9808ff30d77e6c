"""`tiletrain generate`: the cached path with --batch, --draft (greedy text unchanged),
--top-p, --eos, past the model's context (sliding window), a tokens/s line on stderr, and
bad options refused with `tiletrain: error:` (exit 2)."""
import re

import numpy as np
import pytest

import tiletrain as tt
from tiletrain.cli import main

from tiletrain.testing.tiny_hf import tiny_gpt2_folder, tiny_tokenizer  # noqa: E402

TEXT = "def add(a, b):\n    return a + b\n\nclass Tile:\n    pass\n" * 200


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    model = tiny_gpt2_folder(root / "model", vocab_size=300, n_positions=32, n_layer=2, n_embd=32, seed=1)
    draft = tiny_gpt2_folder(root / "draft", vocab_size=300, n_positions=32, n_layer=1, n_embd=16, seed=2)
    other = tiny_gpt2_folder(root / "other", vocab_size=310, n_positions=32, n_layer=1, n_embd=16, seed=2)
    tiny_tokenizer(model, TEXT, vocab_size=300)
    return model, draft, other


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _rate(err, tokens):
    m = re.search(r"^(\d+) tokens in [\d.]+ s: [\d.]+ tokens/s$", err, re.M)
    assert m, err
    assert int(m.group(1)) == tokens


def test_batch_draft_and_rate_line(folders, capsys):
    model, draft, _ = folders
    rc, greedy, err = _run(capsys, "generate", "--model", model, "--prompt", "class ", "--tokens", 12,
                           "--temperature", 0)
    assert rc == 0 and greedy.startswith("class "), err
    _rate(err, 12)
    rc, out, err = _run(capsys, "generate", "--model", model, "--prompt", "class ", "--tokens", 12,
                        "--temperature", 0, "--draft", draft, "--num-draft-tokens", 3)
    assert rc == 0 and out == greedy, err  # speculative greedy: the same text
    assert re.search(r"speculative decoding: [\d.]+ of 3 drafted tokens accepted per round", err)
    _rate(err, 12)
    rc, out, err = _run(capsys, "generate", "--model", model, "--prompt", "class ", "--tokens", 10, "--batch", 3,
                        "--top-p", 0.9, "--seed", 4)
    assert rc == 0, err
    samples = out.split("--- sample ")[1:]
    assert len(samples) == 3 and all(s.split("\n", 1)[1].startswith("class ") for s in samples)
    _rate(err, 30)


def test_eos_and_sliding_window(folders, capsys):
    model = folders[0]
    m = tt.nn.from_pretrained(model)  # on the tests' runtime (generate below reuses it, then stops it)
    tok = tt.data.Tokenizer.from_pretrained(model)
    prompt = tok.encode("def ")
    ids = m.generate(np.array([prompt]), 10, temperature=0)[0]
    eos = int(ids[len(prompt) + 4])  # the 5th new token
    cut = len(prompt) + list(ids[len(prompt):]).index(eos)
    rc, out, err = _run(capsys, "generate", "--model", model, "--prompt", "def ", "--tokens", 10, "--temperature",
                        0, "--eos", eos)
    assert rc == 0 and out == tok.decode([int(t) for t in ids[:cut]]) + "\n", err
    # 40 tokens after the prompt: past the 32 positions of the model
    rc, out, err = _run(capsys, "generate", "--model", model, "--prompt", "def ", "--tokens", 40)
    assert rc == 0 and out.startswith("def "), err
    _rate(err, 40)


@pytest.mark.parametrize("extra,message", [
    (["--top-p", "0"], "--top-p must be in (0, 1]"),
    (["--top-p", "1.5"], "--top-p must be in (0, 1]"),
    (["--num-draft-tokens", "0"], "--num-draft-tokens must be >= 1"),
    (["--batch", "0"], "--batch must be >= 1"),
    (["--eos", "class Tile"], "is not one token of the tokenizer"),
    (["--eos", "300"], "eos_token_id must be"),
    (["--draft", "OTHER"], "draft's vocab_size 310 differs from the model's 300"),
])
def test_bad_options(folders, capsys, extra, message):
    model, _, other = folders
    extra = [str(other) if e == "OTHER" else e for e in extra]
    rc, _, err = _run(capsys, "generate", "--model", model, "--tokens", 3, *extra)
    assert rc == 2 and err.startswith("tiletrain: error:") and message in err, err


def test_generate_starts_the_decode_policy_unless_told(folders, capsys, monkeypatch):
    """`tiletrain generate` starts its own runtime with tt-cp (idle workers nap: the submitting
    thread keeps a core) unless --sched or STARPU_SCHED says otherwise."""
    model = folders[0]
    if tt.is_initialized():
        tt.shutdown()
    seen = []
    real = tt.init
    monkeypatch.setattr(tt, "init", lambda *a, **k: seen.append(k.get("sched")) or real(*a, **k))
    monkeypatch.delenv("STARPU_SCHED", raising=False)
    for extra, want in (([], "tt-cp"), (["--sched", "eager"], "eager")):
        rc, _, err = _run(capsys, "generate", "--model", model, "--tokens", 3, "--temperature", 0, *extra)
        assert rc == 0, err
        assert seen[-1] == want
        assert not tt.is_initialized()          # generate stops the runtime it started
    monkeypatch.setenv("STARPU_SCHED", "eager")
    rc, _, err = _run(capsys, "generate", "--model", model, "--tokens", 3, "--temperature", 0)
    assert rc == 0 and seen[-1] is None, err   # STARPU_SCHED decides
