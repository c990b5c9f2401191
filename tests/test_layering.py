"""Static checks of the package's layering (read from the source files, nothing imported)."""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
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


def external_imports(root: Path) -> dict[str, set[str]]:
    """Module -> the top-level names of the modules outside the package it imports anywhere
    (``lightning``, ``wandb``, ``torch``, ...)."""
    package = root.name
    found = {}
    for name, path in _modules(root).items():
        tops = {imported.split(".")[0] for imported in _imported_modules(path, root) if imported}
        found[name] = tops - {package}
    return found


def _with_parents(name: str, modules: dict) -> list[str]:
    """``name`` and the packages above it that importing it runs (``a.b.c`` -> ``a.b``, ``a``)."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in modules]


def reach(graph: dict[str, set[str]], starts: list[str]) -> dict[str, list[str]]:
    """Every module that importing ``starts`` may import (lazy imports and the parent packages'
    ``__init__`` included), each with one import chain from a start to it."""
    chains: dict[str, list[str]] = {}
    queue = []
    for start in starts:
        for name in _with_parents(start, graph):
            if name not in chains:
                chains[name] = [start] if name == start else [start, name]
                queue.append(name)
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph[node]):
            for name in _with_parents(nxt, graph):
                if name not in chains:
                    chains[name] = [*chains[node], name]
                    queue.append(name)
    return chains


def unit_of(name: str, package: str = "cfl_lightning") -> str | None:
    """The top-level unit of a module (``cfl_lightning.data.cache`` -> ``cfl_lightning.data``);
    None for the package root itself."""
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == package and len(parts) > 1 else None


def members(graph: dict[str, set[str]], unit: str) -> list[str]:
    """The modules of a unit (the unit's own module or package and everything below it)."""
    return [name for name in graph if name == unit or name.startswith(unit + ".")]


def transitive_offenders(
    root: Path, unit: str, forbidden: tuple[str, ...]
) -> list[str]:
    """Import chains from ``unit`` to a forbidden module: a package module (``cfl_lightning.X``)
    or an outside package (``lightning``), as ``a -> b -> ... -> forbidden``."""
    graph, external = _read(root)
    found = []
    for name, chain in sorted(reach(graph, members(graph, unit)).items()):
        for bad in forbidden:
            if name == bad or name.startswith(bad + "."):
                found.append(" -> ".join(chain))
            elif "." not in bad and bad in external[name]:
                found.append(" -> ".join([*chain, bad]))
    return found


def unit_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between top-level units (``cfl_lightning.X``; the package root, whose
    ``__init__`` only re-exports, is left out), without self-edges."""
    units: dict[str, set[str]] = {}
    for name, edges in graph.items():
        source = unit_of(name)
        if source is None:
            continue
        targets = units.setdefault(source, set())
        for edge in edges:
            target = unit_of(edge)
            if target is not None and target != source:
                targets.add(target)
    return units


def longest_chain(units: dict[str, set[str]]) -> list[str]:
    """The longest import chain of an acyclic unit graph (its length is the layer count)."""
    best: dict[str, list[str]] = {}

    def chain(node: str) -> list[str]:
        if node not in best:
            below = [chain(nxt) for nxt in sorted(units.get(node, ()))]
            best[node] = [node, *max(below, key=len, default=[])]
        return best[node]

    return max((chain(node) for node in sorted(units)), key=len, default=[])


def figures(root: Path = PACKAGE) -> dict[str, object]:
    """The import graph's figures: units, edges between them, layers and the longest chain."""
    graph, _ = _read(root)
    units = unit_graph(graph)
    chain = longest_chain(units) if not find_cycles(units) else []
    return {
        "units": len(units),
        "edges": sum(len(v) for v in units.values()),
        "layers": len(chain),
        "chain": [name.split(".", 1)[1] for name in chain],
        "modules": len(graph),
    }


@functools.lru_cache(maxsize=8)
def _read(root: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """The import graph and the outside imports of the package at ``root`` (read once)."""
    return import_graph(root), external_imports(root)


#: the layer count must stay below this (issue 23: it had reached 13)
MAX_LAYERS = 13


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


UNITS = sorted(unit_graph(import_graph(PACKAGE)))
#: every unit but the command line and the entry point that dispatches to it
BELOW_CLI = [u for u in UNITS if u not in ("cfl_lightning.cli", "cfl_lightning.__main__")]


@pytest.mark.parametrize("core", CORE)
def test_core_reaches_no_lightning_or_wandb(core):
    """Nothing the core imports, however indirectly (lazy imports, other units, the packages'
    ``__init__``), imports Lightning or wandb."""
    assert transitive_offenders(PACKAGE, f"cfl_lightning.{core}", TRAINING_STACK) == []


def test_metrics_reach_no_data():
    assert transitive_offenders(PACKAGE, "cfl_lightning.metrics", ("cfl_lightning.data",)) == []


@pytest.mark.parametrize("unit", BELOW_CLI)
def test_nothing_below_the_cli_reaches_it(unit):
    assert transitive_offenders(PACKAGE, unit, ("cfl_lightning.cli",)) == []


def test_units_form_no_cycle():
    assert find_cycles(unit_graph(import_graph(PACKAGE))) == []


def test_fewer_layers_than_the_limit():
    """The longest import chain between top-level units has fewer than MAX_LAYERS units."""
    found = figures()
    assert found["layers"] < MAX_LAYERS, found
    # the figures describe the real package (a sanity floor: an empty read would pass above)
    assert found["units"] >= 20 and found["edges"] >= 60 and found["layers"] >= 8, found
    assert found["chain"][-1] == "errors" and "cfl_lightning.cli" in UNITS
    assert {"cfl_lightning.results", "cfl_lightning.sweep", "cfl_lightning.io"} <= set(BELOW_CLI)


_STACK_PROBE = """
import sys
def stack():
    return sorted({m.split(".")[0] for m in sys.modules} & {"lightning", "pytorch_lightning", "wandb"})
import cfl_lightning.automata, cfl_lightning.semiring, cfl_lightning.sampling, cfl_lightning.metrics
print(stack())
import cfl_lightning.models
print(stack())
"""


@pytest.mark.slow  # two imports of torch, one of Lightning: ~5-15 s
def test_importing_the_core_loads_no_lightning_or_wandb():
    """At run time too (dynamic imports included); importing the models, which are Lightning
    modules, is the probe's negative control."""
    out = subprocess.run(
        [sys.executable, "-c", _STACK_PROBE], capture_output=True, text=True, timeout=300,
        env={**os.environ, "WANDB_MODE": "disabled"}, check=True,
    ).stdout.splitlines()
    assert out[0] == "[]" and "lightning" in out[1], out


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


def test_transitive_checks_catch_what_the_direct_one_misses(tmp_path, monkeypatch):
    """Negative control: Lightning behind another unit, wandb in a parent package's __init__,
    data behind losses, and the CLI behind a helper are all found, with their chains."""
    fake = _fake_package(tmp_path, {
        "__init__.py": "",
        "helpers.py": "def f():\n    import lightning.pytorch as pl\n    from .cli import common\n",
        "sampling/__init__.py": "",
        "sampling/x.py": "from cfl_lightning import helpers",
        "metrics/__init__.py": "",
        "metrics/m.py": "from cfl_lightning.losses import loss",
        "losses.py": "from cfl_lightning.data.batching import collate",
        "data/__init__.py": "import wandb",
        "data/batching.py": "collate = None",
        "automata/__init__.py": "import torch",
        "models/__init__.py": "",
        "models/x.py": "from cfl_lightning.helpers import f",
        "cli/__init__.py": "",
        "cli/common.py": "from cfl_lightning.models import x",
    })
    monkeypatch.setitem(globals(), "PACKAGE", fake)
    assert _offenders("sampling", "lightning") == [] and _offenders("metrics", "wandb") == []
    found = transitive_offenders(fake, "cfl_lightning.sampling", TRAINING_STACK)
    assert found == ["cfl_lightning.sampling.x -> cfl_lightning.helpers -> lightning"]
    found = transitive_offenders(fake, "cfl_lightning.metrics", TRAINING_STACK)
    assert found == [
        "cfl_lightning.metrics.m -> cfl_lightning.losses -> cfl_lightning.data -> wandb"
    ]
    found = transitive_offenders(fake, "cfl_lightning.metrics", ("cfl_lightning.data",))
    assert "cfl_lightning.metrics.m -> cfl_lightning.losses -> cfl_lightning.data.batching" in found
    found = transitive_offenders(fake, "cfl_lightning.models", ("cfl_lightning.cli",))
    assert "cfl_lightning.models.x -> cfl_lightning.helpers -> cfl_lightning.cli.common" in found
    assert transitive_offenders(fake, "cfl_lightning.automata", TRAINING_STACK) == []  # torch: ok
    assert find_cycles(import_graph(fake))  # cli.common -> models.x -> helpers -> cli.common


def _chain_package(tmp_path, length):
    """A package whose units ``u0 -> u1 -> ... -> u{length-1}`` import each other in a chain."""
    files = {"__init__.py": ""}
    for i in range(length):
        files[f"u{i}.py"] = f"from cfl_lightning import u{i + 1}" if i + 1 < length else ""
    return _fake_package(tmp_path / str(length), files)


def test_layer_count_catches_a_long_chain_and_a_unit_cycle(tmp_path):
    """Negative control: MAX_LAYERS units in a chain are too many, one fewer are not; two units
    that import each other through different modules form a cycle the module graph lacks."""
    too_long = figures(_chain_package(tmp_path, MAX_LAYERS))
    assert too_long["layers"] == MAX_LAYERS and not too_long["layers"] < MAX_LAYERS
    assert too_long["chain"][0] == "u0" and too_long["units"] == MAX_LAYERS
    assert figures(_chain_package(tmp_path, MAX_LAYERS - 1))["layers"] < MAX_LAYERS
    fake = _fake_package(tmp_path / "cycle", {
        "__init__.py": "",
        "a/__init__.py": "",
        "a/x.py": "from cfl_lightning.b.y import f",
        "a/w.py": "w = 1",
        "b/__init__.py": "",
        "b/y.py": "f = 1",
        "b/z.py": "from cfl_lightning.a.w import w",
    })
    assert find_cycles(import_graph(fake)) == []
    assert find_cycles(unit_graph(import_graph(fake))) != []
    assert figures(fake)["layers"] == 0  # no layering of a cyclic graph


if __name__ == "__main__":  # python tests/test_layering.py: the import graph's figures
    print(figures())
