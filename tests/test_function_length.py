"""No function of the package over 80 lines (issue 30's rule: a long function is several
steps that want names).  A nested function or class counts within its enclosing function,
as a reader meets it."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tiletrain"
LIMIT = 80


def long_functions(root: Path = PACKAGE, limit: int = LIMIT) -> list[tuple[int, str, str]]:
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    out.append((lines, str(path.relative_to(root.parent)), node.name))
    return sorted(out, reverse=True)


def test_no_function_over_80_lines():
    assert not long_functions(), "functions over 80 lines (split them into named steps): " + \
        ", ".join(f"{p}:{name} ({n} lines)" for n, p, name in long_functions())


def test_the_check_sees_a_long_function(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n" + "    x = 1\n" * 90)
    assert long_functions(tmp_path) == [(91, f"{tmp_path.name}/m.py", "f")]
