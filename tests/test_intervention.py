"""The ``Intervention`` value object: one definition of the kinds, their checks and satisfaction."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
import torch

from cfl_lightning import Event, Intervention, parity_starfree_pfsa
from cfl_lightning.errors import EventError, InterventionError
from cfl_lightning.sampling.intervention import COUNT_UNITS, INTERVENTIONS


def test_create_parses_and_is_frozen():
    iv = Intervention.create("exact", "state:odd", np.int64(12))
    assert iv == Intervention("exact", Event.parse("state:odd"), 12) and type(iv.count) is int
    assert iv.constrained and iv.unit == "occurrences" and hash(iv)
    with pytest.raises(dataclasses.FrozenInstanceError):
        iv.count = 3  # type: ignore[misc]
    none = Intervention.create("none", "symbol:a")
    assert not none.constrained and none.count is None and none.event == Event.parse("symbol:a")
    assert Intervention.create("at_least_once", "state:odd", 2).unit == "strings"
    assert set(COUNT_UNITS) == set(INTERVENTIONS)


@pytest.mark.parametrize(
    "args, error, match",
    [
        (("bogus", "state:odd", 1), InterventionError, "unknown intervention"),
        (("none", None, 1), InterventionError, "intervention is 'none'"),
        (("exact", None, 1), InterventionError, "needs an event"),
        (("exact", "state:odd", None), InterventionError, "needs a count"),
        (("exact", "state:odd", -1), InterventionError, "non-negative"),
        (("exact", "state:odd", 1.5), InterventionError, "integer"),
        (("exact", "state:odd", True), InterventionError, "integer"),
        (("exact", "oops", 1), EventError, "oops"),
    ],
)
def test_create_rejects(args, error, match):
    with pytest.raises(error, match=match):
        Intervention.create(*args)


@pytest.mark.parametrize(
    "args, k, match",
    [
        (("exact", "state:init", 5), 3, "at most 1"),  # init is left once per string
        (("exact", "state:rep", 1), 3, "cannot occur"),  # eta = 0: rep unreachable
        (("at_least_once", "state:odd", 4), 3, "exceeds"),
        (("exact", "state:nope", 1), 3, "unknown state"),
        (("exact", "state:odd", 1), 0, "num_strings"),
    ],
)
def test_validate_rejects_impossible_targets(args, k, match):
    pfsa = parity_starfree_pfsa(0.0)
    with pytest.raises((InterventionError, EventError), match=match):
        Intervention.create(*args).validate(pfsa, k)


def test_validate_returns_the_event_function():
    pfsa = parity_starfree_pfsa(0.3)
    fn = Intervention.create("exact", "state:init", 3).validate(pfsa, 3)  # 3 strings hold 3
    assert fn is not None and fn.shape == (4, 2) and int(fn.sum()) == 2
    assert Intervention.create().validate(pfsa, 1) is None


def test_realized_and_satisfied_with_negative_controls():
    counts = torch.tensor([0, 2, 0, 5])
    assert Intervention.create("exact", "state:odd", 7).satisfied(counts)
    assert not Intervention.create("exact", "state:odd", 6).satisfied(counts)
    assert Intervention.create("at_least", "state:odd", 6).satisfied(counts)
    assert not Intervention.create("at_least", "state:odd", 8).satisfied(counts)
    alo = Intervention.create("at_least_once", "state:odd", 2)
    assert alo.realized(counts) == 2 and alo.satisfied(counts)
    assert not Intervention.create("at_least_once", "state:odd", 3).satisfied(counts)
    assert Intervention.create("none", "state:odd").satisfied(counts)
    batched = torch.stack([counts, counts + 1])
    assert alo.satisfied_batched(batched).tolist() == [True, False]
    assert Intervention.create("exact", "state:odd", 11).satisfied_batched(batched).tolist() == [
        False, True]


def test_every_layer_uses_the_same_messages(tmp_path):
    """The sampler and the data module raise the Intervention's own message."""
    from cfl_lightning import sample_corpus
    from cfl_lightning.data import PFADataModule

    pfsa = parity_starfree_pfsa(0.3)
    with pytest.raises(InterventionError) as a:
        sample_corpus(pfsa, 3, seed=0, intervention="at_least_once", event="state:odd", count=4)
    with pytest.raises(InterventionError) as b:
        PFADataModule(generator="parity", eta=0.3, intervention="at_least_once",
                      event="state:odd", count=4, num_strings=3, cache_dir="none")
    assert str(a.value) == str(b.value)


@pytest.mark.slow
def test_root_import_stays_lightning_free():
    code = ("import sys, cfl_lightning; from cfl_lightning import Intervention, kl_to_automaton_loss;"
            " assert 'lightning' not in sys.modules and 'wandb' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
