"""Where the time of one headline-size CPU run goes, against the CPU's matrix-product rate.

Usage::

    python benchmarks/profile_cpu_run.py          # LSTM + transformer, 1 and 2 threads, 3 repeats
    python benchmarks/profile_cpu_run.py --max-epochs 0        # until early stopping (slow)
    python benchmarks/profile_cpu_run.py --models lstm --threads 1 --repeats 1

Each run is ``python -m cfl_lightning fit --config configs/random_topology.yaml`` (50 states,
10 symbols, 500 strings, exact count 300 of ``a``) in a fresh child process with
``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` set, ``WANDB_MODE=disabled`` and an empty corpus cache (so
the corpora are sampled), ``--trainer.max_epochs`` capped (default 20; 0 = the config's bound,
i.e. until early stopping). The child times, by wall clock and by process CPU time
(``time.process_time``), each phase with Lightning hooks of a callback it adds to the Trainer:

* ``start+imports``: interpreter start and imports (the parent's wall/CPU of the child minus
  what the child measured from its first line; plus the child's own imports);
* ``build``: the CLI parsing the config and instantiating model, data and Trainer;
* ``sampling``: the data module's ``setup`` (sampling the three corpora);
* ``train step: forward+loss``, ``backward``, ``clip+optimizer``: per training batch, from
  ``on_train_batch_start`` to ``on_before_backward``, to ``on_after_backward``, to
  ``on_train_batch_end``;
* ``per-batch hooks+loading``: between one batch's end and the next one's start (dataloader,
  collation, logging, Lightning's hooks) and from an epoch's start to its first batch;
* ``validation``: ``on_validation_start`` to ``on_validation_end`` (decomposed KL included);
* ``epoch end (ckpt, early stop)``: the rest of the fit (checkpoints, early stopping, loggers);
* ``test+decomposed KL``: ``trainer.test`` of the best checkpoint, minus ``results``;
* ``results``: ``ResultsWriter.on_test_end`` (building and writing ``results.json``).

The parent interleaves the runs (repeat -> model -> threads), records ``uptime`` before and
after, measures ``torch.mm`` rates at 1 and 2 threads (a 1024 square and the runs' shapes) in
the same script, and prints medians. FLOPs (padded positions): see ``benchmarks/cpu_anchor.py``.
The fraction of the matrix-product rate is the training FLOPs over the training step's CPU time
(or all FLOPs over the whole process's CPU time), divided by the 1-thread rate of a 1024 square
per CPU-second. ``--anchor-only`` prints only the ``torch.mm`` rates.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T0_WALL, T0_CPU = time.perf_counter(), time.process_time()

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

PHASES = (
    "start+imports", "build", "sampling", "train step: forward+loss", "train step: backward",
    "train step: clip+optimizer", "per-batch hooks+loading", "validation",
    "epoch end (ckpt, early stop)", "test+decomposed KL", "results", "other",
)
#: the runs' own product shapes (median training batch of the config: 7 rows x 17 positions;
#: LSTM hidden 124 -> one time step's [rows, H] x [H, 4H]; transformer d 68, feed-forward 321)
LSTM_STEP, TF_FF = (7, 124, 496), (120, 68, 321)
MODELS = {"lstm": "LSTMLanguageModel", "transformer": "TransformerLanguageModel"}


# --------------------------------------------------------------------------------------- child
def _now() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


class _Clock:
    def __init__(self) -> None:
        self.totals: dict[str, list[float]] = {}
        self.mark: tuple[float, float] | None = None

    def add(self, phase: str, since: tuple[float, float], until: tuple[float, float] | None = None):
        until = _now() if until is None else until
        tot = self.totals.setdefault(phase, [0.0, 0.0])
        tot[0] += until[0] - since[0]
        tot[1] += until[1] - since[1]
        return until


def child(args: argparse.Namespace) -> None:
    import lightning.pytorch as pl  # the imports a fit needs (timed)

    from cpu_anchor import forward_flops, net_dims
    from cfl_lightning.callbacks.results_writer import ResultsWriter
    from cfl_lightning.cli.train import build_cli
    from cfl_lightning.data import PFADataModule

    clock = _Clock()
    clock.add("start+imports", (T0_WALL, T0_CPU))
    counts = {"train_flops": 0.0, "eval_flops": 0.0, "train_tokens": 0, "steps": 0}
    state: dict = {}

    class Timer(pl.Callback):
        def on_fit_start(self, trainer, module):
            state["fit"] = _now()
            state["dims"] = net_dims(module)

        def on_train_epoch_start(self, trainer, module):
            state["gap"] = _now()

        def on_train_batch_start(self, trainer, module, batch, idx):
            now = _now()
            clock.add("per-batch hooks+loading", state["gap"], now)
            state["b"] = now
            rows, length = batch["input_ids"].shape
            counts["train_flops"] += 3 * forward_flops(state["dims"], rows, length)
            counts["train_tokens"] += int(batch["mask"].sum())
            counts["steps"] += 1

        def on_before_backward(self, trainer, module, loss):
            state["b"] = clock.add("train step: forward+loss", state["b"])

        def on_after_backward(self, trainer, module):
            state["b"] = clock.add("train step: backward", state["b"])

        def on_train_batch_end(self, trainer, module, outputs, batch, idx):
            state["gap"] = clock.add("train step: clip+optimizer", state["b"])

        def on_validation_start(self, trainer, module):
            state["v"] = _now()

        def on_validation_batch_start(self, trainer, module, batch, idx, dataloader_idx=0):
            rows, length = batch["input_ids"].shape
            counts["eval_flops"] += forward_flops(state["dims"], rows, length)

        def on_test_batch_start(self, trainer, module, batch, idx, dataloader_idx=0):
            rows, length = batch["input_ids"].shape
            counts["eval_flops"] += forward_flops(state["dims"], rows, length)

        def on_validation_end(self, trainer, module):
            clock.add("validation", state["v"])

        def on_fit_end(self, trainer, module):
            state["fit_end"] = _now()

        def on_test_start(self, trainer, module):
            state["test"] = _now()

    timer = Timer()
    setup = PFADataModule.setup

    def timed_setup(self, stage=None):
        t = _now()
        setup(self, stage)
        clock.add("sampling", t)

    PFADataModule.setup = timed_setup
    prepare = PFADataModule.prepare_data

    def timed_prepare(self):
        t = _now()
        prepare(self)
        clock.add("sampling", t)

    PFADataModule.prepare_data = timed_prepare
    write = ResultsWriter.on_test_end

    def timed_write(self, trainer, module):
        t = _now()
        write(self, trainer, module)
        state["results"] = clock.add("results", t)

    ResultsWriter.on_test_end = timed_write

    argv = ["fit", "--config", str(ROOT / "configs" / "random_topology.yaml"),
            f"--model={MODELS[args.model]}", f"--trainer.default_root_dir={args.out}"]
    if args.max_epochs:
        argv.append(f"--trainer.max_epochs={args.max_epochs}")
    t_build = _now()
    import cfl_lightning.cli.train as train_cli
    original_cli = train_cli._cli_class()
    built: dict = {}

    class Probe(original_cli):  # the moment the CLI has built everything and starts fitting
        def before_fit(self):
            built["t"] = _now()
            self.trainer.callbacks.append(timer)
            super().before_fit()

    train_cli._cli_class = lambda: Probe
    build_cli(argv, run=True)
    end = _now()
    # build = parse + instantiate (minus sampling that happened inside it, if any)
    clock.add("build", t_build, built["t"])
    fit_total = [state["fit_end"][i] - state["fit"][i] for i in range(2)]
    inside = ("train step: forward+loss", "train step: backward",
              "train step: clip+optimizer", "per-batch hooks+loading", "validation")
    rest = [fit_total[i] - sum(clock.totals.get(p, [0, 0])[i] for p in inside) for i in range(2)]
    # sampling (prepare_data, setup) runs before on_fit_start: not inside fit_total
    clock.totals["epoch end (ckpt, early stop)"] = rest
    test_total = [state["results"][i] - state["test"][i] for i in range(2)]
    res = clock.totals["results"]
    clock.totals["test+decomposed KL"] = [test_total[i] - res[i] for i in range(2)]
    # what precedes on_test_start (best checkpoint loading) and follows results: "other"
    results = json.loads(next(Path(args.out).rglob("results.json")).read_text())
    print(json.dumps({
        "phases": clock.totals, "child_total": [end[0] - T0_WALL, end[1] - T0_CPU],
        "counts": counts, "dims": state["dims"], "epochs": results["epochs"],
        "stopped_early": results["stopped_early"], "kl_total": results["kl_total"],
    }))


# -------------------------------------------------------------------------------------- parent
def run_child(model: str, threads: int, max_epochs: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               CFL_LIGHTNING_THREADS=str(threads), WANDB_MODE="disabled",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")]))
    with tempfile.TemporaryDirectory(prefix="cfl_prof_") as tmp:
        env["CFL_LIGHTNING_CACHE"] = str(Path(tmp) / "cache")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, __file__, "--child", "--model", model, "--max-epochs", str(max_epochs),
             "--out", str(Path(tmp) / "run")],
            env=env, cwd=tmp, capture_output=True, text=True,
        )
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"child failed ({model}, {threads} threads):\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    out["wall"], out["cpu"] = wall, cpu
    start = out["phases"]["start+imports"]
    # interpreter start before the child's first line: the parent's total minus the child's own
    start[0] += wall - out["child_total"][0]
    start[1] += cpu - out["child_total"][1]
    known = [sum(v[i] for k, v in out["phases"].items()) for i in range(2)]
    out["phases"]["other"] = [wall - known[0], cpu - known[1]]
    return out


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--model", default="lstm", help=argparse.SUPPRESS)
    parser.add_argument("--models", default="lstm,transformer")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--anchor-only", action="store_true", help="only the torch.mm rates")
    parser.add_argument("--max-epochs", type=int, default=20,
                        help="cap on epochs (0: the config's, i.e. until early stopping)")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    import torch

    from cpu_anchor import mm_rate

    models = args.models.split(",")
    threads = [int(t) for t in args.threads.split(",")]
    print(f"# load before: {uptime()}")
    print(f"# torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"epochs cap {args.max_epochs or 'none (early stopping)'}")
    runs: dict[tuple[str, int], list[dict]] = {}
    rates: dict[int, list[dict]] = {t: [] for t in threads}
    for rep in range(args.repeats):
        for t in threads:  # the anchor, measured between the runs (same load)
            torch.set_num_threads(t)
            rates[t].append({"square": mm_rate(1024, 1024, 1024),
                             "lstm_step": mm_rate(*LSTM_STEP),
                             "tf_ff": mm_rate(*TF_FF)})
        for model in [] if args.anchor_only else models:
            for t in threads:
                out = run_child(model, t, args.max_epochs)
                runs.setdefault((model, t), []).append(out)
                print(f"# rep {rep} {model} {t}t: wall {out['wall']:.1f}s cpu {out['cpu']:.1f}s "
                      f"epochs {out['epochs']} kl_total {out['kl_total']:.4g}", flush=True)
    print(f"# load after: {uptime()}")
    med = statistics.median
    print("\n## torch.mm rate (GFLOP/s, median of repeats; wall / CPU time)\n")
    print(f"| threads | 1024 square | LSTM step {list(LSTM_STEP)} | transformer FF {list(TF_FF)} |")
    print("|---|---|---|---|")
    for t in threads:
        cells = []
        for key in ("square", "lstm_step", "tf_ff"):
            w = med(r[key]["gflops_wall"] for r in rates[t])
            c = med(r[key]["gflops_cpu"] for r in rates[t])
            cells.append(f"{w:.1f} / {c:.1f}")
        print(f"| {t} | " + " | ".join(cells) + " |")
    square_cpu = med(r["square"]["gflops_cpu"] for r in rates[threads[0]])
    for model in [] if args.anchor_only else models:
        print(f"\n## {model}: seconds per run, median of {args.repeats} (wall / CPU)\n")
        print("| phase | " + " | ".join(f"{t} thread(s)" for t in threads) + " |")
        print("|---|" + "---|" * len(threads))
        for phase in PHASES:
            cells = []
            for t in threads:
                w = med(r["phases"].get(phase, [0, 0])[0] for r in runs[(model, t)])
                c = med(r["phases"].get(phase, [0, 0])[1] for r in runs[(model, t)])
                cells.append(f"{w:.2f} / {c:.2f}")
            print(f"| {phase} | " + " | ".join(cells) + " |")
        cells = [f"**{med(r['wall'] for r in runs[(model, t)]):.2f} / "
                 f"{med(r['cpu'] for r in runs[(model, t)]):.2f}**" for t in threads]
        print("| whole process | " + " | ".join(cells) + " |")
        for t in threads:
            rs = runs[(model, t)]
            train = med(r["counts"]["train_flops"] for r in rs)
            evalf = med(r["counts"]["eval_flops"] for r in rs)
            step_cpu = med(sum(r["phases"][p][1] for p in PHASES[3:6]) for r in rs)
            whole_cpu = med(r["cpu"] for r in rs)
            tokens = med(r["counts"]["train_tokens"] for r in rs)
            step_wall = med(sum(r["phases"][p][0] for p in PHASES[3:6]) for r in rs)
            print(f"\n{model}, {t} thread(s): epochs {med(r['epochs'] for r in rs)}, "
                  f"steps {med(r['counts']['steps'] for r in rs)}, "
                  f"real training tokens {tokens:.0f} "
                  f"({tokens / step_wall:.0f} tokens/s in the step by wall), "
                  f"FLOPs train {train / 1e9:.1f} G + eval {evalf / 1e9:.2f} G; "
                  f"GFLOP/s per CPU-second: training step {train / step_cpu / 1e9:.2f}, "
                  f"whole run {(train + evalf) / whole_cpu / 1e9:.2f}; "
                  f"fraction of the 1-thread 1024-square mm rate ({square_cpu:.1f} GFLOP/s per "
                  f"CPU-second): step {train / step_cpu / 1e9 / square_cpu:.3f}, "
                  f"whole run {(train + evalf) / whole_cpu / 1e9 / square_cpu:.3f}; "
                  f"kl_total median {med(r['kl_total'] for r in rs):.4g}")


if __name__ == "__main__":
    main()
