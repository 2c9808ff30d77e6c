import numpy as np
import pytest

from tiletrain.data import ByteTokenizer, load_corpus, stdlib_sources


def test_tokenizer_round_trip():
    tok = ByteTokenizer()
    text = "tiles → tasks\n"
    ids = tok.encode(text)
    assert ids.dtype == np.int64 and ids.max() < 256 and tok.decode(ids) == text
    with pytest.raises(ValueError, match=r"\[0, 255\]"):
        tok.decode([300])


def test_default_corpus_is_the_stdlib_in_fixed_order():
    files = stdlib_sources()
    assert files == sorted(files) and any(f.name == "os.py" for f in files)
    c = load_corpus(max_bytes=200_000)
    assert len(c.train) + len(c.val) == 200_000 and len(c.val) == 20_000
    assert np.array_equal(c.train, load_corpus(max_bytes=200_000).train)


def test_batches_are_reproducible_and_shifted(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("abcdefghijklmnopqrstuvwxyz" * 20)
    c = load_corpus([f])
    x1, y1 = c.batch("train", 4, 8, np.random.default_rng(3))
    x2, y2 = c.batch("train", 4, 8, np.random.default_rng(3))
    assert np.array_equal(x1, x2) and np.array_equal(y1, y2)
    assert np.array_equal(x1[:, 1:], y1[:, :-1]) and x1.shape == (4, 8)


def test_bad_data(tmp_path):
    short = tmp_path / "s.txt"
    short.write_text("tiny")
    with pytest.raises(ValueError, match="needs at least 64"):
        load_corpus([short])
    bad = tmp_path / "b.txt"
    bad.write_bytes(b"ok" * 40 + b"\xff\xfe")
    with pytest.raises(ValueError, match="is not UTF-8 text"):
        load_corpus([bad])
    with pytest.raises(FileNotFoundError, match="data file not found"):
        load_corpus([tmp_path / "missing.txt"])
    c = load_corpus([tmp_path / "s.txt"] * 30)
    with pytest.raises(ValueError, match="too few for sequences"):
        c.batch("val", 2, 64, np.random.default_rng(0))
