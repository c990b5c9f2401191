"""The package's layering: import-linter contracts (``[tool.importlinter]`` in pyproject.toml) and,
in Python, only what a contract cannot say (the floor count with the package root counted, import
cycles through a package's own ``__init__``, and what is imported at run time). Each rule has a
negative control: a copy of the package with one bad import breaks that rule and no other.

``python tests/test_layering.py`` prints the import graph's figures.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import PACKAGE, REPO, on_path, offenders, package_graph

#: issue 29: at most 11 floors (the longest import chain between units, the package root counted)
MAX_FLOORS = 11

CONTRACTS = ["floors", "core-no-training-stack", "metrics-no-data", "sweep-no-training-code",
             "no-cycles"]


# --------------------------------------------------------------------------- what contracts miss


def module_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in its file)."""
    graph = package_graph(root)
    return {m: set(graph.find_modules_directly_imported_by(m)) - {m} for m in graph.modules}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component with more than one node
    (a package's ``__init__`` and its own modules included, which no contract compares)."""
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
            while component[-1:] != [node]:
                component.append(stack.pop())
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


def floors(root: Path) -> dict[str, object]:
    """The units (the root package and each ``root.X``), the edges between them, their cycles,
    and the floor count: the longest chain of units importing each other (0 when cyclic)."""
    def unit(name: str) -> str:
        return ".".join(name.split(".")[:2])

    units: dict[str, set[str]] = {}
    for name, edges in module_graph(root).items():
        units.setdefault(unit(name), set()).update(unit(e) for e in edges if unit(e) != unit(name))
    cycles = find_cycles(units)
    best: dict[str, list[str]] = {}

    def chain(node: str) -> list[str]:
        if node not in best:
            best[node] = [node, *max((chain(n) for n in sorted(units[node])), key=len, default=[])]
        return best[node]

    longest = [] if cycles else max((chain(n) for n in sorted(units)), key=len, default=[])
    return {
        "units": len(units),
        "edges": sum(len(v) for v in units.values()),
        "cycles": cycles,
        "floors": len(longest),
        "chain": [n.split(".", 1)[-1] if "." in n else n for n in longest],
    }


# --------------------------------------------------------------------------- the contracts


def contract_ids() -> list[str]:
    """The ids of the ``[tool.importlinter]`` contracts in pyproject.toml, in order."""
    import tomllib

    with open(REPO / "pyproject.toml", "rb") as handle:
        return [c["id"] for c in tomllib.load(handle)["tool"]["importlinter"]["contracts"]]


def broken_contracts(root: Path, only: list[str] | None = None) -> dict[str, str]:
    """``{contract id: import-linter's account}`` of the pyproject.toml contracts that the package
    at ``root`` breaks (run in process as ``lint-imports`` would, no cache; ``cfl_lightning``
    renamed to ``root.name`` throughout the configuration)."""
    import tempfile

    from importlinter import configuration
    from importlinter.application import use_cases

    configuration.configure()
    use_cases._register_built_in_contract_types()  # as lint-imports does
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "pyproject.toml"
        config.write_text(text.replace("cfl_lightning", root.name), encoding="utf-8")
        options = use_cases.read_user_options(str(config))
    options.contracts_options = [
        c for c in options.contracts_options if only is None or c["id"] in only]
    ids = {c["name"]: c["id"] for c in options.contracts_options}
    with on_path(root):
        report = use_cases.create_report(options, cache_dir=None)
    assert not report.could_not_run, report.invalid_contract_options
    return {ids[contract.name]: repr(check.metadata)
            for contract, check in report.get_contracts_and_checks() if not check.kept}


# --------------------------------------------------------------------------- the checks


def test_the_contracts_are_configured():
    """Every rule has its contract in pyproject.toml (a deleted contract cannot pass unseen)."""
    assert contract_ids() == CONTRACTS


def test_the_package_keeps_its_import_contracts():
    assert broken_contracts(PACKAGE) == {}


def test_at_most_eleven_floors_and_no_cycle():
    """The longest chain of units importing each other, the package root counted as a unit (the
    floors contract cannot count: siblings on one floor may import each other)."""
    found = floors(PACKAGE)
    assert found["cycles"] == [] and find_cycles(module_graph(PACKAGE)) == [], found
    assert found["floors"] <= MAX_FLOORS, found
    # the figures describe the real package (a sanity floor: an empty read would pass above)
    assert found["units"] >= 20 and found["edges"] >= 60 and found["floors"] >= 8, found
    assert found["chain"][0] == "cli" and found["chain"][-1] == "errors", found
    assert len(module_graph(PACKAGE)) >= 100


_STACK_PROBE = """
import sys
def stack():
    return sorted({m.split(".")[0] for m in sys.modules} & {"lightning", "pytorch_lightning", "wandb"})
import cfl_lightning.automata, cfl_lightning.semiring, cfl_lightning.sampling, cfl_lightning.metrics
print(stack())
import cfl_lightning.models
print(stack())
"""


@pytest.mark.slow  # a fresh interpreter: two imports of torch, one of Lightning
def test_importing_the_core_loads_no_lightning_or_wandb():
    """At run time too (dynamic imports included); importing the models, which are Lightning
    modules, is the probe's negative control. (In its own process: this one has Lightning.)"""
    out = subprocess.run(
        [sys.executable, "-c", _STACK_PROBE], capture_output=True, text=True, check=True,
        env={**os.environ, "WANDB_MODE": "disabled"}, cwd=REPO,
    ).stdout.splitlines()
    assert out[0] == "[]" and "lightning" in out[1], out


def test_old_sweep_modules_are_gone():
    """No compatibility shim: grid planning, the runner and grouping live in ``sweep`` only."""
    for old in ("analysis/sweeps.py", "runner.py", "ensemble/sweep.py"):
        assert not (PACKAGE / old).exists(), old


def test_cli_wandb_mode_still_importable():
    from cfl_lightning import wandb_mode
    from cfl_lightning.cli import wandb_mode as old

    assert old.ensure_wandb_mode is wandb_mode.ensure_wandb_mode
    assert old.has_wandb_credentials is wandb_mode.has_wandb_credentials


# --------------------------------------------------------------------------- negative controls

FAKE = "fakecfl"


def _copy_with(tmp_path: Path, edits: dict[str, str]) -> Path:
    """A copy of the package named ``fakecfl`` (imports renamed), with ``edits`` appended to (or
    creating) the named files."""
    root = tmp_path / FAKE
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    for path in root.rglob("*.py"):
        path.write_text(path.read_text(encoding="utf-8").replace("cfl_lightning", FAKE),
                        encoding="utf-8")
    for name, text in edits.items():
        path = root / name
        with path.open("a", encoding="utf-8") as handle:
            handle.write("\n" + text + "\n")
    return root


@pytest.mark.parametrize("contract,edits", [
    # an arrow back up, lazy (floor 1 -> floor 2; io does not import wandb_mode: no cycle)
    ("floors", {"wandb_mode.py": "def _f():\n    from fakecfl.io import atomic_write_text"}),
    # a new unit placed on no floor
    ("floors", {"newunit.py": "X = 1"}),
    # wandb behind another unit (sampling -> progress -> wandb)
    ("core-no-training-stack", {"progress.py": "def _f():\n    import wandb"}),
    # data beside the metrics on their floor, but not for them
    ("metrics-no-data", {"metrics/bad.py": "from fakecfl.data import batching"}),
    ("sweep-no-training-code", {"sweep/bad.py": "def _f():\n    import torch"}),
    # two modules of one package importing each other
    ("no-cycles", {"semiring/bad_a.py": "from fakecfl.semiring.bad_b import b\na = 1",
                   "semiring/bad_b.py": "from fakecfl.semiring.bad_a import a\nb = 1"}),
])
def test_each_contract_catches_its_own_fault(tmp_path, contract, edits):
    """Negative control: one bad import breaks its contract, and only it."""
    fake = _copy_with(tmp_path, edits)
    assert broken_contracts(fake).keys() == {contract}


def _fake_package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / FAKE
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n", encoding="utf-8")
    return root


def _chain(tmp_path: Path, length: int, through_root: bool = False) -> Path:
    """Units ``u0 -> u1 -> ... -> u{length-1}``; with ``through_root`` the middle link goes
    through the package root (``u_k`` imports the root, whose ``__init__`` imports ``u_{k+1}``)."""
    files = {"__init__.py": ""}
    middle = length // 2
    for i in range(length - 1):
        files[f"u{i}.py"] = f"from {FAKE} import u{i + 1}"
    files[f"u{length - 1}.py"] = ""
    if through_root:
        files[f"u{middle}.py"] = f"import {FAKE}"
        files["__init__.py"] = f"from {FAKE} import u{middle + 1}"
    return _fake_package(tmp_path / f"{length}-{through_root}", files)


def test_the_floor_count_catches_a_long_chain_the_root_and_a_unit_cycle(tmp_path):
    """Negative control: 12 units in a chain are too many, 11 are not; a unit that imports the
    package root sits above what the root imports; two units that import each other through
    different modules form a cycle the module graph lacks."""
    too_long = floors(_chain(tmp_path, MAX_FLOORS + 1))
    assert too_long["floors"] == MAX_FLOORS + 1 and too_long["chain"][0] == "u0"
    assert floors(_chain(tmp_path, MAX_FLOORS))["floors"] == MAX_FLOORS
    # 11 modules, but u5 -> root -> u6: the root is a twelfth floor
    via_root = floors(_chain(tmp_path, MAX_FLOORS, through_root=True))
    assert via_root["floors"] == MAX_FLOORS + 1 and FAKE in via_root["chain"], via_root
    fake = _fake_package(tmp_path / "cycle", {
        "__init__.py": "",
        "a/__init__.py": "",
        "a/x.py": f"from {FAKE}.b.y import f",
        "a/w.py": "w = 1",
        "b/__init__.py": "",
        "b/y.py": "f = 1",
        "b/z.py": f"def g():\n    from {FAKE}.a.w import w",
    })
    assert find_cycles(module_graph(fake)) == []
    found = floors(fake)
    assert found["cycles"] != [] and found["floors"] == 0  # no floors in a cyclic graph


def test_the_module_cycle_check_catches_a_cycle_through_a_package_init(tmp_path):
    """Negative control: a package whose ``__init__`` imports a module that imports the package
    back (the acyclic-siblings contract looks at siblings only)."""
    fake = _fake_package(tmp_path, {
        "__init__.py": "",
        "data/__init__.py": f"from {FAKE}.data.cache import load\nLIMIT = 1",
        "data/cache.py": f"def load():\n    from {FAKE}.data import LIMIT",
    })
    assert find_cycles(module_graph(fake)) == [
        [f"{FAKE}.data", f"{FAKE}.data.cache", f"{FAKE}.data"]]
    assert broken_contracts(fake, only=["no-cycles"]) == {}  # what the contract misses


def test_offenders_sees_every_spelling_of_an_import(tmp_path):
    """Negative control of the helper tests/test_ensemble.py uses."""
    fake = _fake_package(tmp_path, {
        "__init__.py": "",
        "cli/__init__.py": "",
        "cli/common.py": "X = 1",
        "analysis/__init__.py": "",
        "analysis/a.py": f"from {FAKE}.cli.common import X",
        "analysis/b.py": "from ..cli import common",
        "analysis/c.py": f"def f():\n    import {FAKE}.cli",
        "analysis/d.py": "import os",
    })
    found = offenders("analysis", f"{FAKE}.cli", package=fake)
    assert [line.split(" imports ")[0] for line in found] == [
        f"{FAKE}/analysis/a.py", f"{FAKE}/analysis/b.py", f"{FAKE}/analysis/c.py"], found
    assert offenders("analysis", "lightning", package=fake) == []


if __name__ == "__main__":  # python tests/test_layering.py: the import graph's figures
    print(floors(PACKAGE))
