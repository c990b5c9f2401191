"""Static checks of the package's layering (read from the source files, nothing imported)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "cfl_lightning"


def _imported_modules(path: Path, root: Path | None = None) -> list[str]:
    """Absolute names of every module imported anywhere in ``path`` (relative imports resolved)."""
    root = PACKAGE if root is None else root
    package = ".".join(path.relative_to(root.parent).with_suffix("").parts[:-1])
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names.append(base)
            names.extend(f"{base}.{alias.name}" for alias in node.names)
    return names


def _offenders(folder: str, forbidden: str) -> list[str]:
    found = []
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        for name in _imported_modules(path):
            if name == forbidden or name.startswith(forbidden + "."):
                found.append(f"{path.relative_to(PACKAGE.parent)} imports {name}")
    return found


CORE = ("automata", "semiring", "sampling", "metrics")
TRAINING_STACK = ("lightning", "pytorch_lightning", "wandb")
# Layers below the CLI: none of them imports ``cfl_lightning.cli``.
LAYERS = [
    "analysis", "automata", "callbacks", "data", "ensemble", "metrics", "models", "sampling",
    "semiring", "sweep",
]


def _modules(root: Path) -> dict[str, Path]:
    """``{dotted name: file}`` of every module of the package at ``root``."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it names in an import (anywhere in the file).

    ``from a.b import c`` names ``a.b`` and, when it is a module, ``a.b.c``; parent packages
    imported implicitly are not edges (every submodule would otherwise form a cycle with them).
    """
    modules = _modules(root)
    graph = {}
    for name, path in modules.items():
        edges = set()
        for imported in _imported_modules(path, root):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                edges.add(imported)
        graph[name] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component with more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(_path_through(graph, sorted(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def _path_through(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A cycle from ``component[0]`` back to itself within the component (breadth first)."""
    start, inside = component[0], set(component)
    parents: dict[str, str] = {}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph[node] & inside):
            if nxt == start:
                path = [node]  # node, its parent, ..., start
                while path[-1] != start:
                    path.append(parents[path[-1]])
                return [*reversed(path), start]
            if nxt not in parents:
                parents[nxt] = node
                queue.append(nxt)
    return component


def test_no_import_cycles():
    assert find_cycles(import_graph(PACKAGE)) == []


@pytest.mark.parametrize("layer", LAYERS)
def test_no_layer_imports_cli(layer):
    assert _offenders(layer, "cfl_lightning.cli") == []


@pytest.mark.parametrize("core", CORE)
def test_core_imports_no_lightning_or_wandb(core):
    assert [o for name in TRAINING_STACK for o in _offenders(core, name)] == []


@pytest.mark.parametrize(
    "forbidden", ["cfl_lightning.ensemble", "cfl_lightning.cli", "cfl_lightning.models",
                  "cfl_lightning.data", "torch", *TRAINING_STACK],
)
def test_sweep_launches_processes_and_imports_no_training_code(forbidden):
    assert _offenders("sweep", forbidden) == []


def test_old_sweep_modules_are_gone():
    """No compatibility shim: grid planning, the runner and grouping live in ``sweep`` only."""
    for old in ("analysis/sweeps.py", "runner.py", "ensemble/sweep.py"):
        assert not (PACKAGE / old).exists(), old


# --------------------------------------------------------------------------- negative controls


def _fake_package(tmp_path, files):
    root = tmp_path / "cfl_lightning"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n", encoding="utf-8")
    return root


@pytest.mark.parametrize("source", [
    "from cfl_lightning.cli.wandb_mode import x",
    "import cfl_lightning.cli",
    "from ..cli import common",
    "from .. import cli",
    "def f():\n    from cfl_lightning.cli import sweep\n",
])
def test_layering_check_catches_a_cli_import(tmp_path, monkeypatch, source):
    """Negative control: the checker sees every spelling of the forbidden import."""
    fake = _fake_package(tmp_path, {"analysis/bad.py": source})
    monkeypatch.setitem(globals(), "PACKAGE", fake)
    assert _offenders("analysis", "cfl_lightning.cli") != []


def test_cycle_check_catches_a_lazy_cycle(tmp_path):
    """Negative control: the shim of old (a lazy import in ``__getattr__``) closes a cycle."""
    fake = _fake_package(tmp_path, {
        "__init__.py": "",
        "analysis/__init__.py": "",
        "analysis/sweeps.py": "def __getattr__(name):\n    from cfl_lightning import runner\n",
        "runner.py": "from cfl_lightning.ensemble.sweep import plan_jobs",
        "ensemble/__init__.py": "",
        "ensemble/sweep.py": "from cfl_lightning.analysis.sweeps import build_command",
        "sweep/__init__.py": "from cfl_lightning.sweep import grid",
        "sweep/grid.py": "import os",
    })
    cycles = find_cycles(import_graph(fake))
    assert len(cycles) == 1 and cycles[0][0] == cycles[0][-1]
    assert set(cycles[0]) == {
        "cfl_lightning.analysis.sweeps", "cfl_lightning.runner", "cfl_lightning.ensemble.sweep"}
    assert find_cycles(import_graph(PACKAGE)) == []  # and the real package has none


def test_stack_checks_catch_lightning_in_the_core_and_training_code_in_sweep(tmp_path, monkeypatch):
    fake = _fake_package(tmp_path, {
        "sampling/bad.py": "def f():\n    import lightning.pytorch as pl\n",
        "metrics/bad.py": "from wandb import Run",
        "sweep/bad.py": "from cfl_lightning.ensemble.trainer import EnsembleTrainer",
    })
    monkeypatch.setitem(globals(), "PACKAGE", fake)
    assert _offenders("sampling", "lightning") != []
    assert _offenders("metrics", "wandb") != []
    assert _offenders("sweep", "cfl_lightning.ensemble") != []
    assert _offenders("sweep", "torch") == []  # only what is there is found


def test_cli_wandb_mode_still_importable():
    from cfl_lightning import wandb_mode
    from cfl_lightning.cli import wandb_mode as old

    assert old.ensure_wandb_mode is wandb_mode.ensure_wandb_mode
    assert old.has_wandb_credentials is wandb_mode.has_wandb_credentials
