"""What several test files share: small automata, the CLI run in process, processes, timeouts,
the import graph, and results for ``analyze``. Test files import helpers from here (or from
tests/reference.py, the brute-force references, and tests/cli_models.py, the small user models),
never from one another.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "REPO", "PACKAGE", "CONFIG", "SMALL", "CI_LIMIT_S", "PARITY_JSON",
    "short_pfsa", "check_split_law_by_position", "CliResult", "exit_status", "run_cli", "cli_env",
    "alive", "survivors", "wait_for", "on_path", "package_graph", "offenders",
    "SYMBOLS", "STATES", "result", "write_results", "records", "synthetic_runs",
    "correlational_run", "tiny_args", "tiny_fit_grid", "load_script",
]

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "cfl_lightning"

#: CI's own limit on a whole run (90 min). A test that must bound a child process's wall time
#: uses this, never a shorter fixed figure: on a loaded machine a healthy run takes many times
#: its idle time. What a test waits for is progress (a file, a line, a pid), not seconds.
CI_LIMIT_S = 90 * 60

#: the case (i) config and the flags that make a ``fit`` on it take about a second
CONFIG = str(REPO / "configs" / "parity_starfree.yaml")
SMALL = ["--data.num_strings=30", "--data.count=90", "--data.val_strings=10",
         "--data.test_strings=10", "--data.cache_dir=none", "--trainer.max_epochs=2",
         "--model.init_args.param_budget=5000"]

#: the issue's parity/star-free automaton (``parity_starfree_pfsa(0.3)``) in the JSON schema
PARITY_JSON = {
    "alphabet": ["a", "b"],
    "states": ["init", "odd", "even", "rep"],
    "initial": "init",
    "final": {"odd": 0.1, "rep": 0.1},
    "transitions": [
        {"source": "init", "symbol": "a", "target": "rep", "weight": 0.3},
        {"source": "init", "symbol": "b", "target": "odd", "weight": 0.7},
        {"source": "odd", "symbol": "a", "target": "odd", "weight": 0.45},
        {"source": "odd", "symbol": "b", "target": "even", "weight": 0.45},
        {"source": "even", "symbol": "a", "target": "even", "weight": 0.5},
        {"source": "even", "symbol": "b", "target": "odd", "weight": 0.5},
        {"source": "rep", "symbol": "a", "target": "rep", "weight": 0.9},
    ],
}


def short_pfsa():
    """3 states, 2 symbols, short strings (mean length ~2.4): enumerable to high mass."""
    from cfl_lightning.automata import PFSA

    return PFSA.from_dict(
        {
            "alphabet": ["a", "b"],
            "states": ["s", "t", "u"],
            "initial": "s",
            "final": {"s": 0.3, "t": 0.5, "u": 0.4},
            "transitions": [
                {"source": "s", "symbol": "a", "target": "t", "weight": 0.4},
                {"source": "s", "symbol": "b", "target": "s", "weight": 0.3},
                {"source": "t", "symbol": "a", "target": "u", "weight": 0.2},
                {"source": "t", "symbol": "b", "target": "s", "weight": 0.3},
                {"source": "u", "symbol": "a", "target": "t", "weight": 0.6},
            ],
        }
    )


def check_split_law_by_position(device: str, k: int, alpha: float) -> None:
    """The on-device split's marginal of the first and last count given the total (short_pfsa,
    ``symbol:a``, N = 1.5 K x the mean) against convolution powers, and its negative control (the
    unconditioned per-string law is rejected). K = 64 uses per-level tables."""
    from collections import Counter

    import numpy as np
    import torch

    from cfl_lightning.automata import Event
    from cfl_lightning.sampling.counts import CountLaw, split_exact
    from tests.reference import chi_square_pvalue, convolution_power, count_pmf

    pfsa = short_pfsa()
    fn = Event.parse("symbol:a").function(pfsa)
    pmf = count_pmf(pfsa, fn, 200, tol=1e-280)
    n = round(1.5 * k * float((np.arange(201) * pmf).sum()))
    with np.errstate(divide="ignore"):
        law = CountLaw(torch.from_numpy(np.log(pmf[: n + 1])))
    gen = torch.Generator(device=device).manual_seed(11)
    runs = 3000
    draws = split_exact(law, k, n, gen, draws=runs)
    assert draws.device.type == torch.device(device).type
    draws = draws.cpu()
    assert torch.all(draws.sum(1) == n)
    rest, whole = convolution_power(pmf, k - 1), convolution_power(pmf, k)[n]
    expected = {j: pmf[j] * rest[n - j] / whole for j in range(n + 1)}
    for column in (0, k - 1):
        observed = Counter(draws[:, column].tolist())
        assert chi_square_pvalue(observed, expected, runs) > alpha
    # Negative control: the unconditioned per-string law is rejected.
    observed = Counter(draws[:, 0].tolist())
    assert chi_square_pvalue(observed, dict(enumerate(pmf)), runs) < alpha


# --------------------------------------------------------------------------- the CLI in process


def cli_env(wandb_mode: str = "disabled") -> dict[str, str]:
    """The environment of a CLI subprocess: this checkout first, one thread, no cache."""
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
            "WANDB_MODE": wandb_mode, "CFL_LIGHTNING_CACHE": "none"}


@dataclass
class CliResult:
    """What ``python -m cfl_lightning ...`` would have given: exit status, stdout, stderr."""

    returncode: int
    stdout: str
    stderr: str


def exit_status(argv: list[str], main=None) -> int:
    """The exit status of ``main(argv)`` (``cfl_lightning.__main__.main`` by default) run in this
    process, a ``SystemExit`` (argparse's usage errors) included. Output goes where it goes (use
    pytest's ``capsys``), or see :func:`run_cli`."""
    if main is None:
        main = importlib.import_module("cfl_lightning.__main__").main
    try:
        return main(argv)
    except SystemExit as stop:
        return stop.code


def run_cli(*argv: str, cwd: str | Path | None = None) -> CliResult:
    """``python -m cfl_lightning *argv`` in this process (``__main__.main``), stdout and stderr
    captured, ``SystemExit`` turned into the exit status. For tests where the process boundary
    is not the point (argument errors, one-line refusals, small runs)."""
    main = importlib.import_module("cfl_lightning.__main__").main
    out, err = io.StringIO(), io.StringIO()
    previous = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(map(str, argv)))
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
                if isinstance(stop.code, str):
                    err.write(stop.code + "\n")
    finally:
        os.chdir(previous)
    return CliResult(int(code or 0), out.getvalue(), err.getvalue())


