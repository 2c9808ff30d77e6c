"""Run the fuzz targets (tests/fuzz/fuzz_*.py) for a while each and print one table.

    python tests/fuzz/run.py [--seconds N] [TARGET ...]     (make fuzz, make fuzz-ci)

TARGET is a name such as ``safetensors`` (default: every target).  Each target runs in its
own process (atheris, i.e. libFuzzer) for N seconds (default: $FUZZ_SECONDS, else 60) on its
seed corpus (valid files written by tiletrain's own writers: the target's ``seeds()``) and a
working corpus kept in build/fuzz/TARGET/corpus, with a dictionary, a 10 s limit per input,
a 2 GiB resident-memory limit and a 4 GiB address-space limit (so that an allocation sized by
a hostile claim fails instead of being overcommitted).  A crash restarts the target for the
time left; each distinct crash (exception type and line, timeout, out-of-memory) counts
once, its input kept in build/fuzz/TARGET/crashes/ (replay it: add it to
tests/fuzz/test_regressions.py).  Exit status 1 when a target crashed.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _harness import SCRATCH_ENV, scratch_root

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TARGETS = sorted(p.stem[len("fuzz_"):] for p in HERE.glob("fuzz_*.py"))
ADDRESS_SPACE = 4 << 30
FLAGS = ["-timeout=10", "-rss_limit_mb=2048", "-print_final_stats=1"]


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def signature(log: str) -> str:
    """What a crashed fuzzer run found, as one line: "ExcType at file:line" for a Python
    exception (its innermost frame), "timeout", "out-of-memory" or the exit status."""
    if "=== Uncaught Python exception: ===" in log:
        tail = log.split("=== Uncaught Python exception: ===", 1)[1]
        exc = tail.strip().splitlines()[0].split(":", 1)[0]
        frames = re.findall(r'File "([^"]+)", line (\d+)', tail.split("libFuzzer:", 1)[0])
        where = f" at {os.path.relpath(frames[-1][0], ROOT)}:{frames[-1][1]}" if frames else ""
        return exc + where
    for what in ("timeout", "out-of-memory", "deadly signal"):
        if f"libFuzzer: {what}" in log:
            return what
    return "crash"


def run_target(name: str, seconds: float, python: str) -> tuple[int, list[tuple[str, str]]]:
    """(inputs run, [(signature, input file)] of the distinct crashes) of one target."""
    work = ROOT / "build" / "fuzz" / name
    seeds, corpus, crashes = work / "seeds", work / "corpus", work / "crashes"
    shutil.rmtree(seeds, ignore_errors=True)
    for d in (corpus, crashes):
        d.mkdir(parents=True, exist_ok=True)
    script = str(HERE / f"fuzz_{name}.py")
    runs, found, end = 0, {}, time.monotonic() + seconds
    log_path = work / "log.txt"
    with open(log_path, "w") as log_file:
        while (left := end - time.monotonic()) >= 1:
            before = set(os.listdir(crashes))
            cmd = [python, script, "--write-seeds", str(seeds), "--write-dict", str(work / "dict"),
                   str(corpus), str(seeds), f"-dict={work / 'dict'}",
                   f"-max_total_time={int(left)}", f"-artifact_prefix={crashes}/", *FLAGS]
            tmp = scratch_root()
            try:
                p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   errors="replace", timeout=left + 60, preexec_fn=_limit_address_space,
                                   env={**os.environ, SCRATCH_ENV: str(tmp)})
                out, rc = p.stdout, p.returncode
            except subprocess.TimeoutExpired as exc:  # libFuzzer's own limits did not stop it
                out = exc.stdout or ""
                out = out if isinstance(out, str) else out.decode(errors="replace")
                out, rc = out + "\nlibFuzzer: timeout", -9
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            log_file.write("".join(line + "\n" for line in out.splitlines()
                                   if not line.startswith("INFO: Instrumenting")))
            runs += sum(int(n) for n in re.findall(r"stat::number_of_executed_units: (\d+)", out))
            if rc == 0:
                break
            new = sorted(set(os.listdir(crashes)) - before)
            sig = signature(out)
            if sig not in found:
                found[sig] = str(crashes / new[0]) if new else str(log_path)
    return runs, sorted(found.items())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("targets", nargs="*", metavar="TARGET", help=f"default: all of {', '.join(TARGETS)}")
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("FUZZ_SECONDS") or 60),
                    help="fuzzing time per target (default: $FUZZ_SECONDS or 60)")
    args = ap.parse_args(argv)
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        ap.error(f"unknown target(s) {', '.join(unknown)}; the targets are {', '.join(TARGETS)}")
    rows, details = [], []
    for name in args.targets or TARGETS:
        print(f"fuzzing {name} for {args.seconds:g} s ...", flush=True)
        t0 = time.monotonic()
        runs, crashes = run_target(name, args.seconds, sys.executable)
        rows.append((name, f"{time.monotonic() - t0:.0f}", str(runs), str(len(crashes))))
        details += [f"  {name}: {sig} (input: {os.path.relpath(path, ROOT)})" for sig, path in crashes]
    head = ("target", "seconds", "runs", "crashes")
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in [head, tuple("-" * w for w in widths)] + rows]
    print("\n" + "\n".join(lines))
    if details:
        print("crashes (logs in build/fuzz/TARGET/log.txt):\n" + "\n".join(details))
    return 1 if details else 0


if __name__ == "__main__":
    sys.exit(main())
