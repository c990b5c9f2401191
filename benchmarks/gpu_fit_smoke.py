"""GPU check of the Lightning layer: the same model evaluated on CUDA and on the CPU.

Samples one corpus (on the GPU when there is one), builds a seeded, untrained
``LSTMLanguageModel``, and tests it with ``DecomposedKLCallback`` + ``ResultsWriter`` once with
``accelerator="gpu"`` and once with ``accelerator="cpu"`` on the same strings; prints both
``kl_total`` / ``kl_target`` values and their relative difference (float32 model, float64 sums),
then trains 3 epochs on the GPU and prints the wall time and the tested ``kl_total``.

Usage::

    PYTHONPATH=$PWD python benchmarks/gpu_fit_smoke.py [--device cpu] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import warnings

os.environ.setdefault("WANDB_MODE", "disabled")

import lightning as L  # noqa: E402
import torch  # noqa: E402

from cfl_lightning import DecomposedKLCallback, PFADataModule, ResultsWriter  # noqa: E402
from cfl_lightning.models import LSTMLanguageModel  # noqa: E402


def _test(model, dm, accelerator: str, root: str) -> dict:
    writer = ResultsWriter(path=os.path.join(root, f"results_{accelerator}.json"))
    trainer = L.Trainer(accelerator=accelerator, devices=1, logger=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[DecomposedKLCallback(), writer], default_root_dir=root)
    out = trainer.test(model, datamodule=dm, verbose=False)[0]
    return {k: float(v) for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    root = args.out or tempfile.mkdtemp()
    accelerator = "gpu" if args.device == "cuda" else "cpu"
    print(f"torch {torch.__version__}; cuda available: {torch.cuda.is_available()}"
          + (f" ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else ""))
    dm = PFADataModule(generator="parity_resampled", weight_seed=1, intervention="exact",
                       event="state:odd", count=600, num_strings=200, seed=0,
                       device=args.device)
    start = time.perf_counter()
    dm.setup("fit")
    print(f"setup on {dm.device}: {time.perf_counter() - start:.3f} s")
    L.seed_everything(0, verbose=False)
    model = LSTMLanguageModel(num_symbols=dm.num_symbols)
    here = _test(model, dm, accelerator, root)
    cpu = _test(model.cpu(), dm, "cpu", root)
    print("| metric | %s | cpu | rel. diff |\n|---|---|---|---|" % accelerator)
    for key in ("kl_total", "kl_target", "kl_target_unweighted", "test/kl_per_string"):
        a, b = here.get(key), cpu.get(key)
        if a is None or b is None:
            print(f"| {key} | {a} | {b} | - |")
            continue
        print(f"| {key} | {a:.8f} | {b:.8f} | {abs(a - b) / max(abs(b), 1e-12):.2e} |")
    writer = ResultsWriter(path=os.path.join(root, "results_fit.json"))
    trainer = L.Trainer(accelerator=accelerator, devices=1, max_epochs=3, logger=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, default_root_dir=root,
                        callbacks=[DecomposedKLCallback(), writer])
    start = time.perf_counter()
    trainer.fit(model, datamodule=dm)
    fit_s = time.perf_counter() - start
    result = trainer.test(model, datamodule=dm, verbose=False)[0]
    print(f"3 epochs on {accelerator}: {fit_s:.2f} s; tested kl_total {float(result['kl_total']):.5f}")
    if writer.written is not None:
        keys = sorted(json.loads(open(writer.written).read()))
        print(f"results.json: {writer.written} ({len(keys)} keys)")


if __name__ == "__main__":
    main()