# ----------------------------------------------------------------- processes (Linux /proc)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, whose parent died without reaping it, does not).

    A process can end between opening its ``/proc`` entry and reading it: the read then raises
    ``ProcessLookupError`` (ESRCH), which means gone, as the missing entry does.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[-1].split()[0] not in (b"Z", b"X")
    except (FileNotFoundError, ProcessLookupError):
        return False


def survivors(pids: list[int], timeout: float = CI_LIMIT_S) -> list[int]:
    """The ``pids`` still running after waiting up to ``timeout`` seconds for them to end.

    (Stopping a process is a signal and a reap, not work that load slows by minutes; a test that
    expects survivors passes a short ``timeout`` and then checks that they *are* still alive.)"""
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def wait_for(condition, proc, timeout: float = CI_LIMIT_S) -> None:
    """Wait until ``condition()`` holds, failing with ``proc``'s stderr if it ends first.

    Waits on progress: the child either makes ``condition`` true or exits; ``timeout`` is only
    the backstop for a hung child (CI's own limit by default, so load never fails a test)."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    if not condition() and proc.poll() is not None:  # the last word: it may have just written
        time.sleep(0.05)
    assert condition(), proc.stderr.read() if proc.poll() is not None else "timed out"


# --------------------------------------------------------------------------- the import graph


@contextlib.contextmanager
def on_path(root: Path):
    """The folder holding the package at ``root`` first on ``sys.path`` for a while."""
    sys.path.insert(0, str(root.parent))
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.path.remove(str(root.parent))
        sys.path_importer_cache.pop(str(root.parent), None)


def package_graph(root: Path = PACKAGE, external: bool = False):
    """The grimp import graph of the package at ``root`` (every import statement, lazy ones in
    functions included; ``external``: outside packages as top-level names). Nothing is imported
    and nothing cached on disk."""
    import grimp

    with on_path(root):
        return grimp.build_graph(root.name, include_external_packages=external, cache_dir=None)


def offenders(folder: str, forbidden: str, package: Path = PACKAGE) -> list[str]:
    """``"<file> imports <module>"`` for each direct import of ``forbidden`` (a module or an
    outside package, and everything below it) by a module under ``package/folder``."""
    graph = package_graph(package, external=True)
    unit = f"{package.name}.{folder.replace('/', '.')}"
    found = []
    for module in sorted(graph.modules):
        if module != unit and not module.startswith(unit + "."):
            continue
        path = package.parent.joinpath(*module.split("."))
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        for name in sorted(graph.find_modules_directly_imported_by(module)):
            if name == forbidden or name.startswith(forbidden + "."):
                found.append(f"{path.relative_to(package.parent)} imports {name}")
    return found


# --------------------------------------------------------------------------- results for `analyze`

#: the symbols and states of :func:`correlational_run`'s automaton
SYMBOLS = list("abcdefghij")
STATES = ["q0", "q1", "q2"]


def result(
    automaton="A0",
    model="LSTMLanguageModel",
    intervention="exact",
    event="state:odd",
    count=100,
    realized=None,
    kl_total=1.0,
    kl_target=0.1,
    seed=0,
    num_strings=500,
    strings=None,
    occurrences=None,
    kl=None,
):
    """A results.json dict with the keys the analysis reads (unweighted values: twice the
    weighted ones)."""
    return {
        "model": model,
        "intervention": intervention,
        "event": event,
        "count": count if intervention != "none" else None,
        "realized_count": realized if realized is not None else count,
        "realized_strings": strings,
        "num_strings": num_strings,
        "seed": seed,
        "automaton_id": automaton,
        "kl_total": kl_total,
        "kl_target": kl_target,
        "kl_target_unweighted": None if kl_target is None else kl_target * 2,
        "occurrences": occurrences,
        "kl": kl,
        "kl_unweighted": None if kl is None else _scaled(kl, 2.0),
    }


def _scaled(nested, factor):
    return {kind: {k: v * factor for k, v in values.items()} for kind, values in nested.items()}


def write_results(root: Path, items) -> None:
    """Each of ``items`` as ``root/runNNN/csv/version_0/results.json``."""
    for i, item in enumerate(items):
        path = root / f"run{i:03d}" / "csv" / "version_0" / "results.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(item))


def records(items):
    """:func:`result` dicts as the analysis's records (sources ``r0``, ``r1``, ...)."""
    from cfl_lightning.analysis import aggregate

    return [aggregate.record_from_results(item, f"r{i}") for i, item in enumerate(items)]


