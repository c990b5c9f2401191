"""The pushdown automaton against the brute-force reference (tests/pushdown_reference.py).

JSON round trips and loading by kind; every validation error in one line; annotate, class
probabilities, expected class visits and event tables against enumeration with an explicit
Python stack; the excursion system's fixed point against Kleene iteration (hypothesis);
generators; the unconstrained sampler's string law by chi-square with a negative control.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cfl_lightning.automata import (
    PFSA,
    PushdownAutomaton,
    anbn_pda,
    dyck_pda,
    load_automaton,
    parity_starfree_pfsa,
    parse_event,
    random_pda,
)
from cfl_lightning.automata.pushdown import fixpoint as fp
from cfl_lightning.automata.pushdown.json_form import pda_from_dict
from cfl_lightning.errors import CflError, EventError, PDAError, PFSAError
from cfl_lightning.sampling.pushdown.unconstrained import sample_unconstrained
from tests import pushdown_reference as ref
from tests.reference import chi_square_pvalue

ALPHA = 1e-3

SMALL = {
    "dyck1": lambda: ref.dyck_json(1, close=0.7, final=0.5),
    "dyck2": lambda: ref.dyck_json(2, [0.6, 0.4], close=0.9, final=0.6),
    "anbn": lambda: ref.anbn_json(0.4),
    "two_state": ref.two_state_json,
}


@pytest.fixture(params=sorted(SMALL))
def small(request):
    data = SMALL[request.param]()
    return data, PushdownAutomaton.from_dict(data)


def enum(data, max_len=40):
    return ref.enumerate_pda(data, max_len, min_prob=1e-13)


def ids(pda, symbols):
    return [pda.alphabet.index(s) for s in symbols]


# ---------------------------------------------------------------------- JSON and loading
def test_json_round_trip(small, tmp_path):
    data, pda = small
    assert PushdownAutomaton.from_dict(pda.to_dict()) == pda
    path = tmp_path / "a.json"
    pda.to_json(path)
    assert PushdownAutomaton.from_json(path) == pda
    assert load_automaton(path) == pda
    assert json.loads(path.read_text())["kind"] == "pushdown"
    assert load_automaton(data).kind == "pushdown"


def test_loading_by_kind(tmp_path):
    pfsa = parity_starfree_pfsa(0.3)
    assert isinstance(load_automaton(pfsa.to_dict()), PFSA)  # no "kind": a PFSA
    with pytest.raises(PFSAError, match="unknown automaton kind 'tree'"):
        load_automaton({"kind": "tree"})
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(PFSAError, match="bad.json: not valid JSON"):
        load_automaton(bad)


def _edit(data, index, **changes):
    data = copy.deepcopy(data)
    arc = data["transitions"][index]
    for key, value in changes.items():
        if value is None and key in ("push", "pop"):
            arc.pop(key, None)
        else:
            arc[key] = value
    return data


def _bad_files():
    base = ref.dyck_json(1, close=0.7, final=0.5)  # arcs: 0 (-, push), 1 ((, push), 2 ((, pop)
    yield "pops the empty stack", _edit(base, 0, pop=True, push=None)
    yield "unknown pushed stack symbol '<'", _edit(base, 0, push="<")
    yield "unknown stack top '<'", _edit(base, 1, top="<")
    yield "unknown source state 'z'", _edit(base, 1, source="z")
    yield "unknown symbol 'x'", _edit(base, 1, symbol="x")
    yield "outgoing weights sum to 0.9", _edit(base, 2, weight=0.6)
    yield "outgoing \\+ final weights sum to 1.1", _edit(base, 0, weight=0.6)
    yield "invalid weight -0.3", _edit(_edit(base, 1, weight=-0.3), 2, weight=1.3)
    yield "both push and pop", _edit(base, 2, push="(")
    dup = copy.deepcopy(base)
    dup["transitions"].append(dict(dup["transitions"][2]))
    yield "nondeterminism: state 'q' with top '\\(' has two transitions on symbol '\\)'", dup
    yield "does not end with probability 1", ref.dyck_json(1, close=0.4, final=0.5)
    yield "expected string length is infinite", ref.dyck_json(1, close=0.5, final=0.5)
    named = copy.deepcopy(base)
    named["stack_alphabet"] = ["a/b"]
    yield "stack symbol name 'a/b'", named
    missing = copy.deepcopy(base)
    del missing["stack_alphabet"]
    yield "missing key 'stack_alphabet'", missing
    stuck = copy.deepcopy(base)
    stuck["transitions"] = stuck["transitions"][:2]  # '(' on top can only push: never closes
    stuck["transitions"][1]["weight"] = 1.0
    yield "does not end with probability 1", stuck


@pytest.mark.parametrize("expected,data", list(_bad_files()), ids=lambda v: str(v)[:30])
def test_validation_errors_one_line(expected, data, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(PDAError, match=expected) as info:
        load_automaton(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path))


def test_supercritical_ending_probability():
    # Dyck-1 with open a on a stack: an excursion returns with probability (1 - a) / a
    a, f = 0.6, 0.5
    data = ref.dyck_json(1, close=1 - a, final=f)
    system = fp.excursion_system(*_tables(data))
    point = fp.least_fixed_point(system)
    e = (1 - a) / a
    assert point.excursions.item() == pytest.approx(e, abs=1e-14)
    assert point.ends.item() == pytest.approx(f / (1 - (1 - f) * e), abs=1e-14)
    ended = math.fsum(ref.forward(data, max_len=400).count_law.values())  # at most 400 symbols
    assert ended <= point.ends.item() + 1e-12 and ended == pytest.approx(point.ends.item(), abs=1e-6)


def _tables(data):
    d = pda_from_dict(data)
    return d["target"], d["action"], d["weights"], d["final"]


# ---------------------------------------------------------------------- classes and annotate
def test_annotate_against_reference(small):
    data, pda = small
    strings = enum(data, 10).strings[:300]
    corpus_ids = [ids(pda, s.symbols) for s in strings]
    tokens = torch.tensor([t for s in corpus_ids for t in s], dtype=torch.long)
    lengths = torch.tensor([len(s) for s in corpus_ids])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    classes = pda.annotate(tokens, offsets).tolist()
    expected = [pda.class_names.index(c) for s in strings for c in s.classes]
    assert classes == expected


def test_annotate_errors():
    pda = PushdownAutomaton.from_dict(ref.dyck_json(1))
    open_, close = 0, 1
    with pytest.raises(CflError, match=r"string 1 leaves the automaton's support at symbol #0"):
        pda.annotate(torch.tensor([open_, close, close]), torch.tensor([0, 2, 3]))
    with pytest.raises(CflError, match="string 0 ends with 2 symbols on the stack"):
        pda.annotate(torch.tensor([open_, open_]), torch.tensor([0, 2]))
    with pytest.raises(CflError, match="symbol id outside"):
        pda.annotate(torch.tensor([5]), torch.tensor([0, 1]))
    assert pda.annotate(torch.tensor([], dtype=torch.long), torch.tensor([0, 0])).tolist() == [1]


def test_class_probs_and_transitions(small):
    data, pda = small
    probs, trans = pda.class_probs(), pda.class_transitions()
    assert probs.shape == (pda.num_classes, pda.num_symbols + 1) == trans.shape
    refpda = ref.RefPDA.from_dict(data)
    for c, name in enumerate(pda.class_names):
        state, top = name.split("/")
        stack = [] if top == "-" else [top]
        row = [0.0] * (pda.num_symbols + 1)
        for sym, _t, _a, w in refpda.choices(state, stack):
            row[pda.num_symbols if sym is None else pda.alphabet.index(sym)] = w
        assert probs[c].tolist() == pytest.approx(row, abs=0)
        assert trans[c].tolist() == [w > 0 for w in row]


def test_expected_class_visits_against_the_reference(small):
    data, pda = small
    reference = ref.forward(data)
    assert reference.missing < 1e-9
    got = pda.expected_class_visits()
    for c, name in enumerate(pda.class_names):
        assert got[c].item() == pytest.approx(reference.visits.get(name, 0.0), abs=1e-7, rel=1e-7)
    assert (got >= 0).all()
    length = math.fsum(reference.flow.values())
    assert pda.expected_length() == pytest.approx(length, rel=1e-7)
    # negative control: the reference tells a perturbed automaton's visits apart
    other = copy.deepcopy(data)  # every small automaton's first arc leaves (initial, -)
    other["transitions"][0]["weight"] += 0.05
    other["final"][data["initial"]] -= 0.05
    changed = ref.forward(other).visits
    assert any(abs(changed.get(n, 0) - got[c].item()) > 1e-6 for c, n in enumerate(pda.class_names))


def _events(pda):
    specs = [f"symbol:{a}" for a in pda.alphabet] + [f"state:{q}" for q in pda.states]
    specs += [f"push:{x}" for x in pda.stack_alphabet]
    specs += [f"pop:{x}" for x in pda.stack_alphabet]
    specs += [f"class:{c}" for c in pda.class_names]
    exists = pda.class_transitions()
    specs += [
        f"transition:{c}:{a}"
        for i, c in enumerate(pda.class_names)
        for j, a in enumerate(pda.alphabet)
        if exists[i, j]
    ]
    return specs


def _ref_event(spec):
    kind, rest = spec.split(":", 1)
    if kind == "transition":
        cls, sym = rest.split(":", 1)
        return ref.transition_event(cls, sym)
    return {"symbol": ref.symbol_event, "state": ref.state_event, "push": ref.push_event,
            "pop": ref.pop_event, "class": ref.class_event}[kind](rest)


def test_event_tables_count_like_the_reference(small):
    data, pda = small
    strings = enum(data, 10).strings[:200]
    for spec in _events(pda):
        table = pda.event_table(parse_event(spec))
        assert table.shape == (pda.num_classes, pda.num_symbols) and table.dtype == torch.long
        event = _ref_event(spec)
        for s in strings:
            classes = [pda.class_names.index(c) for c in s.classes[:-1]]
            got = sum(int(table[c, a]) for c, a in zip(classes, ids(pda, s.symbols)))
            assert got == s.count(event), (spec, s.symbols)


def test_expected_occurrences_against_the_reference(small):
    data, pda = small
    reference = ref.forward(data)
    occurrences = pda.expected_occurrences()
    assert set(occurrences) == set(_events(pda))
    for spec, value in occurrences.items():
        assert value == pytest.approx(reference.expected(_ref_event(spec)), abs=1e-7, rel=1e-7)


def test_event_errors():
    pda = PushdownAutomaton.from_dict(ref.dyck_json(2))
    with pytest.raises(EventError, match="unknown stack symbol"):
        pda.event_table(parse_event("push:<"))
    with pytest.raises(EventError, match="unknown class 'q'"):
        pda.event_table(parse_event("transition:q:("))
    with pytest.raises(EventError, match=r"class 'q/\(' has no transition on '\]'"):
        pda.event_table(parse_event("transition:q/(:]"))
    assert str(parse_event("push:(")) == "push:("
    s1 = pda.num_symbols + 1
    assert pda.event_location(parse_event("push:(")) == ("transition", (0, s1, 2 * s1))
    assert pda.event_location(parse_event("state:q")) == ("state", (0, 1, 2))
    assert pda.event_location(parse_event("symbol:]")) == ("symbol", (3,))
    assert pda.event_location(parse_event("transition:q/[:]")) == ("transition", (s1 + 3,))


def _dot_expected(data) -> tuple[Counter, dict[str, str], str]:
    """From the JSON form alone: each transition's edge ``(source, target, label)``, each
    state's node shape, and the initial state."""
    edges = Counter()
    for arc in data["transitions"]:
        action = "pop" if arc.get("pop") else (
            f"push {arc['push']}" if arc.get("push") is not None else "keep")
        top = "-" if arc["top"] is None else arc["top"]
        label = f"{arc['symbol']}, {top}/{action} ({arc['weight']:.3g})"
        edges[(arc["source"], arc["target"], label)] += 1
    final = data.get("final", {})
    shapes = {q: "doublecircle" if final.get(q, 0) > 0 else "circle" for q in data["states"]}
    return edges, shapes, data["initial"]


