"""The pushdown study version 2's automata, totals and sweeps, computed before any training.

    python sweeps/pushdown/v2/draw.py            # the candidates, their natural counts and sizes
    python sweeps/pushdown/v2/draw.py --select   # choose the 20, write automata/ and the sweeps

Dyck-2 with a neutral symbol (``automaton dyck --k 2 --seed S --neutral-prob 0.2``; closing
0.6 on a non-empty stack, ending 0.5 on the empty stack, Dirichlet(1) opening weights drawn with
S), S taken in the order of ``numpy.random.default_rng(48).permutation(numpy.arange(300, 1000))``
(outside version 1's weightings 0-299). The rules (docs/pushdown_v2.md, "Design"):

* the token arm's total for an automaton and target is ``T = 1.2 x`` the symbols of the plain
  arm's training corpus at the target's top count (500 strings, ``data.seed`` 0: the corpus the
  plain arm trains on), rounded to 100;
* the 20 automata are the first candidates, in permutation order, for which every corpus of the
  token arm (both targets, three counts each, ``data.seed`` 0) is possible: the sampler does not
  refuse it. The plain arm's corpora are always possible.

The corpora are drawn exactly as ``fit`` draws them (the training split's seed is
``derive_seed(0, "train")``), so what is checked here is what trains.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
K = 500  # strings per corpus of the plain arm
NEUTRAL = 0.2  # the neutral symbol's probability at every step
TARGETS = {"pop:(": (250, 500, 1000), "class:q/(": (400, 800, 1600)}
SHORT = {"pop:(": "pop", "class:q/(": "class"}
SCALE = 1.2  # T = SCALE x the plain arm's corpus at the top count
CHOSEN = 20
CANDIDATES = 60  # how far down the permutation --select may go


def candidates(n: int = CANDIDATES) -> list[int]:
    """The first ``n`` weight seeds of the permutation."""
    return [int(s) for s in np.random.default_rng(48).permutation(np.arange(300, 1000))[:n]]


def automaton(seed: int):
    """The Dyck-2 automaton with a neutral symbol of weight seed ``seed``."""
    from cfl_lightning.automata import dyck_pda

    return dyck_pda(k=2, seed=seed, neutral_prob=NEUTRAL)


def train_seed() -> int:
    """The training split's seed at ``data.seed`` 0 (as ``PFADataModule`` derives it)."""
    from cfl_lightning.data import derive_seed

    return derive_seed(0, "train")


def plain_sizes(seed: int) -> dict[str, list[int]]:
    """Symbols (EOS excluded) of the plain arm's training corpora, per target and count."""
    from cfl_lightning.sampling.sampler import sample_corpus

    pda, s = automaton(seed), train_seed()
    return {
        e: [int(sample_corpus(pda, K, seed=s, intervention="exact", event=e, count=n)
                .lengths.sum()) for n in counts]
        for e, counts in TARGETS.items()
    }


def natural(seed: int) -> list[int]:
    """Each target's count and the symbols of the natural 500-string training corpus."""
    from cfl_lightning.sampling.sampler import sample_corpus

    pda, s = automaton(seed), train_seed()
    out = [int(sample_corpus(pda, K, seed=s, event=e).counts.sum()) for e in TARGETS]
    return [*out, int(sample_corpus(pda, K, seed=s).lengths.sum())]


def token_arm(seed: int, sizes: dict[str, list[int]]) -> dict[str, tuple[int, list[str]]]:
    """Per target: ``T`` and, per count, the K the sampler chooses (or ``refused: ...``)."""
    from cfl_lightning.errors import CflError
    from cfl_lightning.sampling.token_matched import sample_token_matched

    pda, s, out = automaton(seed), train_seed(), {}
    for event, counts in TARGETS.items():
        t = int(round(SCALE * sizes[event][-1], -2))
        cells = []
        for n in counts:
            try:
                got = sample_token_matched(pda, t, seed=s, event=event, count=n)
                cells.append(str(got.num_strings))
            except CflError as err:
                cells.append("refused: " + str(err).split(":")[0])
        out[event] = (t, cells)
    return out


