"""The documentation works: README.md's and docs/'s Python examples run, their relative links
resolve, and the site builds with ``mkdocs build --strict``.

Every ```python block runs, the blocks of one page in order in one fresh Python process (so a
later block sees the names of an earlier one), with the page's directory nowhere in sight: the
working directory is a temporary one, and a timeout bounds each page.  A block that cannot run
here is marked on the line right above its opening fence, with the reason:

    <!-- no-run: needs mpirun -np 2 (tests/mpi runs the same kind of script) -->

A marker without a reason, or one not followed by a python block, fails the test.  Keep the
examples small (tiny shapes, a couple of steps): all pages together run in a few tens of
seconds."""
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

import preloaded

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md"] + sorted(DOCS.rglob("*.md"))
PAGE_TIMEOUT_S = 180

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<ticks>```+|~~~+)\s*(?P<info>[^`\s]*)")
_MARKER = re.compile(r"^\s*<!--\s*no-run\s*:?(?P<reason>.*?)-->\s*$")
_MARKER_START = re.compile(r"^\s*<!--\s*no-run\b")


@dataclass
class Block:
    line: int          # 1-based line of the first line of code (the line after the fence)
    code: str
    run: bool
    reason: str = ""


def parse(text: str, name: str = "page") -> tuple[list[Block], list[str]]:
    """The python blocks of a Markdown text, and the problems with its no-run markers."""
    lines = text.split("\n")
    blocks: list[Block] = []
    problems: list[str] = []
    i = 0
    pending: tuple[int, str] | None = None   # (line, reason) of a marker waiting for its fence
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            indent, ticks, info = fence["indent"], fence["ticks"], fence["info"].lower()
            body, j = [], i + 1
            while j < len(lines) and not re.match(rf"^\s*{re.escape(ticks[0])}{{{len(ticks)},}}\s*$", lines[j]):
                body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
                j += 1
            if info == "python":
                marked = pending is not None and pending[0] == i   # the marker is the line right above
                if pending is not None and not marked:
                    problems.append(f"{name}:{pending[0]}: no-run marker not right above a python block")
                blocks.append(Block(i + 2, textwrap.dedent("\n".join(body)), run=not marked,
                                    reason=pending[1] if marked else ""))
            elif pending is not None:
                problems.append(f"{name}:{pending[0]}: no-run marker above a {info or 'plain'} block, "
                                "not a python one")
            pending = None
            i = j + 1
            continue
        if _MARKER_START.match(line):
            if pending is not None:
                problems.append(f"{name}:{pending[0]}: no-run marker not right above a python block")
            m = _MARKER.match(line)
            reason = m["reason"].strip() if m else ""
            if not reason:
                problems.append(f"{name}:{i + 1}: no-run marker without a reason "
                                "(write <!-- no-run: why it cannot run here -->)")
            pending = (i + 1, reason)
        elif pending is not None and line.strip():
            problems.append(f"{name}:{pending[0]}: no-run marker not right above a python block")
            pending = None
        i += 1
    if pending is not None:
        problems.append(f"{name}:{pending[0]}: no-run marker not right above a python block")
    return blocks, problems


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


RUNNABLE = [p for p in PAGES if any(b.run for b in parse(p.read_text(), _rel(p))[0])]

# Runs the blocks of one page in one namespace; each block compiled under the page's path and
# shifted to its lines there, so a traceback names the Markdown line that failed.
_RUNNER = """
import json, sys
blocks = json.load(open(sys.argv[1]))
ns = {"__name__": "__main__"}
for line, code in blocks:
    print(f"--- block at {sys.argv[2]}:{line}", flush=True)
    exec(compile("\\n" * (line - 1) + code, sys.argv[2], "exec"), ns)
"""


def test_no_run_markers_are_well_formed():
    problems = [p for page in PAGES for p in parse(page.read_text(), _rel(page))[1]]
    assert not problems, "\n".join(problems)


def test_the_marker_checks_themselves():
    fence = "`" * 3
    ok = f"<!-- no-run: needs a GPU -->\n{fence}python\nimport cupy\n{fence}\n"
    blocks, problems = parse(ok)
    assert not problems and [(b.run, b.reason, b.line) for b in blocks] == [(False, "needs a GPU", 3)]
    assert "without a reason" in parse(f"<!-- no-run: -->\n{fence}python\nx = 1\n{fence}\n")[1][0]
    assert "without a reason" in parse(f"<!-- no-run -->\n{fence}python\nx = 1\n{fence}\n")[1][0]
    assert "not right above" in parse(f"<!-- no-run: x -->\n\ntext\n{fence}python\nx = 1\n{fence}\n")[1][0]
    assert "not a python one" in parse(f"<!-- no-run: x -->\n{fence}sh\nls\n{fence}\n")[1][0]
    indented = f"- item:\n\n    {fence}python\n    x = 1\n    {fence}\n"
    assert [(b.run, b.code.strip()) for b in parse(indented)[0]] == [(True, "x = 1")]


@pytest.mark.parametrize("page", RUNNABLE, ids=_rel)
def test_python_examples_run(page, tmp_path):
    blocks = [(b.line, b.code) for b in parse(page.read_text(), _rel(page))[0] if b.run]
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    (tmp_path / "runner.py").write_text(_RUNNER)
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    env.setdefault("STARPU_HOME", str(ROOT / "build" / "starpu-home-test"))
    env["MPLBACKEND"] = "Agg"
    try:
        proc = preloaded.run([tmp_path / "runner.py", tmp_path / "blocks.json", page], cwd=work, env=env,
                             timeout=PAGE_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{_rel(page)}: the examples ran past {PAGE_TIMEOUT_S} s\n{e.stdout or ''}\n{e.stderr or ''}")
    assert proc.returncode == 0, (f"{_rel(page)}: an example failed (exit status {proc.returncode})\n"
                                  f"{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")


_LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_CODE_SPAN = re.compile(r"`+[^`]*`+")


def _links(text: str):
    """(line, target) of the inline links outside code blocks and code spans."""
    in_fence = False
    for n, line in enumerate(text.split("\n"), 1):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for m in _LINK.finditer(_CODE_SPAN.sub("", line)):
            yield n, m.group(1)


def test_relative_links_resolve():
    bad = []
    for page in PAGES:
        for n, target in _links(page.read_text()):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue   # another site (mkdocs checks the anchors within a page)
            path = target.split("#", 1)[0]
            dest = (page.parent / path).resolve()
            if not dest.exists():
                bad.append(f"{_rel(page)}:{n}: {target} does not exist")
            elif page.is_relative_to(DOCS) and not dest.is_relative_to(DOCS):
                bad.append(f"{_rel(page)}:{n}: {target} is outside docs/ (not part of the site)")
    assert not bad, "\n".join(bad)


def test_site_builds_strictly(tmp_path):
    try:
        import mkdocs  # noqa: F401 -- pinned in the `docs` extra, which `make setup` installs
        import material  # noqa: F401
    except ImportError as e:
        pytest.fail(f"{e}: install the docs extra (make setup does: pip install -e '.[test,docs]')")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert (tmp_path / "site" / "index.html").exists()
