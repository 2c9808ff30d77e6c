"""Tokenizers: a tokenizer.json gives the ids transformers gives; the byte tokenizer has the
same interface; corpora tokenised with a tokenizer.json are cached by content."""
import numpy as np
import pytest

from tiletrain.data import ByteTokenizer, Tokenizer, cache_dir, load_corpus

from tiletrain.testing.tiny_hf import tiny_tokenizer  # noqa: E402

TRAIN_TEXT = "def add(a, b):\n    return a + b\n\nclass Tile:\n    pass\n" * 50 + "naïve café — 東京 😀 3.14159\n"
MIXED = "def tiles(x):  # naïve café — 東京 😀\n\treturn [x ** 2 for x in range(10)]\n\n  trailing  \n"


@pytest.fixture
def tok_path(tmp_path):
    return tiny_tokenizer(tmp_path / "tok", TRAIN_TEXT, vocab_size=300)


def test_ids_equal_transformers(tok_path):
    import transformers
    tok = Tokenizer.from_pretrained(tok_path.parent)   # the folder, or the file itself
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tok_path))
    ids = tok.encode(MIXED)
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
    assert ids == hf.encode(MIXED) and len(ids) < len(MIXED.encode())  # merges were used
    assert tok.decode(ids) == hf.decode(ids) == MIXED
    assert tok.vocab_size == len(hf) == 300
    assert Tokenizer.from_pretrained(tok_path).encode(MIXED) == ids
    assert Tokenizer.from_str(tok.to_str()).fingerprint == tok.fingerprint


def test_byte_tokenizer_same_interface():
    b = ByteTokenizer()
    assert b.vocab_size == 256 and b.decode(b.encode(MIXED)) == MIXED and b.to_str() is None
    assert list(b.encode("ab")) == [97, 98]


def test_bad_tokenizers(tmp_path, tok_path):
    with pytest.raises(FileNotFoundError, match="no tokenizer.json at"):
        Tokenizer.from_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Tokenizer.from_pretrained(tmp_path / "x.json")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a valid tokenizer.json"):
        Tokenizer.from_pretrained(tmp_path / "bad.json")
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 300\)"):
        Tokenizer.from_pretrained(tok_path).decode([300])


def test_corpus_tokenised_and_cached(tmp_path, tok_path, monkeypatch):
    monkeypatch.setenv("TILETRAIN_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "c.txt"
    f.write_text(TRAIN_TEXT)
    tok = Tokenizer.from_pretrained(tok_path)
    c = load_corpus([f], val_fraction=0.1, tokenizer=tok)
    ids = np.concatenate([c.train, c.val])
    assert ids.dtype == np.int64 and tok.decode(ids) == TRAIN_TEXT
    cached = list(cache_dir().iterdir())
    assert len(cached) == 1 and np.array_equal(np.load(cached[0]), ids)
    calls = []
    monkeypatch.setattr(Tokenizer, "encode", lambda *a, **k: calls.append(1))
    again = load_corpus([f], val_fraction=0.1, tokenizer=tok)  # from the cache: nothing encoded
    assert not calls and np.array_equal(again.train, c.train)
    f.write_text(TRAIN_TEXT + "more")  # new content: a new key
    monkeypatch.undo()
    monkeypatch.setenv("TILETRAIN_CACHE", str(tmp_path / "cache"))
    load_corpus([f], val_fraction=0.1, tokenizer=tok)
    assert len(list(cache_dir().iterdir())) == 2


def test_a_damaged_cache_entry_is_rebuilt_without_allocating_its_claim(tmp_path, tok_path, monkeypatch):
    monkeypatch.setenv("TILETRAIN_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "c.txt"
    f.write_text(TRAIN_TEXT)
    tok = Tokenizer.from_pretrained(tok_path)
    c = load_corpus([f], val_fraction=0.1, tokenizer=tok)
    ids = np.concatenate([c.train, c.val])
    (entry,) = cache_dir().iterdir()
    # a header claiming 2**40 int64 ids in a file of a few bytes (np.load would allocate 8 TiB)
    header = {"descr": "<i8", "fortran_order": False, "shape": (2 ** 40,)}
    with open(entry, "wb") as out:
        np.lib.format.write_array_header_1_0(out, header)
    again = load_corpus([f], val_fraction=0.1, tokenizer=tok)
    assert np.array_equal(np.concatenate([again.train, again.val]), ids)
    entry.write_bytes(np.arange(6, dtype=np.float64).tobytes())  # not even a .npy file
    again = load_corpus([f], val_fraction=0.1, tokenizer=tok)
    assert np.array_equal(np.concatenate([again.train, again.val]), ids)
