"""Every finding of the fuzz targets (tests/fuzz/fuzz_*.py), and hand-made hostile files,
replayed through the targets' ``check`` (no fuzzer: a few seconds), plus the hostile
safetensors headers that must be refused, with a message naming the problem, before
anything proportional to their claims is allocated.

Each FINDINGS entry broke its target's contract before the fix its name gives; the input is reduced to
the part that matters (the fuzzer's own inputs are kilobytes of mutated seed)."""
from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

import fuzz_checkpoint
import fuzz_hf_config
import fuzz_hf_index
import fuzz_safetensors
import fuzz_schedule
import fuzz_tokenizer
import fuzz_trace
from _harness import framed
from tiletrain import checkpoint as ck

TARGETS = {m.__name__[len("fuzz_"):]: m for m in (fuzz_safetensors, fuzz_checkpoint, fuzz_hf_config,
                                                   fuzz_hf_index, fuzz_tokenizer, fuzz_schedule, fuzz_trace)}


def _st(header, data: bytes = b"") -> bytes:
    """fuzz_safetensors' framed input: a header (JSON text or a dict) and the data."""
    text = header if isinstance(header, str) else json.dumps(header)
    return b"\x01" + text.encode() + b"\xff" + data


def _entry(dtype="F32", shape=(1,), offsets=(0, 4)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


def _metadata(**changes) -> bytes:
    """fuzz_checkpoint's metadata input: the GPT-2 seed's metadata with ``changes``."""
    meta = json.loads(fuzz_checkpoint.seeds()["metadata-gpt2"][1:])
    meta.update(changes)
    return b"\x01" + json.dumps(meta).encode()


def _gpt2(**changes) -> bytes:
    cfg = json.loads(fuzz_hf_config.seeds()["gpt2"])
    cfg.update(changes)
    return json.dumps(cfg).encode()


def _llama(**changes) -> bytes:
    cfg = json.loads(fuzz_hf_config.seeds()["llama"])
    cfg.update(changes)
    return json.dumps(cfg).encode()


def _wordlevel(vocab: dict, unk="[UNK]", added=()) -> bytes:
    return json.dumps({"version": "1.0", "truncation": None, "padding": None, "added_tokens": list(added),
                       "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
                       "decoder": None,
                       "model": {"type": "WordLevel", "vocab": vocab, "unk_token": unk}}).encode()


def _trace(events, other=None) -> bytes:
    doc = {"traceEvents": events}
    if other is not None:
        doc["otherData"] = other
    return json.dumps(doc).encode()


def _x(i, **kw):
    """A tiletrain task event (args.id = i)."""
    args = kw.pop("args", {})
    return {"ph": "X", "name": "t", "ts": float(i), "dur": 1.0, "pid": 0, "tid": 0, "args": {"id": i, **args},
            **kw}


DEEP = "[" * 200_000  # nested beyond the interpreter's recursion limit
TWICE = '{"a":%s,"a":%s}' % (json.dumps(_entry()), json.dumps(_entry()))  # a header naming "a" twice

FINDINGS = {  # what -> input; each one failed its target's contract before the fix in its name
    "safetensors": {
        "offset 1e999 (OverflowError: float infinity to int; SafetensorsFile checks ints)":
            _st({"a": _entry(offsets=(0, "1e999"))}).replace(b'"1e999"', b"1e999"),
        "float shape 2.5 (truncated to 2 and accepted; safetensors refuses it)":
            _st({"a": _entry("U8", [2.5], (0, 2))}, b"ab"),
        "float offsets (truncated and accepted)": _st({"a": _entry("U8", [2], (0, 2.9))}, b"ab"),
        "offset -0 (Python's JSON reads the int 0, safetensors' reader the float -0.0 and refuses it)":
            _st('{"a":{"dtype":"U8","shape":[2],"data_offsets":[-0,2]}}', b"ab"),
        "dimension -0": _st('{"a":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}}'),
        "string shape '12' (read as (1, 2) and accepted)": _st({"a": _entry("U8", "12", (0, 2))}, b"ab"),
        "bool shape (true read as 1)": _st({"a": _entry("U8", [True], (0, 1))}, b"a"),
        "__metadata__ '' (taken for no metadata; safetensors refuses it)": _st({"__metadata__": ""}),
        "nested too deeply (RecursionError; caught)": _st(DEEP),
        "65 dimensions (accepted; NumPy refuses them at read time)":
            _st({"a": _entry("U8", [1] * 65, (0, 1))}, b"a"),
    },
    "checkpoint": {
        "tokenizer text not a tokenizer.json (bare Exception from tokenizers in load_model; "
        "Tokenizer.from_str raises ValueError)": _metadata(tokenizer='{"version": "1.0", "model": {1: 2}}'),
        "train_args a list (AttributeError in train.load_model; checked)": _metadata(train_args=[1]),
        "train_args a string (AttributeError in train.load_model)": _metadata(train_args="float64"),
        "metadata nested too deeply (RecursionError in checkpoint.load; caught)": b"\x01" + DEEP.encode(),
        "metadata an int of 5000 digits (a ValueError that was not a CheckpointError)": b"\x01" + b"9" * 5000,
        "checksums nested too deeply (RecursionError in checkpoint.load)": b"\x00" + framed(json.dumps(
            {"__metadata__": {"format": ck.FORMAT, "metadata": "{}", "checksums": DEEP}}).encode()),
    },
    "hf_config": {
        "layer_norm_epsilon a list (TypeError from float(); hf.config_from_hf checks it)":
            _gpt2(layer_norm_epsilon=[1]),
        "layer_norm_epsilon an int beyond floats (OverflowError)": _gpt2(layer_norm_epsilon=10 ** 400),
        "layer_norm_epsilon null (TypeError)": _gpt2(layer_norm_epsilon=None),
        "model_type a list (unhashable: TypeError; pretrained.model_class checks it)": _gpt2(model_type=[1]),
        "model_type an object (unhashable)": _gpt2(model_type={"a": 1}),
        "Llama head_dim a string times 10**12 heads (a 2 TB string: MemoryError; config_from_hf checks ints)":
            _llama(head_dim="ab", num_attention_heads=10 ** 12),
        "Llama head_dim a list times 10**9 heads (a 16 GB list)":
            _llama(head_dim=[1, 2], num_attention_heads=10 ** 9),
        "Llama num_attention_heads a string (TypeError making the message)":
            _llama(head_dim=4, num_attention_heads="x"),
        "nested too deeply (RecursionError; caught)": DEEP.encode(),
    },
    "hf_index": {
        "not UTF-8 (UnicodeDecodeError out of save_pretrained's shard clean-up; pretrained._weight_map)":
            b'{"weight_map": {"a.weight": "model-\xb2-of-00002.safetensors"}}',
        "weight_map a list (AttributeError)": b'{"weight_map": ["model-00001-of-00002.safetensors"]}',
        "a shard an int (TypeError)": b'{"weight_map": {"a.weight": 1}}',
        "a shard a list (unhashable)": b'{"weight_map": {"a.weight": [1]}}',
        "a shard outside the folder (read: path traversal)":
            b'{"weight_map": {"a.weight": "../outside.safetensors"}}',
        "an absolute shard path (read)": b'{"weight_map": {"a.weight": "@OUTSIDE@"}}',
        "the folder's config.json as a shard (deleted by save_pretrained)":
            b'{"weight_map": {"x": "config.json"}}',
        "'..' as a shard (IsADirectoryError in save_pretrained)": b'{"weight_map": {"x": ".."}}',
        "a shard name longer than a file name can be (OSError ENAMETOOLONG from is_file)":
            b'{"weight_map": {"b.weight": "model-' + b">" * 300 + b'.safetensors"}}',
        "nested too deeply (RecursionError)": DEEP.encode(),
    },
    "tokenizer": {
        "ids repeated (vocab_size changes through to_str/from_str; Tokenizer checks ids 0..n-1)":
            _wordlevel({"[UNK]": 1, "hello": 1, "tiles": 2, "world": 3}),
        "an id beyond vocab_size (encode gives 7 for vocab_size 2: past the embedding)":
            _wordlevel({"[UNK]": 0, "x": 7}),
        "[UNK] missing (bare Exception from encode; ValueError now)": _wordlevel({"hello": 0}),
        "nested too deeply (bare Exception from Tokenizer.from_str)": DEEP.encode(),
        "not UTF-8 (bare Exception from Tokenizer.from_str)": b"\xff\xfe{}",
    },
    "schedule": {
        "not UTF-8 (UnicodeDecodeError; ScheduleError now)": b"0F0,0B0\n\xff\n",
        "a field over csv's limit (csv.Error)": b"0F0\n" + b"x" * 200_000 + b"\n",
        "a stage of 5000 digits (int() refuses it: a ValueError that was not a ScheduleError)":
            b"9" * 5000 + b"F0\n",
    },
    "trace": {
        "worker without an id (KeyError in metrics; chrome checks otherData.workers)":
            _trace([_x(0)], {"workers": [{"name": "w"}]}),
        "worker id a string (ValueError in metrics)": _trace([_x(0)], {"workers": [{"id": "x"}]}),
        "workers of strings (TypeError in metrics)": _trace([_x(0)], {"workers": ["w"]}),
        "tid beyond int32 (OverflowError; caught)": _trace([_x(0, tid=2 ** 40)]),
        "iargs beyond int64 (OverflowError)": _trace([_x(0, args={"iargs": [2 ** 70]})]),
        "ts Infinity (OverflowError)": _trace([_x(0, ts=float("inf"))]),
        "ids of mixed types (TypeError sorting)": _trace([_x(0), _x(1) | {"args": {"id": "1"}}]),
        "otherData a list (AttributeError)": _trace([_x(0)], [1]),
        "meta a list (TypeError)": _trace([_x(0)], {"meta": [1, 2]}),
        "foreign ts a list (TypeError sorting)": _trace([{"ph": "X", "ts": [1]}, {"ph": "X", "ts": 0}]),
        "nested too deeply (RecursionError)": DEEP.encode(),
        "an int of 5000 digits (a ValueError that was not a TraceError)": b"9" * 5000,
    },
}
HANDMADE = {  # hostile inputs that were refused cleanly already, or are refused more strictly now
    "safetensors": {
        "duplicate key (the last one taken; refused now)": _st(TWICE, b"\0" * 4),
        "NaN in the header": _st('{"a":{"dtype":"F32","shape":[NaN],"data_offsets":[0,4]}}', b"\0" * 4),
        "an int of 5000 digits": _st('{"a":{"dtype":"U8","shape":[%s],"data_offsets":[0,1]}}' % ("9" * 5000),
                                     b"a"),
        "a header length of 2**64 - 1": b"\x00" + b"\xff" * 8 + b"{}",
    },
    "checkpoint": {
        "tokenizer not a string (a TypeError from tokenizers; ValueError now)": _metadata(tokenizer=5),
        "model_type a list": _metadata(model_type=[1]),
        "config of an unknown field": _metadata(config={"vocab_size": 16, "n_layers": 2}),
        "a header only (no checksums: loaded with a warning)": b"\x00" + framed(json.dumps({"__metadata__": {
            "format": ck.FORMAT, "metadata": json.dumps({"config": {"vocab_size": 16}})}}).encode()),
        "two .safetensors files, no checkpoint.safetensors": b"\x06",
        "a Hugging Face folder": b"\x0a",
    },
    "hf_config": {"not UTF-8": b'{"model_type": "gpt2\xff"}', "a list": b"[]",
                  "vocab_size 10**400": _gpt2(vocab_size=10 ** 400)},
    "hf_index": {"the index a list": b"[]", "no weight_map": b"{}"},
    "tokenizer": {"WordPiece without [UNK] in its vocabulary": json.dumps({"version": "1.0", "model": {
        "type": "WordPiece", "vocab": {"a": 0}, "unk_token": "[UNK]", "continuing_subword_prefix": "##",
        "max_input_chars_per_word": 100}}).encode()},
    "schedule": {"an unterminated quote": b'"0F0,0B0\n', "NUL bytes": b"0F0\x00,0B0\n", "empty": b"",
                 "a deadlock": b"0B0,0F0\n",
                 "a header queue of 5000 digits": b"#schedule,local=true,queue=" + b"9" * 5000 + b"\n0F0,0B0\n",
                 "a header after the actions": b"0F0,0B0\n#schedule,flush=false\n",
                 "a header only": b"#schedule,flush=false,local=true,queue=1\n",
                 "a local header with a queue deadlock-free": b"#schedule,flush=false,local=true,queue=1\n"
                                                            b"0F0,0B0,0F1,0B1\n1F0,1B0,1F1,1B1\n"},
    "trace": {"ids of bools (read as ints)": _trace([_x(0) | {"args": {"id": False}}]),
              "deps a string (read as its characters)": _trace([_x(0), _x(1, args={"deps": "0"})])},
}
CASES = [(t, w, FINDINGS) for t in FINDINGS for w in FINDINGS[t]] + [(t, w, HANDMADE) for t in HANDMADE
                                                                     for w in HANDMADE[t]]


@pytest.mark.filterwarnings("ignore:.*has no checksums")
@pytest.mark.parametrize("target, what, table", CASES, ids=[f"{t}-{w}" for t, w, _ in CASES])
def test_replay(target, what, table):
    """The input keeps its target's contract, allocating less than 64 MiB (Python and NumPy)."""
    tracemalloc.start()
    try:
        TARGETS[target].check(table[target][what])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"{peak} bytes allocated"


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_seeds_pass(target):
    """The seed corpus (valid files written by tiletrain) passes every oracle."""
    for data in TARGETS[target].seeds().values():
        TARGETS[target].check(data)


# -- hostile safetensors headers: refused by name, nothing allocated for the claim ------------

HOSTILE = {  # what -> (header, data, the message's words)
    "huge shape": ({"a": _entry("F32", [10 ** 9, 10 ** 9], (0, 4))}, b"\0" * 4, "needs 4000000000000000000"),
    "shape overflowing 64 bits": ({"a": _entry("F32", [2 ** 32] * 3, (0, 4))}, b"\0" * 4,
                                  "overflows a 64-bit"),
    "dimension of 2**64": ({"a": _entry("F32", [2 ** 64], (0, 4))}, b"\0" * 4, "ints in"),
    "overlapping offsets": ({"a": _entry(), "b": _entry()}, b"\0" * 8, "overlaps the previous tensor"),
    "a gap between tensors": ({"a": _entry(), "b": _entry(offsets=(8, 12))}, b"\0" * 12, "leaves a gap"),
    "offsets past the end of the file": ({"a": _entry("F32", [4], (0, 16))}, b"\0" * 4, "the file has"),
    "offsets beyond any file": ({"a": _entry("U8", [2 ** 40], (0, 2 ** 40))}, b"", "the file has"),
    "dtype/size mismatch": ({"a": _entry("F64", [1], (0, 4))}, b"\0" * 4, "needs 8"),
    "negative shape": ({"a": _entry("F32", [-1], (0, 4))}, b"\0" * 4, "shape must be"),
    "float shape": ({"a": _entry("F32", [1.0], (0, 4))}, b"\0" * 4, "shape must be"),
    "string shape": ({"a": _entry("F32", ["1"], (0, 4))}, b"\0" * 4, "shape must be"),
    "shape not a list": ({"a": _entry("F32", "1", (0, 4))}, b"\0" * 4, "shape must be"),
    "negative offsets": ({"a": _entry("F32", [1], (-4, 0))}, b"\0" * 4, "data_offsets must be"),
    "float offsets": ({"a": _entry("F32", [1], (0, 4.0))}, b"\0" * 4, "data_offsets must be"),
    "three offsets": ({"a": _entry("F32", [1], (0, 4, 8))}, b"\0" * 4, "data_offsets must be"),
    "unknown dtype": ({"a": _entry("F8_E4M3", [1], (0, 1))}, b"\0", "unknown dtype"),
    "dtype not a string": ({"a": _entry(5, [1], (0, 1))}, b"\0", "unknown dtype"),
    "entry not an object": ({"a": [1, 2]}, b"", "must be an object"),
    "entry without data_offsets": ({"a": {"dtype": "F32", "shape": [1]}}, b"\0" * 4, "must be an object"),
    "metadata not of strings": ({"__metadata__": {"k": 1}}, b"", "table of strings"),
    "metadata a string": ({"__metadata__": "x"}, b"", "table of strings"),
    "header not an object": ([], b"", "not a JSON object"),
    "duplicate names": (TWICE, b"\0" * 4, "appears twice"),
    "NaN": ('{"a":{"dtype":"F32","shape":[NaN],"data_offsets":[0,4]}}', b"\0" * 4,
            "NaN is not a JSON number"),
    "nested too deeply": (DEEP, b"", "nested too deeply"),
    "not JSON": ("{'a': 1}", b"", "not valid JSON"),
    "not UTF-8": ('{"\udcff": 1}', b"", "not valid JSON"),
}


def _file(tmp_path, header, data=b"") -> str:
    text = header if isinstance(header, str) else json.dumps(header)
    path = tmp_path / "hostile.safetensors"
    path.write_bytes(framed(text.encode("utf-8", "surrogateescape"), data))
    return path


def _refused_cheaply(fn, path, exc_type, words) -> None:
    """fn(path) raises exc_type mentioning ``words`` and allocates less than 2 MiB on the way."""
    tracemalloc.start()
    try:
        with pytest.raises(exc_type, match=words.replace("(", r"\(")):
            fn(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20, f"{peak} bytes allocated to refuse it"


@pytest.mark.parametrize("what", sorted(HOSTILE))
def test_hostile_header_refused(tmp_path, what):
    header, data, words = HOSTILE[what]
    path = _file(tmp_path, header, data)
    _refused_cheaply(ck.SafetensorsFile, path, ValueError, words)
    _refused_cheaply(ck.load, path, ck.CheckpointError, words)  # the checkpoint reader says the same


def test_header_over_100_mb_refused_unread(tmp_path):
    """safetensors' limit and words: a header length above 100,000,000 bytes is refused
    before the header is read, even when the file is that long (sparse here)."""
    path = tmp_path / "big.safetensors"
    with open(path, "wb") as f:
        f.write((ck.MAX_HEADER_BYTES + 1).to_bytes(8, "little") + b"{")
        f.truncate(8 + ck.MAX_HEADER_BYTES + 16)
    _refused_cheaply(ck.SafetensorsFile, path, ValueError, "header too large: 100000001 bytes")
    path.write_bytes((2 ** 64 - 1).to_bytes(8, "little") + b"{}")
    _refused_cheaply(ck.SafetensorsFile, path, ValueError, "header too large")


def test_header_of_100_mb_allowed_length(tmp_path):
    """A header of exactly the limit is not "too large" (here: longer than the file)."""
    path = tmp_path / "short.safetensors"
    path.write_bytes(ck.MAX_HEADER_BYTES.to_bytes(8, "little") + b"{}")
    _refused_cheaply(ck.SafetensorsFile, path, ValueError,
                     f"a header of {ck.MAX_HEADER_BYTES} bytes in a file of 10")


def test_valid_edge_cases_read_as_safetensors_does(tmp_path):
    """Legal but unusual files: no tensors, a 0-d tensor, an empty tensor, metadata null."""
    for header, data in (({}, b""), ({"__metadata__": None}, b""),
                         ({"s": _entry("F64", [], (0, 8)), "e": _entry("F32", [0, 3], (8, 8))}, b"\0" * 8)):
        fuzz_safetensors.check(_st(header, data))
    st = ck.SafetensorsFile(_file(tmp_path, {"s": _entry("F64", [], (0, 8))}, np.float64(2.5).tobytes()))
    assert st["s"].shape == () and float(st["s"].numpy()) == 2.5 and st.metadata == {}