def synthetic_runs(root: Path) -> Path:
    """221 results under ``root``: two architectures, two targets (state:odd, state:rep), causal
    (5 automata x 4 counts x 2 repeats) and correlational (30 automata) runs, and one broken
    ``results.json`` (not JSON). Returns ``root``."""
    import numpy as np

    rng = np.random.default_rng(0)
    items = []
    for model in ("LSTMLanguageModel", "TransformerLanguageModel"):
        for event in ("state:odd", "state:rep"):
            for a in range(5):
                for count in (100, 200, 400, 800):
                    for seed in range(2):
                        kl = float(np.exp(-count / 300) * rng.uniform(0.5, 1.5))
                        items.append(result(automaton=f"A{a}", model=model, event=event,
                                            count=count, kl_target=kl, seed=seed,
                                            kl_total=kl + rng.uniform()))
        for a in range(30):
            realized = {
                "state:odd": int(rng.integers(50, 900)),
                "state:rep": int(rng.integers(0, 900)),
            }
            kl = {"state": {e.split(":")[1]: float(np.exp(-v / 500)) for e, v in realized.items()}}
            items.append(result(automaton=f"C{a}", model=model, intervention="none",
                                event="state:odd", realized=realized["state:odd"],
                                kl_target=kl["state"]["odd"], kl=kl,
                                occurrences={"count": realized, "strings": realized}))
    write_results(root, items)
    (root / "broken" / "results.json").parent.mkdir(parents=True)
    (root / "broken" / "results.json").write_text("{not json")
    return root