def _dot_parsed(dot: str) -> tuple[Counter, dict[str, str], str]:
    edge = re.compile(r'^  ("[^"]*") -> ("[^"]*") \[label=(".*")\];$')
    node = re.compile(r'^  ("[^"]*") \[shape=(\w+), label=')
    edges, shapes, start = Counter(), {}, None
    for line in dot.splitlines():
        if m := edge.match(line):
            edges[tuple(json.loads(g) for g in m.groups())] += 1
        elif m := node.match(line):
            shapes[json.loads(m.group(1))] = m.group(2)
        elif line.startswith("  __start -> "):
            start = json.loads(line[len("  __start -> "):].rstrip(";"))
    return edges, shapes, start


def test_to_dot_draws_every_transition_once_with_its_action_and_weight(small):
    data, pda = small
    dot = pda.to_dot()
    assert dot.startswith("digraph pushdown {") and dot.endswith("}\n")
    assert _dot_parsed(dot) == _dot_expected(data)
    # negative control: one transition's action changed is seen
    changed = {**data, "transitions": [dict(data["transitions"][0], push=None, pop=True),
                                        *data["transitions"][1:]]}
    if not data["transitions"][0].get("pop"):
        assert _dot_parsed(dot) != _dot_expected(changed)


def test_to_device(small):
    _, pda = small
    assert pda.to("cpu") == pda and pda.to("cpu") is not pda


