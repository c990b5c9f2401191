"""Memory estimate (cfl_lightning.sampling.budget) against the measured peak of `sample`.

Each case runs ``python -m cfl_lightning sample`` in a child process and reads its peak RSS
(``ru_maxrss``); the baseline (a 10-string run: Python, torch, the package) is subtracted. The
table prints the estimate, the measured increment and their ratio (>= 1: the estimate is
conservative). Rerun after changing the sampler's internals and adjust the per-token constants
in ``budget.py`` if the ratio leaves ~[1, 2].

    PYTHONPATH=$PWD python benchmarks/bench_budget.py [--smoke] [--device cpu|cuda]

On CUDA the host peak is measured (the corpus comes back to the host); GPU memory is not.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from cfl_lightning import parity_starfree_pfsa
from cfl_lightning.sampling.budget import estimate_sampling, format_bytes


def peak_kb(args: list[str], cwd: Path) -> int:
    """Peak RSS (KB) of one child ``sample`` run."""
    code = (
        "import resource, sys; from cfl_lightning.__main__ import main; rc = main(sys.argv[1:]); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); sys.exit(rc)"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CFL_LIGHTNING_MEMORY_LIMIT": "off"}
    out = subprocess.run(
        [sys.executable, "-c", code, "sample", *args], cwd=cwd, env=env, capture_output=True,
        text=True, check=True,
    )
    return int(out.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes (a quick check)")
    parser.add_argument("--device", default="cpu")
    opts = parser.parse_args()
    scale = 10 if opts.smoke else 1
    cases = [  # (K, intervention, N)
        (500_000 // scale, "none", None),
        (1_000_000 // scale, "none", None),
        (100_000 // scale, "exact", 200_000 // scale),
        (100 // scale or 1, "exact", 2_000_000 // scale),
        (100_000 // scale, "exact", 2_000_000 // scale),
        (1, "exact", 100_000 // scale),  # one very long string: the walk's steps dominate
    ]
    pfsa = parity_starfree_pfsa(0.3)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pfsa.to_json(work / "a.json")
        common = ["--automaton", "a.json", "--seed", "0", "--output", "o.jsonl", "--device",
                  opts.device]
        base = peak_kb(common + ["--num-strings", "10"], work)
        print(f"device {opts.device}; baseline peak {format_bytes(base * 1024)} (subtracted)")
        print(f"{'K':>10} {'intervention':>12} {'N':>10} {'estimate':>10} {'measured':>10} ratio")
        for k, kind, n in cases:
            extra = [] if n is None else ["--intervention", kind, "--event", "state:odd",
                                          "--count", str(n)]
            used = max(peak_kb(common + ["--num-strings", str(k)] + extra, work) - base, 1) * 1024
            est = estimate_sampling(pfsa, k, intervention=kind, event="state:odd", count=n,
                                    write=True).total
            print(f"{k:>10,} {kind:>12} {n or '-':>10} {format_bytes(est):>10} "
                  f"{format_bytes(used):>10} {est / used:5.2f}")


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    main()
