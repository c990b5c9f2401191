"""Every ensemble member logs as its own fit would: a W&B run and a CSV log (issue 39; slow).

Two points (dropout 0) trained as one ensemble job (``sweep --ensemble 2``) and each fitted
alone (``sweep``), with ``WANDB_MODE=offline``; each member's offline run (read back with
``wandb leet inspect --json``) and ``metrics.csv`` are checked against the plain fit's keys:
every epoch row holds exactly the plain fit's per-epoch keys. The values are checked against
the plain fit of the same point, an independent computation (its own DecomposedKLCallback and
ResultsWriter): the logged test ``kl_total`` (which a member logs from its results.json) and
every epoch's ``val/kl_per_string``.
"""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")  # before anything imports wandb

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, tiny_fit_grid

pytestmark = pytest.mark.slow

GRID = tiny_fit_grid("logs", "values: [0, 1]", "value: 30").replace(
    "command:\n", "  model.init_args.dropout:\n    value: 0.0\ncommand:\n"
)  # dropout 0: each member trains as its plain fit
WANDB_OWN = {"_runtime", "_step", "_timestamp"}


def _wandb_run(point: Path) -> tuple[list[dict], dict]:
    """``(history rows, merged config)`` of the point's one offline W&B run."""
    (run,) = sorted((point / "wandb").glob("offline-run-*"))
    wandb = shutil.which("wandb") or str(Path(sys.executable).with_name("wandb"))
    out = subprocess.run([wandb, "leet", "inspect", "--json", str(run)], capture_output=True,
                         text=True, timeout=120, check=True)
    history, config = [], {}
    for line in out.stdout.splitlines():
        record = json.loads(line)
        if record["type"] == "history":
            history.append({k: v for k, v in record["history"]["item"].items()
                            if k not in WANDB_OWN})
        elif record["type"] == "config":
            config.update(record["config"]["update"])
    return history, config


def _csv(point: Path) -> tuple[list[str], list[dict]]:
    (path,) = point.glob("csv/version_*/metrics.csv")
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    return list(rows[0].keys()), rows


def _filled(row: dict) -> set[str]:
    """The columns of a CSV row that hold a value."""
    return {k for k, v in row.items() if v not in ("", None)}


def test_each_ensemble_member_logs_a_wandb_run_and_a_csv_log_like_its_fit(tmp_path):
    (tmp_path / "grid.yaml").write_text(GRID)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
           "WANDB_MODE": "offline", "CFL_LIGHTNING_CACHE": str(tmp_path / "cache")}
    for out, extra in (("ensemble", ["--ensemble", "2"]), ("plain", [])):
        proc = subprocess.run(
            [sys.executable, "-m", "cfl_lightning", "sweep", str(tmp_path / "grid.yaml"),
             "--output", str(tmp_path / out), *extra],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    plain_points = {
        (p / "params.json").read_text(): p
        for p in (tmp_path / "plain").iterdir() if (p / "params.json").exists()
    }
    assert len(plain_points) == 2
    plain_point = min(plain_points.values())
    plain_history, plain_config = _wandb_run(plain_point)
    plain_keys = set().union(*plain_history)
    plain_epoch_keys = set().union(*(row for row in plain_history
                                     if "epoch" in row and "kl_total" not in row))
    assert {"train/kl_per_string", "train/ce_per_string", "train/kl_per_token",
            "val/kl_per_string", "val/ce_per_string", "val/kl_per_token", "val/kl_total",
            "val/kl_target", "epoch"} <= plain_epoch_keys
    plain_columns, plain_rows = _csv(plain_point)
    plain_csv_epoch = set().union(*(_filled(row) for row in plain_rows if row.get("epoch")
                                    and not row.get("kl_total")))
    members = sorted(p for p in (tmp_path / "ensemble").iterdir() if (p / "params.json").exists())
    assert len(members) == 2
    for point in members:
        params = json.loads((point / "params.json").read_text())
        results = json.loads(next(point.rglob("results.json")).read_text())
        history, config = _wandb_run(point)
        keys = set().union(*history)
        assert keys <= plain_keys, keys - plain_keys  # nothing a plain fit would not log
        assert {"trainer/global_step", "kl_total", "kl_target"} <= keys
        assert "ensemble/live" not in keys  # the ensemble's own metrics stay in its job log
        epochs = [row for row in history if "train/loss" in row]
        assert len(epochs) == results["epochs"]
        # every epoch: exactly the per-epoch keys of the plain fit (train/*, val/*, epoch)
        for row in epochs:
            assert set(row) == plain_epoch_keys, set(row) ^ plain_epoch_keys
        # the values, against the plain fit of the same point (computed on its own)
        plain = plain_points[(point / "params.json").read_text()]
        plain_results = json.loads(next(plain.rglob("results.json")).read_text())
        final = next(row for row in history if "kl_total" in row)
        assert final["kl_total"] == pytest.approx(plain_results["kl_total"], rel=1e-4)
        assert [row["val/kl_per_string"] for row in epochs] == pytest.approx(
            [row["val/kl_per_string"] for row in _wandb_run(plain)[0]
             if "val/kl_per_string" in row], rel=1e-4)
        # the sweep's parameters, in the config its fit logs
        assert {"data", "model_hparams", "model_class"} <= set(config) <= set(plain_config)
        assert config["data"]["num_strings"] == params["data.num_strings"]
        columns, rows = _csv(point)
        assert set(columns) <= set(plain_columns) and {"train/loss", "kl_total"} <= set(columns)
        assert sum(1 for row in rows if row.get("train/loss")) == results["epochs"]
        (csv_total,) = [float(row["kl_total"]) for row in rows if row.get("kl_total")]
        assert csv_total == pytest.approx(plain_results["kl_total"], rel=1e-4)
        # the CSV's per-epoch rows hold the plain fit's per-epoch columns, no more, no fewer
        member_csv_epoch = set().union(*(_filled(row) for row in rows if row.get("train/loss")))
        assert member_csv_epoch == plain_csv_epoch, member_csv_epoch ^ plain_csv_epoch
        assert next(point.glob("csv/version_*/hparams.yaml")).is_file()
