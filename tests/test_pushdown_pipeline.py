"""A pushdown automaton through the product (issue 49): its JSON file read by the registered
loader in ``PFADataModule``, its corpus drawn by ``draw`` under an intervention, a model evaluated
by ``DecomposedKLCallback`` and written by ``ResultsWriter``.

The reference is independent of the package's tensors: the model walks each string with a
Python stack (:mod:`tests.pushdown_reference`) and predicts
``q = (1 - eps) p_A(.|class) + eps / (S + 1)``, a function of the class only, so the decomposed
KL is exactly ``sum_c v_c KL(p_A(.|c) || q_c)`` with the expected class visits ``v_c`` from the
reference's forward pass (prefix masses merged by configuration).
"""

from __future__ import annotations

import json
import math

import lightning as L
import pytest
import torch

from cfl_lightning.automata import load_automaton
from cfl_lightning.callbacks import DecomposedKLCallback, ResultsWriter
from cfl_lightning.data import PFADataModule
from tests import pushdown_reference as ref

DATA = ref.two_state_json()
EVENT, COUNT = "push:Y", 40


def reference_probs(data: dict) -> tuple[list[str], list[str], dict[str, list[float]]]:
    """``p_A(.|class)`` for every class ``state/top`` (EOS last), read from the JSON form."""
    pda = ref.RefPDA.from_dict(data)
    symbols = list(data["alphabet"])
    tops = [None, *data["stack_alphabet"]]
    probs = {}
    for state in data["states"]:
        for top in tops:
            row = [0.0] * (len(symbols) + 1)
            stack = [] if top is None else [top]
            for sym, _, _, w in pda.choices(state, stack):
                row[symbols.index(sym) if sym is not None else len(symbols)] += w
            if sum(row) > 0:
                assert math.isclose(sum(row), 1.0, rel_tol=1e-12)
                probs[ref.class_name(state, stack)] = row
    return symbols, tops, probs


class StackWalker(L.LightningModule):
    """Predicts from the class it reaches by walking the string with a Python stack."""

    def __init__(self, data: dict, eps: float) -> None:
        super().__init__()
        self.pda, (self.symbols, _, probs) = ref.RefPDA.from_dict(data), reference_probs(data)
        self.log_q = {c: [math.log((1 - eps) * p + eps / len(row)) for p in row]
                      for c, row in probs.items()}
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(*input_ids.shape, len(self.symbols) + 1, dtype=torch.float64)
        first = next(iter(self.log_q.values()))
        for b, row in enumerate(input_ids.tolist()):
            state, stack = self.pda.initial, []
            for t, token in enumerate(row):
                if 0 < t and token < len(self.symbols):  # a symbol (not BOS, EOS or padding)
                    top = stack[-1] if stack else None
                    state, action, _ = self.pda.arcs[(state, top)][self.symbols[token]]
                    if action[0] == "push":
                        stack.append(action[1])
                    elif action[0] == "pop":
                        stack.pop()
                name = ref.class_name(state, stack)
                out[b, t] = torch.tensor(self.log_q.get(name, first), dtype=torch.float64)
        return out

    def test_step(self, batch, batch_idx):
        pass


def closed_form(data: dict, eps: float) -> tuple[float, dict[str, float]]:
    """``sum_c v_c KL(p_c || q_c)`` and its per-class terms, from the reference alone."""
    _, _, probs = reference_probs(data)
    fwd = ref.forward(data, prune=1e-16)
    assert fwd.missing < 1e-10
    per_class = {}
    for c, row in probs.items():
        q = [(1 - eps) * p + eps / len(row) for p in row]
        per_class[c] = fwd.visits.get(c, 0.0) * math.fsum(
            p * math.log(p / qi) for p, qi in zip(row, q) if p > 0
        )
    return math.fsum(per_class.values()), per_class


