"""Run a Python program as `python SCRIPT ARGS` (or `python -m MODULE ARGS`, `python -c CODE
ARGS`) would, in a child forked from one server
process that has already imported numpy, torch and tiletrain (multiprocessing's forkserver):
each run skips the interpreter's start and those imports (0.7 s for tiletrain, 2 s more for
torch here), nothing else.  The child is a fresh process for the runtime (the server never
starts StarPU), gets the given working directory, environment and argv, runs the script as
``__main__``, then its atexit handlers, and exits with the script's status.

    run(["examples/train_gpt.py", "--steps", "3"], cwd=tmp_path, env=None, timeout=600)
    run(["-m", "tiletrain", "train", ...]); run(["-c", code, "arg"])
        -> subprocess.CompletedProcess (returncode, stdout, stderr)

Used by the tests that run examples and documentation pages; a test that needs a separate
interpreter (mpirun, signals to a process group, interpreter flags) starts one itself."""
from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile

PRELOAD = ["numpy", "torch", "tiletrain", "tiletrain.nn", "tiletrain.optim"]
_ctx = None


def _context():
    global _ctx
    if _ctx is None:
        _ctx = multiprocessing.get_context("forkserver")
        _ctx.set_forkserver_preload(PRELOAD)
    return _ctx


def _child(argv: list[str], cwd: str, env: dict, out: str, err: str) -> None:
    import atexit
    import runpy
    import traceback
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    sys.stdin = open(os.devnull)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    code = 0
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0:0] = [cwd]                  # as `python -m` puts the working directory first
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            sys.path[0:0] = [""]
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        else:
            sys.argv = list(argv)
            sys.path[0:0] = [os.path.dirname(os.path.abspath(argv[0]))]   # as `python SCRIPT` does
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as e:   # sys.exit(None | int | message), as the interpreter treats it
        code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run(argv: list, *, cwd=None, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """argv: what follows `python` (a script path, or -m MODULE, or -c CODE, then arguments); the program's exit status and its captured stdout and stderr.  On
    timeout the child is killed and subprocess.TimeoutExpired raised (with its output so far)."""
    argv = [str(a) for a in argv]
    with tempfile.TemporaryDirectory() as tmp:
        out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
        p = _context().Process(target=_child, args=(argv, str(cwd or os.getcwd()), dict(os.environ if env is None else env), out, err))
        p.start()
        p.join(timeout)
        timed_out = p.exitcode is None
        if timed_out:
            p.kill()
            p.join()
        texts = []
        for path in (out, err):
            try:
                with open(path, errors="replace") as f:
                    texts.append(f.read())
            except FileNotFoundError:
                texts.append("")
    if timed_out:
        raise subprocess.TimeoutExpired([sys.executable, *argv], timeout, output=texts[0], stderr=texts[1])
    return subprocess.CompletedProcess([sys.executable, *argv], p.exitcode, texts[0], texts[1])