def sweep(name: str, what: str, files: list[str], event: str, counts, tokens=None) -> str:
    """One sweep file's text (grid: automata x counts x models x two trainings)."""
    size = f"    value: {tokens}" if tokens else f"    value: {K}"
    key = "data.tokens" if tokens else "data.num_strings"
    automata = "\n".join(f"      - {f}" for f in files)
    return f"""# Pushdown study version 2 (docs/pushdown_v2.md): {what}.
# Written by sweeps/pushdown/v2/draw.py --select, committed before any run of version 2 trained.
name: {name}
project: cfl_lightning
description: "Pushdown study v2, {what}"
method: grid
metric:
  name: kl_total
  goal: minimize
parameters:
  model:
    values: [LSTMLanguageModel, TransformerLanguageModel]
  data.automaton:
    values:
{automata}
  data.event:
    value: "{event}"
  data.intervention:
    value: exact
  data.count:
    values: [{", ".join(map(str, counts))}]
  {key}:
{size}
  seed_everything:
    values: [0, 1]
command:
  - ${{env}}
  - ${{interpreter}}
  - -m
  - cfl_lightning
  - fit
  - --config
  - configs/dyck.yaml
  - ${{args}}
"""


def select() -> int:
    """Choose the automata, print the table, write the automata and the sweeps."""
    chosen, rows = [], []
    for seed in candidates():
        sizes = plain_sizes(seed)
        tokens = token_arm(seed, sizes)
        ok = all(not c.startswith("refused") for _, cells in tokens.values() for c in cells)
        rows.append((seed, natural(seed), sizes, tokens, ok))
        print(f"| {seed} | {'chosen' if ok else 'left out'} | "
              + " | ".join(f"{sizes[e][-1]:,} -> T {t:,}: K {', '.join(c)}"
                           for e, (t, c) in tokens.items()) + " |", flush=True)
        if ok:
            chosen.append(seed)
        if len(chosen) == CHOSEN:
            break
    if len(chosen) < CHOSEN:
        print(f"only {len(chosen)} of {CANDIDATES} candidates qualify", file=sys.stderr)
        return 1
    write(chosen, {r[0]: r for r in rows})
    return 0


def write(chosen: list[int], rows: dict) -> None:
    """The automata files, the plain sweeps, one token sweep per automaton and target, and the
    selection table (``selection.json``)."""
    (HERE / "automata").mkdir(exist_ok=True)
    (HERE / "tokens").mkdir(exist_ok=True)
    files = []
    for seed in chosen:
        path = HERE / "automata" / f"dyck_{seed}.json"
        automaton(seed).to_json(path)
        files.append(str(path.relative_to(HERE.parents[2])))
    for event, counts in TARGETS.items():
        short = SHORT[event]
        (HERE / f"plain_{short}.yaml").write_text(sweep(
            f"pushdown_v2_plain_{short}", f"plain arm, exactly N of {event} in 500 strings",
            files, event, counts))
        for seed, file in zip(chosen, files):
            t = rows[seed][3][event][0]
            (HERE / "tokens" / f"{short}_{seed}.yaml").write_text(sweep(
                f"pushdown_v2_tokens_{short}_{seed}",
                f"token arm, weight seed {seed}, exactly N of {event} in T = {t:,} symbols",
                [file], event, counts, tokens=t))
    table = [
        {"seed": s, "chosen": s in chosen, "natural": dict(zip([*TARGETS, "symbols"], r[1])),
         "plain_symbols": r[2], "tokens": {e: {"T": t, "K": k} for e, (t, k) in r[3].items()}}
        for s, r in rows.items()
    ]
    (HERE / "selection.json").write_text(json.dumps(table, indent=1) + "\n")


def main(argv: list[str]) -> int:
    if "--select" in argv:
        return select()
    print("| seed | natural pop:( | natural class:q/( | natural symbols |")
    print("|---|---|---|---|")
    for s in candidates(CHOSEN):
        print(f"| {s} | " + " | ".join(f"{v:,}" for v in natural(s)) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