# ---------------------------------------------------------------------- the fixed point
@st.composite
def systems(draw):
    q = draw(st.integers(1, 3))
    g = draw(st.integers(1, 2))
    s = draw(st.integers(1, 3))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    target = torch.randint(-1, q, (q, g + 1, s), generator=gen)
    action = torch.randint(-2, g, (q, g + 1, s), generator=gen)
    action[:, g, :] = torch.where(action[:, g, :] == fp.POP, fp.KEEP, action[:, g, :])
    weights = torch.rand(q, g + 1, s, generator=gen, dtype=torch.float64) * (target >= 0)
    final = torch.rand(q, generator=gen, dtype=torch.float64) * draw(st.sampled_from([0.0, 1.0]))
    total = weights.sum(2)
    total[:, g] += final
    scale = draw(st.floats(0.3, 1.0)) / total.clamp(min=1e-12)
    final = final * scale[:, g]
    return fp.excursion_system(target, action, weights * scale[:, :, None], final)


def _check_newton(system, iterations):
    point = fp.least_fixed_point(system)
    x = point.vector()
    kleene = torch.zeros_like(x)
    for _ in range(iterations):
        kleene = fp.apply_system(system, kleene)
    assert torch.allclose(fp.apply_system(system, x), x, atol=1e-9)
    # Kleene iteration from 0 increases to the least fixed point: Newton is not below it, and
    # not above it where Kleene has converged (near-critical systems converge slowly)
    assert (x >= kleene - 1e-9).all()
    if float((fp.apply_system(system, kleene) - kleene).abs().max()) < 1e-13:
        assert torch.allclose(x, kleene, atol=1e-9)


