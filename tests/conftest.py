"""Shared fixtures: small automata and the devices to test on."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # the CLI processes some tests start, too

import pytest
import torch

torch.set_num_threads(1)

from cfl_lightning.automata import PFSA, parity_starfree_pfsa, random_pfsa
from tests.helpers import short_pfsa

# end the process right after pytest's summary (tests/fast_exit.py: teardown took tens of seconds
# of wall time under load); CFL_LIGHTNING_SLOW_EXIT=1 exits normally
pytest_plugins = ["tests.fast_exit"]

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


@pytest.fixture
def small() -> PFSA:
    return short_pfsa()


@pytest.fixture
def parity() -> PFSA:
    return parity_starfree_pfsa(0.3)


@pytest.fixture
def random50() -> PFSA:
    return random_pfsa(50, 10, 0, 0)
