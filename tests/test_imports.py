"""The import graph of tiletrain/: imports point one way only (docs/architecture.md).

Every module of tiletrain/ is parsed (ast, nothing is imported) and every internal import
counts, at module top or inside a function: an import inside a function is a cycle in
disguise.  The test fails on
  (a) an import that goes up the layer order LAYERS,
  (b) a cycle,
  (c) an import of the compiled binding `tiletrain._ffi` outside FFI_ALLOWED,
unless the edge is in PENDING (files other people are rewriting; the list only shrinks: an
entry that is no longer needed fails the test too)."""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "tiletrain"
COMPILED = ("tiletrain._tiletrain_cffi",)  # the cffi extension (built, not parsed): outside the graph

# The layer order, top to bottom: a module may import modules of its own layer and of the
# layers below it, never above.  A module belongs to the layer of its longest matching entry
# ("runtime.kernels" before "runtime"); "" is the package itself (tiletrain/__init__.py, the
# public facade: it imports the layers below it, and only the layers above it import it).
LAYERS = [
    ("__main__", "cli", "testing"),       # the command line; test helpers (references, device cases)
    ("experiments", "sim"),               # workloads, sweeps, pipeline experiments; machines as data
    ("train",),                           # the training loop, its arguments and state
    ("",),                                # tiletrain/__init__.py: `import tiletrain as tt`
    ("inference", "pipeline", "parallel"),
    ("nn", "geometric", "data", "checkpoint", "serialization", "func"),  # func: torch.func (functional_call is nn's)
    # utils.checkpoint, mpirun; torch.cuda/backends answers; torch.linalg, torch.distributions, torch.special
    ("utils", "cuda", "backends", "amp", "linalg", "distributions", "special"),
    ("optim", "functional", "autograd"),  # autograd: torch.autograd's grad/backward over the ops' tape
    ("tensors.api",),                     # the user-facing Tensor: torch's methods, bound to ops
    ("ops",),                             # op tables, autograd
    ("runtime.kernels",),                 # the one kernel-call layer (by kernel name)
    ("tensors", "distribution"),          # the Tensor core (C handle, tile life cycle), traits, owners
    ("trace",),                           # task records, Chrome traces, metrics, tags
    ("runtime",),                         # session life cycle, workers, MPI, hetero
    ("_ffi", "_version", "_build_ffi"),   # the compiled module's one importer; its cffi build script
    ("config",),                          # RuntimeConfig, TILETRAIN_* (stdlib only: _ffi asks it the flavour)
]

# The only importers of the compiled binding: the runtime, the Tensor core and trace records.
FFI_ALLOWED = ("runtime", "tensors", "trace.records")

# Edges allowed for now, (importer, imported) -> what its owner will change: imports in files
# that other people are rewriting in their own branches.  Remove an entry when its owner
# merges: the test fails while an entry is no longer needed, so this list only shrinks.
PENDING = {
}

# Re-exports that keep the old import path of a moved name working, (re-exporting module,
# the module the names moved to) -> {name: [modules that still import it from the old path]}:
# other people's files.  Each is a module __getattr__ (an upward import in a function),
# allowed while its modules still import the names that way: the test fails when a listed
# module no longer does (take it off the list) and when a list is empty (remove the re-export
# and the entry).
REEXPORTS = {
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((ROOT / PACKAGE).rglob("*.py"))}