def correlational_run(automaton, value, counts, model="LSTMLanguageModel", weight=0.25):
    """A correlational run whose 10 symbols all have the unweighted value ``value`` (weighted:
    ``value * weight``) at the realized counts ``counts`` (one per symbol)."""
    specs = [f"symbol:{s}" for s in SYMBOLS] + [f"state:{q}" for q in STATES]
    occurrences = dict(zip(specs, [int(c) for c in counts] + [500, 400, 300]))
    item = result(automaton=automaton, model=model, intervention="none", event=None,
                  realized=None, kl_target=None)
    item["occurrences"] = {"count": occurrences, "strings": {k: v // 3 for k, v in
                                                             occurrences.items()}}
    item["kl"] = {"symbol": dict.fromkeys(SYMBOLS, value * weight),
                  "state": dict.fromkeys(STATES, 0.01)}
    item["kl_unweighted"] = {"symbol": dict.fromkeys(SYMBOLS, value),
                             "state": dict.fromkeys(STATES, 0.02)}
    item["test_visits"] = {"symbol": dict.fromkeys(SYMBOLS, 50), "state": dict.fromkeys(STATES, 9)}
    return item


def tiny_args(root: Path, *extra: str) -> list[str]:
    """A one-epoch ``fit`` of a tiny parity corpus under ``root`` (the CLI's arguments), then
    ``extra``."""
    return [
        "--data.generator=parity",
        "--data.eta=0.3",
        "--data.intervention=exact",
        "--data.event=state:odd",
        "--data.count=40",
        "--data.num_strings=30",
        "--data.val_strings=10",
        "--data.test_strings=20",
        "--data.cache_dir=none",
        "--data.device=cpu",
        "--trainer.max_epochs=1",
        f"--trainer.default_root_dir={root}",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        *extra,
    ]


def tiny_fit_grid(name: str, seeds: str, num_strings: str) -> str:
    """A W&B grid file (its text) of two-epoch fits on the case (i) config, each in seconds.

    Args:
        name: the sweep's ``name``.
        seeds: the YAML of ``seed_everything`` (``"values: [0, 1]"``).
        num_strings: the YAML of ``data.num_strings`` (``"value: 30"``, ``"values: [30, 40]"``).
    """
    return f"""\
name: {name}
method: grid
parameters:
  seed_everything:
    {seeds}
  data.num_strings:
    {num_strings}
  data.count:
    value: 60
  data.val_strings:
    value: 10
  data.test_strings:
    value: 10
  trainer.max_epochs:
    value: 2
  model.init_args.param_budget:
    value: 6000
command:
  - ${{env}}
  - ${{interpreter}}
  - -m
  - cfl_lightning
  - fit
  - --config
  - configs/parity_starfree.yaml
  - ${{args}}
"""


def load_script(path: Path):
    """A script that is not a package module (``docs/headline/*.py``, ``docs/figures/*.py``),
    loaded from its file; registered in ``sys.modules`` under its stem while it runs (a
    dataclass in it looks its module up while it is defined)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
