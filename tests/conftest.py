"""Shared fixtures: small automata and the devices to test on."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")

import pytest
import torch

torch.set_num_threads(1)

from cfl_lightning.automata import PFSA, parity_starfree_pfsa, random_pfsa

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def short_pfsa() -> PFSA:
    """3 states, 2 symbols, short strings (mean length ~2.4): enumerable to high mass."""
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


@pytest.fixture
def small() -> PFSA:
    return short_pfsa()


@pytest.fixture
def parity() -> PFSA:
    return parity_starfree_pfsa(0.3)


@pytest.fixture
def random50() -> PFSA:
    return random_pfsa(50, 10, 0, 0)