def run(tmp_path, eps: float) -> tuple[dict, dict, PFADataModule]:
    path = tmp_path / "two.json"
    path.write_text(json.dumps(DATA))
    dm = PFADataModule(automaton=str(path), intervention="exact", event=EVENT, count=COUNT,
                       num_strings=20, val_strings=0, test_strings=60, seed=3,
                       cache_dir="none", device="cpu")
    writer = ResultsWriter(str(tmp_path / f"out{eps}" / "results.json"))
    trainer = L.Trainer(callbacks=[DecomposedKLCallback(), writer], logger=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False)
    (metrics,) = trainer.test(StackWalker(DATA, eps), datamodule=dm, verbose=False)
    return metrics, json.loads(writer.written.read_text()), dm


def test_a_pushdown_automaton_through_the_data_module_and_the_decomposed_kl(tmp_path):
    eps = 0.2
    metrics, results, dm = run(tmp_path, eps)
    assert dm.automaton.kind == "pushdown" and dm.automaton == load_automaton(DATA)
    train = dm.corpus("train")  # the intervention ran through draw: recount each string's pushes
    pushes = []
    for string in train.to_lists():
        prob, steps = ref.walk(DATA, [DATA["alphabet"][i] for i in string])
        assert prob > 0  # in the support
        pushes.append(sum(ref.push_event("Y")(*step) for step in steps))
    assert pushes == train.counts.tolist() and sum(pushes) == COUNT
    total, per_class = closed_form(DATA, eps)
    assert metrics["kl_total"] == pytest.approx(total, rel=1e-5)
    assert results["kl_total"] == pytest.approx(total, rel=1e-9)
    assert results["automaton"]["kind"] == "pushdown" and results["event"] == EVENT
    for name, value in per_class.items():
        assert results["kl"]["state"][name] == pytest.approx(value, rel=1e-9, abs=1e-12), name
    # negative control: another eps moves the total far beyond the tolerance
    assert abs(closed_form(DATA, 0.25)[0] - total) > 1e-3 * total


def closed_form_steps(data: dict, eps: float, event) -> tuple[float, float]:
    """``(weighted, unweighted)`` contribution of the steps ``event`` counts, from the
    reference alone: ``sum v_c p log(p / q)`` over them, and that over their mass ``sum v_c p``
    (the KL per step taken)."""
    symbols, _, probs = reference_probs(data)
    pda, fwd = ref.RefPDA.from_dict(data), ref.forward(data, prune=1e-16)
    weighted = mass = 0.0
    for state in data["states"]:
        for top in [None, *data["stack_alphabet"]]:
            c = ref.class_name(state, [] if top is None else [top])
            if c not in probs:
                continue
            row = probs[c]
            for sym, _, action, p in pda.choices(state, [] if top is None else [top]):
                if sym is None or not event(state, top, sym, action) or p == 0:
                    continue
                q = (1 - eps) * p + eps / len(row)
                visits = fwd.visits.get(c, 0.0)
                weighted += visits * p * math.log(p / q)
                mass += visits * p
    return weighted, weighted / mass


def test_push_and_pop_events_get_entries_of_their_own_in_results(tmp_path):
    """``kl.push``/``kl.pop`` (and their unweighted values and test visits) hold every stack
    symbol's push and pop contribution, equal to the closed form over the steps each counts, so
    that a ``pop:X`` target has other ``pop`` events to be compared with (issue 48 item 4)."""
    eps = 0.2
    _, results, _ = run(tmp_path, eps)
    for kind, event in (("push", ref.push_event), ("pop", ref.pop_event)):
        assert set(results["kl"][kind]) == set(DATA["stack_alphabet"]) == {"X", "Y"}
        for x in DATA["stack_alphabet"]:
            weighted, unweighted = closed_form_steps(DATA, eps, event(x))
            assert results["kl"][kind][x] == pytest.approx(weighted, rel=1e-9), (kind, x)
            assert results["kl_unweighted"][kind][x] == pytest.approx(unweighted, rel=1e-9)
            assert results["test_visits"][kind][x] > 0
    # the target's own entry is its kl_target; a pop reads other steps than the push of X
    assert results["kl"]["push"]["Y"] == pytest.approx(results["kl_target"], rel=1e-12)
    assert results["test_visits"]["push"]["Y"] == results["target_test_visits"]
    assert results["kl"]["pop"]["X"] != pytest.approx(results["kl"]["push"]["X"], rel=1e-3)
