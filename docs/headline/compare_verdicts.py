"""Two `analyze --plan` outputs side by side: version 2's verdicts next to version 3's.

    python docs/headline/compare_verdicts.py V2_OUTPUT.md V3_OUTPUT.md [--labels v2,v3]

Reads the markdown that ``python -m cfl_lightning analyze ... --plan PLAN.yaml`` prints (its
``## verdict`` table and every contrast table) and prints two markdown tables: the claims (one
row per claim and measure, each model's verdict in both outputs, and whether they agree) and
the contrasts (estimate and interval in both). A verdict that differs is printed as
"**differs between weightings**", as the version 3 plan says, never averaged. Nothing is
recomputed: it only lines up what the two plan outputs say.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

MODELS = ("LSTM", "Transformer")


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parse(text: str) -> tuple[dict, dict]:
    """Claims ``{(claim, measure): {model: verdict}}`` and contrasts
    ``{(contrast, measure, model): (estimate, interval, verdict)}`` of one plan output."""
    claims: dict = {}
    contrasts: dict = {}
    measure = model = None
    in_verdict = False
    for line in text.splitlines():
        if line.startswith("## measure: "):
            measure, in_verdict = line.split(": ", 1)[1].strip(), False
        elif line.startswith("## verdict"):
            in_verdict = True
        elif line.startswith("### "):
            model = line[4:].strip()
        elif not line.startswith("|") or line.startswith("|---"):
            continue
        elif in_verdict:
            cells = _cells(line)
            if cells[0] != "claim":
                claims[(cells[0], cells[2])] = dict(zip(MODELS, cells[3:5]))
        else:
            cells = _cells(line)
            if len(cells) == 6 and cells[0] != "contrast":
                name = cells[0].split(":", 1)[0]
                contrasts[(name, measure, model)] = (cells[2], cells[3], cells[5])
    return claims, contrasts


def render(first: tuple[dict, dict], second: tuple[dict, dict], labels: list[str],
           differs: str = "differs between weightings") -> str:
    """The two comparison tables as markdown (``differs``: the word for a changed verdict)."""
    a, b = labels

    def _agree(old: str, new: str) -> str:
        return "same" if old == new else f"**{differs}**"

    out = [f"| claim | measure | LSTM, {a} | LSTM, {b} | | Transformer, {a} | Transformer, {b} | |",
           "|---|---|---|---|---|---|---|---|"]
    for key in first[0]:
        old, new = first[0][key], second[0].get(key, dict.fromkeys(MODELS, "missing"))
        row = [key[0], key[1]]
        for model in MODELS:
            row += [old[model], new[model], _agree(old[model], new[model])]
        out.append("| " + " | ".join(row) + " |")
    out += ["", f"| contrast | measure | model | {a} | {b} | |", "|---|---|---|---|---|---|"]
    for key, (est, interval, verdict) in first[1].items():
        other = second[1].get(key)
        if other is None:
            continue
        out.append(f"| {key[0]} | {key[1]} | {key[2]} | {est} {interval} ({verdict}) | "
                   f"{other[0]} {other[1]} ({other[2]}) | {_agree(verdict, other[2])} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--labels", default="v2,v3")
    parser.add_argument("--differs", default="differs between weightings")
    args = parser.parse_args(argv)
    outputs = []
    for path in (args.first, args.second):
        if not path.is_file():
            print(f"compare_verdicts: {path}: no such file", file=sys.stderr)
            return 2
        outputs.append(parse(path.read_text(encoding="utf-8")))
        if not outputs[-1][0]:
            print(f"compare_verdicts: {path}: no '## verdict' table (not a plan output?)",
                  file=sys.stderr)
            return 2
    print(render(outputs[0], outputs[1], args.labels.split(","), args.differs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