def _resolve(importer: str, is_pkg: bool, node, modules) -> list[str]:
    """The internal modules an import statement names (the module a name comes from, or the
    submodule when the name is one)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name == PACKAGE or a.name.startswith(PACKAGE + ".")]
    if node.level:
        base = importer.split(".")[:len(importer.split(".")) + is_pkg - node.level]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    if not (source == PACKAGE or source.startswith(PACKAGE + ".")):
        return []
    names = [f"{source}.{a.name}" for a in node.names]
    return [n if n in modules else source for n in names if n not in COMPILED]


def _owner(name: str, modules) -> str:
    """The module of tiletrain/ a dotted name lives in (a compiled extension: its package)."""
    while name not in modules:
        name = name.rsplit(".", 1)[0]
    return name


def import_graph():
    """{(importer, imported): [(line, in_function, named)]} over tiletrain/'s modules, named
    being the module the statement names.  Importing a.b.c also runs the __init__ of a.b:
    such parents, when they are not the importer's own packages, are edges too (named a.b.c;
    tiletrain/__init__.py excepted: every import runs it)."""
    modules = _modules()
    edges: dict[tuple[str, str], list[tuple[int, bool, str]]] = defaultdict(list)

    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"

        def visit(node, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in _resolve(name, is_pkg, child, modules):
                        target = _owner(target, modules)
                        parts = target.split(".")
                        parents = [".".join(parts[:i]) for i in range(2, len(parts))]
                        for t in [target] + [p for p in parents if not (name + ".").startswith(p + ".")]:
                            if t != name:
                                edges[(name, t)].append((child.lineno, in_function, target))
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                ast.Lambda)))

        visit(ast.parse(path.read_text(), str(path)), False)
    return modules, dict(edges)


def layer_of(module: str) -> int:
    rel = module[len(PACKAGE) + 1:] if module != PACKAGE else ""
    best, best_len = None, -1
    for i, names in enumerate(LAYERS):
        for entry in names:
            if (rel == entry if entry == "" else rel == entry or rel.startswith(entry + ".")) \
                    and len(entry) > best_len:
                best, best_len = i, len(entry)
    if best is None:
        raise AssertionError(f"{module} is in no layer of tests/test_imports.py LAYERS: add it")
    return best


def _ffi_allowed(module: str) -> bool:
    rel = module[len(PACKAGE) + 1:]
    return any(rel == a or rel.startswith(a + ".") for a in FFI_ALLOWED)


def _where(edges, edge) -> str:
    return ", ".join(sorted({f"line {ln}{' (in a function)' if f else ''}" for ln, f, _ in edges[edge]}))


def _allowed_edges() -> set:
    return set(PENDING) | set(REEXPORTS)


def excused(edges, edge, allowed) -> bool:
    """The edge is allowed: listed, or each of its imports names a listed module (a parent
    package run by a listed import)."""
    a = edge[0]
    return edge in allowed or all((a, named) in allowed for _, _, named in edges[edge])


def violations(modules, edges) -> dict[tuple[str, str], str]:
    """Each edge against the rules, with the rule it breaks."""
    bad = {}
    for a, b in edges:
        if b == f"{PACKAGE}._ffi" and not _ffi_allowed(a):
            bad[(a, b)] = "imports the compiled binding (only the runtime, the Tensor core and trace records do)"
        elif layer_of(b) < layer_of(a):
            bad[(a, b)] = f"goes up the layer order ({LAYERS[layer_of(a)]} imports {LAYERS[layer_of(b)]})"
    return bad


def cycles(edges) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def test_every_module_has_a_layer(graph):
    modules, _ = graph
    for m in modules:
        layer_of(m)


def test_imports_follow_the_layer_order(graph):
    modules, edges = graph
    allowed = _allowed_edges()
    bad = {e: why for e, why in violations(modules, edges).items() if not excused(edges, e, allowed)}
    assert not bad, "imports against the layer order (tests/test_imports.py LAYERS, FFI_ALLOWED):\n" + "\n".join(
        f"  {a} -> {b} ({_where(edges, (a, b))}): {why}" for (a, b), why in sorted(bad.items()))


def test_no_cycles(graph):
    _, edges = graph
    allowed = _allowed_edges()
    found = cycles({e: w for e, w in edges.items() if not excused(edges, e, allowed)})
    assert not found, "import cycles:\n" + "\n".join("  " + " <-> ".join(c) for c in found)


def _on_a_cycle(edges, edge, allowed) -> bool:
    """Whether the edge closes a cycle when every other allowed edge is left out."""
    kept = {e: w for e, w in edges.items() if e == edge or not excused(edges, e, allowed - {edge})}
    return any(edge[0] in c and edge[1] in c for c in cycles(kept))


def test_pending_exceptions_are_still_needed(graph):
    """A PENDING entry whose edge is gone, or no longer breaks a rule (layer order, _ffi, a
    cycle), must be removed."""
    modules, edges = graph
    bad, allowed = violations(modules, edges), _allowed_edges()
    stale = [e for e in PENDING if e not in edges or (e not in bad and not _on_a_cycle(edges, e, allowed))]
    assert not stale, "PENDING entries no longer needed (remove them from tests/test_imports.py):\n" + "\n".join(
        f"  {a} -> {b}" for a, b in stale)


def _imports_name_from(modules, importer: str, source: str, name: str) -> bool:
    """Whether module ``importer`` has ``from <source> import <name>`` (at top or in a function)."""
    path = modules[importer]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and any(a.name == name for a in node.names):
            if node.level:
                parts = importer.split(".")
                base = parts[:len(parts) + (path.name == "__init__.py") - node.level]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            if src == source:
                return True
    return False


def test_reexports_are_still_needed(graph):
    """A re-export stays while a module it lists still imports a listed name from the old
    path (and lists only such modules: one that changed comes off its list)."""
    modules, edges = graph
    for (old, new), users in REEXPORTS.items():
        assert (old, new) in edges, f"REEXPORTS: {old} no longer imports {new}: remove the entry"
        assert any(users.values()), f"REEXPORTS: nobody imports {old}'s re-exports of {new}: remove them"
        for name, importers in users.items():
            for m in importers:
                assert _imports_name_from(modules, m, old, name), (
                    f"REEXPORTS: {m} no longer imports {name} from {old}: take it off the list (and remove the "
                    "re-export when the list is empty)")


def test_the_checks_can_fail():
    """The rules catch a back-edge, an _ffi import and a cycle (synthetic graphs)."""
    mods = {f"{PACKAGE}.{m}": None for m in ("ops.basic", "tensors.tensor", "nn.module")}
    up = {(f"{PACKAGE}.tensors.tensor", f"{PACKAGE}.ops.basic"): [(1, True)]}
    assert set(violations(mods, up)) == set(up)
    ffi = {(f"{PACKAGE}.nn.module", f"{PACKAGE}._ffi"): [(1, False)]}
    assert set(violations(mods, ffi)) == set(ffi)
    down = {(f"{PACKAGE}.ops.basic", f"{PACKAGE}.tensors.tensor"): [(1, False)]}
    assert not violations(mods, down) and not cycles(down)
    assert cycles({**up, **down}) == [[f"{PACKAGE}.ops.basic", f"{PACKAGE}.tensors.tensor"]]


def in_function_imports(edges) -> int:
    """Internal import statements inside functions (each imported module counted once per
    statement line)."""
    return len({(a, ln) for (a, _), where in edges.items() for ln, f, _ in where if f})


if __name__ == "__main__":  # a summary: python tests/test_imports.py
    modules, edges = import_graph()
    ffi = sorted({a for a, b in edges if b == f"{PACKAGE}._ffi"})
    print(f"{len(modules)} modules, {len(edges)} internal import edges")
    print(f"modules importing {PACKAGE}._ffi: {len(ffi)}: {', '.join(m[len(PACKAGE) + 1:] for m in ffi)}")
    print(f"in-function internal imports: {in_function_imports(edges)}")
    found = cycles(edges)
    print(f"cycles: {len(found)} ({', '.join(str(len(c)) + ' modules' for c in found) or 'none'})")
    allowed = _allowed_edges()
    rest = cycles({e: w for e, w in edges.items() if not excused(edges, e, allowed)})
    print(f"cycles without the allowed edges: {len(rest)}")
    for (a, b), why in sorted(violations(modules, edges).items()):
        print(f"  {'allowed ' if excused(edges, (a, b), allowed) else ''}{a} -> {b} ({_where(edges, (a, b))}): "
              f"{why}")
