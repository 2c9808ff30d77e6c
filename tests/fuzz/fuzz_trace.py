"""Fuzz target: trace JSON (tiletrain.trace.chrome.load: tiletrain's Chrome trace-event files
and other Chrome traces), then what ``tiletrain trace show FILE`` does with it (metrics) and
the trace written back.

Input: the file's bytes.  Contract: TraceError naming the problem, or a trace whose metrics
compute and which to_chrome/from_chrome gives back unchanged."""
from __future__ import annotations

import json

from _harness import as_file, instrumented, main, refused

with instrumented(__name__):
    from tiletrain.pipeline import schedules
    from tiletrain.trace import chrome, format_metrics, metrics
    from tiletrain.trace.records import TraceError

ALLOWED = (TraceError,)
TOKENS = [f'"{w}"' for w in (
    "traceEvents otherData workers meta format ph X M s f args id deps iargs ts dur pid tid name cat kernel "
    "phase priority flops layer microbatch stage submit memnode cpu rank").split()] + [
    "null", "true", "-1", "1e308", "NaN", "Infinity", "2147483648", "[]", "{}"]


def check(data: bytes) -> None:
    tr, _ = refused(ALLOWED, chrome.load, as_file(data, "t.json"))
    if tr is None:
        return
    format_metrics(metrics(tr))
    back = chrome.from_chrome(json.loads(json.dumps(chrome.to_chrome(tr, flows=True))))
    assert back.tasks.tobytes() == tr.tasks.tobytes() and back.deps.tolist() == tr.deps.tolist()


def seeds() -> dict[str, bytes]:
    tr = schedules.get("1f1b", stages=2, microbatches=2).simulate().to_trace()
    foreign = {"traceEvents": [{"ph": "X", "name": "gemm", "ts": 1.5, "dur": 2, "pid": 0, "tid": 1},
                               {"ph": "X", "name": "add", "ts": 0, "dur": 1, "pid": 0, "tid": 0}]}
    return {"tiletrain": json.dumps(chrome.to_chrome(tr), separators=(",", ":")).encode(),
            "flows": json.dumps(chrome.to_chrome(tr.select(tr.tasks["stage"] == 0), flows=True)).encode(),
            "foreign": json.dumps(foreign).encode()}


if __name__ == "__main__":
    main(check, seeds, TOKENS)
