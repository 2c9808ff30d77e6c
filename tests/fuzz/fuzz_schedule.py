"""Fuzz target: pipeline schedule CSV (tiletrain.pipeline.schedule.Schedule.from_csv), then
what ``tiletrain schedule show FILE.csv`` does with it (validate, format, simulate, the idle
fraction) and the CSV written back.

Input: the file's bytes.  Contract: ScheduleError naming the row or action, or a schedule that
formats, simulates and round-trips through to_csv unchanged."""
from __future__ import annotations

from _harness import as_file, instrumented, main, refused

with instrumented(__name__):
    from tiletrain.pipeline import schedules
    from tiletrain.pipeline.enforce import formula_idle_fraction
    from tiletrain.pipeline.schedule import Schedule, ScheduleError

ALLOWED = (ScheduleError,)
TOKENS = ("0F0 1F0 0B0 1B0 0I0 0W0 1I1 1W1 2F0.1 , . 0 F B I W #schedule flush= local= queue= ordered= true "
          "false 1 =").split() + ["\n", "\r\n", '"', " "]


def check(data: bytes) -> None:
    s, _ = refused(ALLOWED, Schedule.from_csv, as_file(data, "s.csv"))
    if s is None:
        return
    ok, _ = refused(ALLOWED, s.validate)
    if ok is None:
        return
    s.format()
    sim = s.simulate()
    sim.idle_fraction, sim.peak_activations
    formula_idle_fraction(s)
    back = Schedule.from_csv(s.to_csv(), name=s.name)
    assert back.actions == s.actions, (back.actions, s.actions)
    assert back.header() == s.header(), (back.header(), s.header())


def seeds() -> dict[str, bytes]:
    cases = {"1f1b": dict(stages=2, microbatches=3), "gpipe": dict(stages=2, microbatches=2),
             "interleaved-1f1b": dict(stages=2, microbatches=2, virtual=2),
             "zb-h1": dict(stages=2, microbatches=3),
             "seq1f1b": dict(stages=2, microbatches=2, chunks=2), "emergent": dict(stages=2, microbatches=2),
             "pb": dict(stages=2, microbatches=3), "local": dict(stages=2, microbatches=3, queue=1)}
    out = {}
    for name, kw in cases.items():
        if name in schedules.NAMES:
            out[name] = schedules.get(name, **kw).to_csv().encode()
    return out


if __name__ == "__main__":
    main(check, seeds, TOKENS)