@settings(max_examples=10, deadline=None)
@given(systems())
def test_newton_matches_kleene_iteration(system):
    _check_newton(system, 500)


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(systems())
def test_newton_matches_kleene_iteration_many(system):
    _check_newton(system, 5000)


def test_jacobian_is_the_derivative():
    system = fp.excursion_system(*_tables(ref.two_state_json()))
    x = torch.rand(system.num_variables, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    numeric = torch.autograd.functional.jacobian(lambda v: fp.apply_system(system, v), x)
    assert torch.allclose(fp.jacobian(system, x), numeric, atol=1e-12)


# ---------------------------------------------------------------------- generators
def test_dyck_generator():
    a, b = dyck_pda(2, seed=3), dyck_pda(2, seed=3)
    assert a == b and a != dyck_pda(2, seed=4)
    assert a.ending_probability() == pytest.approx(1.0, abs=1e-12)
    f, c = 0.5, 0.6
    assert a.expected_length() == pytest.approx((1 - f) / f * 2 * c / (2 * c - 1), rel=1e-9)
    assert a.alphabet == ("(", ")", "[", "]") and a.stack_alphabet == ("(", "[")
    assert dyck_pda(6, seed=0).alphabet[:2] == ("o0", "c0")
    with pytest.raises(PFSAError, match="close_prob"):
        dyck_pda(2, seed=0, close_prob=0.5)


def test_anbn_generator_law():
    pda = anbn_pda(0.4)
    law = enum(pda.to_dict(), 20).law()
    for n in range(6):
        assert law[("a",) * n + ("b",) * n] == pytest.approx(0.6 * 0.4**n, abs=1e-15)
    assert set(len(s) % 2 for s in law) == {0}
    one = enum(anbn_pda(0.4, min_n=1).to_dict(), 20).law()
    assert () not in one and one[("a", "b")] == pytest.approx(0.6)


@pytest.mark.parametrize("shape", [(2, 2, 1), (3, 3, 2), (10, 10, 3)])
def test_random_pda_valid_and_seeded(shape):
    a = random_pda(*shape, seed=0)
    assert a == random_pda(*shape, seed=0) and a != random_pda(*shape, seed=1)
    assert a.ending_probability() == pytest.approx(1.0, abs=1e-9)
    assert (a.expected_class_visits() > 0).all()
    assert math.isfinite(a.expected_length())


def test_random_pda_redraw_bound():
    with pytest.raises(PDAError, match="in 3 tries"):
        random_pda(3, 3, 2, seed=0, push_prob=1.0, pop_prob=0.0, max_tries=3)
    capped = random_pda(4, 4, 2, seed=0, max_expected_length=20.0)
    assert capped.expected_length() <= 20.0 < random_pda(4, 4, 2, seed=0).expected_length()


# ---------------------------------------------------------------------- unconstrained sampler
def _law_test(data, num, seed):
    pda = PushdownAutomaton.from_dict(data)
    gen = torch.Generator().manual_seed(seed)
    event = parse_event(f"push:{pda.stack_alphabet[0]}")
    corpus = sample_unconstrained(pda, num, gen, event_table=pda.event_table(event))
    observed = Counter(tuple(pda.alphabet[t] for t in s) for s in corpus.to_lists())
    return pda, corpus, observed


@pytest.mark.parametrize("name", ["dyck1", "anbn", "two_state"])
def test_unconstrained_string_law(name):
    data = SMALL[name]()
    pda, corpus, observed = _law_test(data, 20_000, seed=0)
    enumerated = enum(data, 14)
    expected = enumerated.law()
    assert chi_square_pvalue(observed, expected, len(corpus)) > ALPHA
    # negative control: the law of strings with no push of the first stack symbol is rejected
    event = ref.push_event(pda.stack_alphabet[0])
    zero = {s.symbols: s.prob for s in enumerated.strings if s.count(event) == 0}
    total = sum(zero.values())
    wrong = {k: v / total for k, v in zero.items()}
    assert chi_square_pvalue(observed, wrong, len(corpus)) < ALPHA
    # counts are the reference's, and every string belongs to the automaton
    counts = corpus.counts.tolist()
    for k in range(200):
        symbols = tuple(pda.alphabet[t] for t in corpus.string(k))
        prob, steps = ref.walk(data, symbols)
        assert prob > 0 and counts[k] == sum(event(*step) for step in steps)
    pda.annotate(corpus.tokens, corpus.offsets)


def test_unconstrained_seeded_and_lengths():
    pda = dyck_pda(2, seed=0)
    one = sample_unconstrained(pda, 500, torch.Generator().manual_seed(5))
    two = sample_unconstrained(pda, 500, torch.Generator().manual_seed(5))
    assert torch.equal(one.tokens, two.tokens) and torch.equal(one.offsets, two.offsets)
    assert one.counts is None
    # deep strings: the stack grows past its first allocation
    deep = dyck_pda(1, seed=0, close_prob=0.55, final_weight=0.2)
    corpus = sample_unconstrained(deep, 100, torch.Generator().manual_seed(1))
    depth = (1 - 2 * corpus.tokens).cumsum(0).max()  # opens +1, closes -1; strings are balanced
    assert int(depth) > 8
    deep.annotate(corpus.tokens, corpus.offsets)


@pytest.mark.slow
def test_unconstrained_law_dyck2_large():
    data = SMALL["dyck2"]()
    pda, corpus, observed = _law_test(data, 200_000, seed=1)
    assert chi_square_pvalue(observed, enum(data, 14).law(), len(corpus)) > ALPHA
    visits = torch.bincount(pda.annotate(corpus.tokens, corpus.offsets), minlength=pda.num_classes)
    mean = visits.double() / len(corpus)
    assert torch.allclose(mean, pda.expected_class_visits(), rtol=0.02)


def test_satisfies_the_automaton_protocol():
    from cfl_lightning.automata.protocol import Automaton, expected_event_count

    pda = PushdownAutomaton.from_dict(ref.dyck_json(2))
    assert isinstance(pda, Automaton)
    event = parse_event("push:(")
    assert expected_event_count(pda, event) == pytest.approx(pda.expected_occurrences()["push:("])


@functools.lru_cache(maxsize=None)
def _random_small(seed):
    return random_pda(10, 10, 3, seed=seed)


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 50), st.sampled_from(["push:X0", "symbol:a", "state:q1"]))
def test_sampled_counts_match_annotate(seed, spec):
    pda = _random_small(seed % 2)
    table = pda.event_table(parse_event(spec))
    corpus = sample_unconstrained(pda, 100, torch.Generator().manual_seed(seed), event_table=table)
    classes = pda.annotate(corpus.tokens, corpus.offsets)
    k = len(corpus)
    starts = corpus.offsets[:-1] + torch.arange(k)
    is_end = torch.zeros(classes.numel(), dtype=torch.bool)
    is_end[starts + corpus.lengths] = True
    per_symbol = table[classes[~is_end], corpus.tokens]
    owner = torch.repeat_interleave(torch.arange(k), corpus.lengths)
    recount = torch.zeros(k, dtype=torch.long).index_add_(0, owner, per_symbol)
    assert torch.equal(recount, corpus.counts)
