"""Static checks of the package's layering (read from the source files, nothing imported)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "cfl_lightning"


def _imported_modules(path: Path) -> list[str]:
    """Absolute names of every module imported anywhere in ``path`` (relative imports resolved)."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
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


def test_analysis_does_not_import_cli():
    assert _offenders("analysis", "cfl_lightning.cli") == []


@pytest.mark.parametrize("source", [
    "from cfl_lightning.cli.wandb_mode import x",
    "import cfl_lightning.cli",
    "from ..cli import common",
    "from .. import cli",
    "def f():\n    from cfl_lightning.cli import sweep\n",
])
def test_layering_check_catches_a_cli_import(tmp_path, monkeypatch, source):
    """Negative control: the checker sees every spelling of the forbidden import."""
    fake = tmp_path / "cfl_lightning"
    (fake / "analysis").mkdir(parents=True)
    (fake / "analysis" / "bad.py").write_text(source + "\n", encoding="utf-8")
    monkeypatch.setitem(globals(), "PACKAGE", fake)
    assert _offenders("analysis", "cfl_lightning.cli") != []


def test_cli_wandb_mode_still_importable():
    from cfl_lightning import wandb_mode
    from cfl_lightning.cli import wandb_mode as old

    assert old.ensure_wandb_mode is wandb_mode.ensure_wandb_mode
    assert old.has_wandb_credentials is wandb_mode.has_wandb_credentials
