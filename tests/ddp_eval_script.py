"""Validate and test one seeded, untrained model with 1 or 2 CPU processes (used by
tests/test_callbacks.py; Lightning's ``ddp`` strategy re-runs this file for rank 1).

    python tests/ddp_eval_script.py OUT_DIR DEVICES [VAL_STRINGS TEST_STRINGS]

Each process writes ``OUT_DIR/rank{R}_of{W}.json`` with its validation and test metrics.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")

import lightning as L  # noqa: E402
import torch  # noqa: E402

from cfl_lightning.callbacks import DecomposedKLCallback  # noqa: E402
from cfl_lightning.data import PFADataModule  # noqa: E402
from cfl_lightning.models import LSTMLanguageModel  # noqa: E402


def main(out: Path, devices: int, val_strings: int = 101, test_strings: int = 333) -> None:
    torch.set_num_threads(1)
    dm = PFADataModule(generator="parity_resampled", weight_seed=3, intervention="exact",
                       event="state:odd", count=60, num_strings=40, val_strings=val_strings,
                       test_strings=test_strings, max_tokens=64, seed=5, cache_dir="none",
                       device="cpu")
    L.seed_everything(11, verbose=False)
    model = LSTMLanguageModel(num_symbols=dm.num_symbols, param_budget=5_000)
    trainer = L.Trainer(accelerator="cpu", devices=devices,
                        strategy="ddp" if devices > 1 else "auto",
                        callbacks=[DecomposedKLCallback()], logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    (val,) = trainer.validate(model, datamodule=dm, verbose=False)
    val_local = {k: float(v) for k, v in trainer.callback_metrics.items()}
    val_batches = list(trainer.num_val_batches)  # this rank's validation batches
    (test,) = trainer.test(model, datamodule=dm, verbose=False)
    rank, world = trainer.global_rank, trainer.world_size
    record = {"val": val, "val_callback_metrics": val_local, "test": test,
              "num_val_batches": val_batches}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}_of{world}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(Path(sys.argv[1]), *map(int, sys.argv[2:]))
