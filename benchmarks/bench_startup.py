"""Start-up cost of every ``python -m cfl_lightning`` command (``--help`` and a bad-usage call).

Each call runs in a fresh process with ``-X importtime``; the table gives its wall time, its CPU
time (user + system of the child), whether it imported torch, Lightning, wandb, matplotlib,
scipy and jsonargparse, and the system load (1-minute average) when the call started. On a
shared machine the wall time follows the load; CPU seconds much less so.

Usage::

    PYTHONPATH=$PWD python benchmarks/bench_startup.py            # markdown table on stdout
    PYTHONPATH=$PWD python benchmarks/bench_startup.py --only fit  # one command's rows
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "lightning", "wandb", "matplotlib", "scipy", "jsonargparse")


def calls(tmp: str) -> list[tuple[str, str, list[str]]]:
    """(command, what, argv) rows: ``--help`` and one bad-usage call per command."""
    sweep = str(ROOT / "sweeps" / "parity_starfree_causal_exact.yaml")
    config = str(ROOT / "configs" / "parity_starfree.yaml")
    return [
        ("(none)", "--help", ["--help"]),
        ("sample", "--help", ["sample", "--help"]),
        ("sample", "bad usage", ["sample", "--num-strings", "x"]),
        ("automaton", "--help", ["automaton", "--help"]),
        ("automaton", "bad usage", ["automaton", "--bogus"]),
        ("fit", "--help", ["fit", "--help"]),
        ("fit", "bad flag", ["fit", "--config", config, "--trainer.max_epochs=abc"]),
        ("fit", "bad --model", ["fit", "--config", config, "--model=NoSuchModel"]),
        ("validate", "--help", ["validate", "--help"]),
        ("test", "--help", ["test", "--help"]),
        ("sweep", "--help", ["sweep", "--help"]),
        ("sweep", "bad usage", ["sweep", sweep]),
        ("sweep", "--dry-run", ["sweep", sweep, "--output", f"{tmp}/s", "--dry-run",
                                "--limit", "2"]),
        ("stratify", "--help", ["stratify", "--help"]),
        ("stratify", "bad usage", ["stratify", "--bogus"]),
        ("analyze", "--help", ["analyze", "--help"]),
        ("analyze", "bad usage", ["analyze", "--bogus"]),
        ("draw", "--help", ["draw", "--help"]),
        ("draw", "bad usage", ["draw", "--bogus"]),
    ]


def measure(argv: list[str]) -> dict[str, object]:
    """One call in a fresh process: wall, CPU, exit status and which heavy packages it imported."""
    env = {**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "disabled")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "cfl_lightning", *argv],
        capture_output=True, text=True, cwd=ROOT, env=env,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    imported = set()
    torch_us = 0
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|(\s*)(\S+)", line)
        if not m:
            continue
        name = m.group(3)
        top = name.split(".")[0]
        if top in HEAVY:
            imported.add(top)
        if name == "torch":
            torch_us = int(m.group(1))
    return {
        "wall": wall, "cpu": cpu, "rc": proc.returncode, "load": load,
        "imported": [h for h in HEAVY if h in imported], "torch_s": torch_us / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="only this command's rows")
    args = parser.parse_args()
    print(f"# python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"load at start {os.getloadavg()[0]:.2f}")
    print()
    print("| command | call | exit | wall s | CPU s | import torch s | load | imports |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for command, what, argv in calls(tmp):
            if args.only and command != args.only:
                continue
            r = measure(argv)
            print(
                f"| {command} | {what} | {r['rc']} | {r['wall']:.2f} | {r['cpu']:.2f} | "
                f"{r['torch_s']:.1f} | {r['load']:.1f} | {', '.join(r['imported']) or '-'} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
