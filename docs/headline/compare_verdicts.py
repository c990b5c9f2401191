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
import re
import sys
from pathlib import Path

#: the model headings of a plan output and the records' model names
MODELS = {"LSTM": "LSTMLanguageModel", "Transformer": "TransformerLanguageModel"}
_SHORT = {long: short for short, long in MODELS.items()}


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _sides(text: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``43 vs 35 (115 vs 42 pairs)`` -> ((43, 35), (115, 42)); ``32 (32 pairs)`` ->
    ((32,), (32,)); a per-run table's bare ``101`` -> ((101,), (101,))."""
    match = re.fullmatch(r"(.+) \((.+) pairs\)", text)
    parts = match.groups() if match else (text, text)
    return tuple(tuple(int(x) for x in part.split(" vs ")) for part in parts)


def parse_plan_output(text: str) -> dict[tuple[str, str, str], dict]:
    """Every row of an `analyze --plan` markdown output: ``(name, model, measure)`` -> its
    printed cells (``value``, ``interval``, ``n``, ``pairs`` and, for contrasts and claims,
    ``verdict``). Names: ``bin:E`` (``bin-run:E`` in the per-run view's table), ``count:N``,
    the contrast's (``C1``, ``G62``, ...), ``claim:NAME``; models as the records name them."""
    found: dict[tuple[str, str, str], dict] = {}
    measure = model = table = None
    columns: list[str] = []  # the claim table's model columns, from its header
    for line in text.splitlines():
        if line.startswith("## measure: "):
            measure = line.split(": ", 1)[1].strip()
        elif line.startswith("### "):
            model = MODELS[line[4:].strip()]
        elif line.startswith("|") and not line.startswith("|---"):
            cells = _cells(line)
            if cells[0] in ("correlational bin", "causal count", "contrast", "claim"):
                table = "per-run bin" if cells[1] == "pairs" else cells[0]
                columns = cells[3:] if table == "claim" else columns
                continue
            if table == "claim":
                for short, verdict in zip(columns, cells[3:]):
                    found[(f"claim:{cells[0]}", MODELS[short], cells[2])] = {"verdict": verdict}
                continue
            n, pairs = _sides(cells[1])
            if table in ("correlational bin", "per-run bin"):
                head = "bin:" if table == "correlational bin" else "bin-run:"
                name = head + cells[0].strip("[").split(",")[0]
            elif table == "causal count":
                name = "count:" + cells[0]
            else:
                name = cells[0].split(":", 1)[0]
            row = {"value": cells[2], "interval": cells[3], "n": n, "pairs": pairs}
            if table == "contrast":
                row["verdict"] = cells[5]
            found[(name, model, measure)] = row
    return found


def parse(text: str) -> tuple[dict, dict]:
    """Claims ``{(claim, measure): {model: verdict}}`` and contrasts
    ``{(contrast, measure, model): (estimate, interval, verdict)}`` of one plan output (models
    by their headings, ``LSTM`` and ``Transformer``)."""
    claims: dict = {}
    contrasts: dict = {}
    for (name, model, measure), row in parse_plan_output(text).items():
        if name.startswith("claim:"):
            claims.setdefault((name[len("claim:"):], measure), {})[_SHORT[model]] = row["verdict"]
        elif "verdict" in row:
            contrasts[(name, measure, _SHORT[model])] = (
                row["value"], row["interval"], row["verdict"])
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
