"""The C core's files call each other in one direction (docs/architecture.md, "The C core"):
csrc/state.c at the bottom (errors, the session's state, the gate, live tensors, pauses: it
calls StarPU only), csrc/session.c at the top (it starts and stops every other file; none
calls it), and no cycle anywhere: the data layer reads memory < pool, mpi < tile < tensor <
mpi_tensor.  The test reads the sources: a function defined at the start of a line in one
core file and called in another is an edge."""
import re
from pathlib import Path

CSRC = Path(__file__).resolve().parents[1] / "csrc"
CORE = ["state", "session", "devices", "opencl", "submit", "trace", "tile", "tensor", "memory", "pool", "mpi",
        "mpi_tensor"]
# the data layer, bottom to top: each file calls only files to its left (or below the layer)
DATA_LAYER = ["memory", "pool", "mpi", "tile", "tensor", "mpi_tensor"]

DEF = re.compile(r"^[A-Za-z_][\w \*]*?\b(tt_\w+)\s*\([^;]*$", re.M)


def _strip(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def graph() -> dict[str, set[str]]:
    src = {f: _strip((CSRC / f"{f}.c").read_text()) for f in CORE}
    owner = {}
    for f, text in src.items():
        for name in DEF.findall(text):
            owner.setdefault(name, f)
    edges = {f: set() for f in CORE}
    for f, text in src.items():
        for name in set(re.findall(r"\b(tt_\w+)\s*\(", text)):
            g = owner.get(name)
            if g and g != f:
                edges[f].add(g)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one file."""
    reach = {f: set() for f in edges}
    for f in edges:
        todo = list(edges[f])
        while todo:
            g = todo.pop()
            if g not in reach[f]:
                reach[f].add(g)
                todo.extend(edges[g])
    comps = []
    for f in edges:
        comp = {f} | {g for g in reach[f] if f in reach[g]}
        if len(comp) > 1 and comp not in comps:
            comps.append(comp)
    return comps


def test_state_is_the_bottom_and_session_the_top():
    edges = graph()
    assert not edges["state"], f"csrc/state.c calls {sorted(edges['state'])}: it must call StarPU only"
    callers = sorted(f for f, to in edges.items() if "session" in to)
    assert not callers, f"{callers} call csrc/session.c: move what they use into csrc/state.c"
    assert edges["session"] >= {"devices", "tile", "memory", "mpi", "pool", "trace"}, edges["session"]


def test_no_file_calls_back():
    comps = cycles(graph())
    assert not comps, f"C core files calling each other both ways: {comps} (docs/architecture.md, the call order)"


def test_the_data_layer_calls_down():
    edges = graph()
    for i, f in enumerate(DATA_LAYER):
        up = sorted(set(DATA_LAYER[i + 1:]) & edges[f])
        assert not up, f"csrc/{f}.c calls {up}, above it in the data layer {DATA_LAYER}"


def test_the_check_sees_a_cycle():
    edges = graph()
    edges["state"] = {"session"}
    assert any({"state", "session"} <= c for c in cycles(edges))
