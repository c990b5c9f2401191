"""The package's shape (issue 37): no function over 80 lines, no module over 600 lines unless it
is one concept, named below with the reason. Read from the source (``ast``), nothing imported.

``python tests/test_code_shape.py`` prints the longest functions and modules.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tests.helpers import PACKAGE, REPO

#: the longest a function (or method) may be, decorators and docstring included
MAX_FUNCTION_LINES = 80
#: the longest a module may be unless :data:`LONG_MODULES` names it
MAX_MODULE_LINES = 600

#: modules allowed over :data:`MAX_MODULE_LINES`, relative to the repository, with the reason
#: each is one concept (or why it is allowed for now)
LONG_MODULES = {
    "cfl_lightning/cli/lightning_cli.py": (
        "one concept: the LightningCLI subclass and the argument links, defaults and checks "
        "that make `fit`/`validate`/`test` one command line"
    ),
}


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int, int]]:
    """``(qualified name, first line, length)`` of every function longer than ``limit`` lines.

    A function's length runs from its first decorator to its last line; nested functions and
    methods are measured on their own too (``outer.inner``, ``Class.method``).
    """
    found: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    length = child.end_lineno - first + 1
                    if length > limit:
                        found.append((name, first, length))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def module_lines(source: str) -> int:
    """The number of lines of a module's source."""
    return len(source.splitlines())


def package_sources() -> dict[str, str]:
    """Every module of the package: path relative to the repository -> source."""
    return {
        path.relative_to(REPO).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def test_no_function_over_80_lines():
    offending = [
        f"{path}:{line} {name} ({length} lines)"
        for path, source in package_sources().items()
        for name, line, length in long_functions(source)
    ]
    assert offending == [], f"functions over {MAX_FUNCTION_LINES} lines: {offending}"


def test_no_module_over_600_lines_unless_one_concept():
    sources = package_sources()
    offending = [
        f"{path} ({module_lines(source)} lines)"
        for path, source in sources.items()
        if module_lines(source) > MAX_MODULE_LINES and path not in LONG_MODULES
    ]
    assert offending == [], (
        f"modules over {MAX_MODULE_LINES} lines (split them, or list them in LONG_MODULES with "
        f"the reason they are one concept): {offending}"
    )
    assert all(reason.strip() for reason in LONG_MODULES.values())
    stale = [p for p in LONG_MODULES if module_lines(sources.get(p, "")) <= MAX_MODULE_LINES]
    assert stale == [], f"LONG_MODULES names modules gone or now short (remove them): {stale}"


def test_negative_control_a_long_function_and_a_long_module_are_flagged():
    def lines(indent: int, count: int) -> str:
        return "".join(f"{' ' * indent}x{i} = {i}\n" for i in range(count))

    n = MAX_FUNCTION_LINES
    source = (
        "class C:\n    @staticmethod\n    def long():\n" + lines(8, n)  # n + 2 lines
        + "def short():\n    return 1\n"
        + "def outer():\n    def inner():\n" + lines(8, n)  # outer n + 2, inner n + 1
        + "def exact():\n" + lines(4, n - 1)  # exactly n lines: allowed
    )
    assert [(name, length) for name, _, length in long_functions(source)] == [
        ("C.long", n + 2), ("outer", n + 2), ("outer.inner", n + 1),
    ]
    assert module_lines("x = 1\n" * (MAX_MODULE_LINES + 1)) > MAX_MODULE_LINES
    assert module_lines("x = 1\n" * MAX_MODULE_LINES) == MAX_MODULE_LINES


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    rows = sorted(
        ((length, f"{path}:{line} {name}") for path, source in package_sources().items()
         for name, line, length in long_functions(source, 40)),
        reverse=True,
    )
    print("functions over 40 lines:", *(f"  {n:4d} {where}" for n, where in rows[:15]), sep="\n")
    sizes = sorted(((module_lines(s), p) for p, s in package_sources().items()), reverse=True)
    print("longest modules:", *(f"  {n:4d} {path}" for n, path in sizes[:10]), sep="\n")


def test_a_package_per_automaton_kind():
    """automata/ and sampling/ keep each automaton kind's modules in a package of its own
    (automata/pushdown/, sampling/pushdown/, ...): no module named after a kind beside them."""
    from cfl_lightning.kinds.automata import AUTOMATON_KINDS

    kinds = AUTOMATON_KINDS.names()
    prefixed = [
        str(path)
        for folder in ("automata", "sampling")
        for path in sorted((REPO / "cfl_lightning" / folder).glob("*.py"))
        if any(path.stem.startswith(f"{kind}_") for kind in kinds)
    ]
    assert prefixed == [], f"modules named after a kind outside its package: {prefixed}"
    for kind in kinds:
        assert (REPO / "cfl_lightning" / "automata" / kind / "__init__.py").exists()
