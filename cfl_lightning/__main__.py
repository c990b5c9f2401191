"""``python -m cfl_lightning COMMAND ...``: dispatch to the command's module.

``sample`` and ``automaton`` import only the pure core (no Lightning, no wandb), so they start
fast; ``fit``/``validate``/``test`` go to LightningCLI, imported only then.
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["main", "COMMANDS"]

# command -> (module, help line)
COMMANDS = {
    "sample": ("cfl_lightning.cli.sample", "sample a corpus (optionally under an intervention)"),
    "automaton": ("cfl_lightning.cli.automaton", "generate an automaton JSON file"),
    "fit": ("cfl_lightning.cli.train", "train a model (LightningCLI)"),
    "validate": ("cfl_lightning.cli.train", "validate a model (LightningCLI)"),
    "test": ("cfl_lightning.cli.train", "test a model (LightningCLI)"),
    "sweep": ("cfl_lightning.cli.sweep", "run a W&B sweep YAML offline on this machine"),
    "stratify": (
        "cfl_lightning.cli.stratify",
        "choose a correlational sweep's corpora by their realized count (bins)",
    ),
    "analyze": ("cfl_lightning.cli.analyze", "draw causal vs correlational curves"),
    "draw": ("cfl_lightning.cli.draw", "render an automaton with graphviz"),
}

USAGE = "usage: python -m cfl_lightning {" + ",".join(COMMANDS) + "} ...\n\ncommands:\n" + "".join(
    f"  {name:<10} {text}\n" for name, (_, text) in COMMANDS.items()
)


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the process exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0
    command = argv[0]
    if command not in COMMANDS:
        sys.stderr.write(
            f"cfl_lightning: error: unknown command {command!r}; expected one of "
            f"{', '.join(COMMANDS)} (python -m cfl_lightning --help)\n"
        )
        return 2
    module = importlib.import_module(COMMANDS[command][0])
    return int(module.main(argv) or 0)


if __name__ == "__main__":
    sys.exit(main())
