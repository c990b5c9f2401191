"""Evaluation ticks on merged batches, and the ensemble's pacing choice.

The ensemble evaluates a member's consecutive (length-sorted) batches merged up to
``EVAL_CELLS`` padded positions; the values must not depend on it (they are sums over strings).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cfl_lightning.ensemble.data import EVAL_CELLS, EnsembleData, eval_batches


def _batches(sizes, widths):
    """Batches of consecutive string indices with the given sizes; string lengths = widths."""
    out, positions, start = [], [], 0
    for n, w in zip(sizes, widths):
        out.append(torch.arange(start, start + n))
        positions += [w] * n
        start += n
    return out, torch.tensor(positions)


def test_merged_batches_keep_every_string_once_in_order_within_the_budget():
    batches, positions = _batches([10, 8, 6, 5, 3, 2, 1], [5, 8, 12, 20, 40, 90, 300])
    merged = eval_batches(batches, positions, cells=256)
    assert torch.equal(torch.cat(merged), torch.cat(batches))
    for group in merged:
        within = int(positions[group].max()) * len(group) <= 256
        alone = any(torch.equal(group, b) for b in batches)  # an oversized batch stays alone
        assert within or alone
    # greedy: no two neighbours could have been one merged batch
    for a, b in zip(merged, merged[1:]):
        joined = torch.cat([a, b])
        assert int(positions[joined].max()) * len(joined) > 256
    assert len(merged) < len(batches)


def test_a_batch_over_the_budget_stays_alone_and_empty_input_gives_nothing():
    batches, positions = _batches([4, 50, 4], [10, 10, 10])
    merged = eval_batches(batches, positions, cells=100)
    assert [len(g) for g in merged] == [4, 50, 4]
    assert eval_batches([], torch.zeros(0, dtype=torch.long)) == []


def test_ensemble_data_merges_evaluation_batches_only(tmp_path):
    from cfl_lightning.data import PFADataModule

    dms = [PFADataModule(generator="parity", intervention="none", num_strings=60,
                         val_strings=40, test_strings=40, max_tokens=16, seed=s)
           for s in range(2)]
    data = EnsembleData(dms)
    for m, dm in enumerate(dms):
        assert data.batches("train", m) is dm.batches("train")
        for split in ("val", "test"):
            merged = data.batches(split, m)
            assert len(merged) < len(dm.batches(split))
            assert sorted(torch.cat(merged).tolist()) == list(range(len(dm.tokenized(split).positions)))
    counts = [len(data.batches("val", m)) for m in range(2)]
    assert data.first_batch("val") == [0, counts[0]]
    packed = data.packed("val", torch.device("cpu"))
    assert packed.num_batches == counts
    assert EVAL_CELLS >= 16 * 128  # far above a training batch's max_tokens


@pytest.mark.parametrize("pacing", ["sideways", "", None])
def test_unknown_pacing_is_refused(pacing):
    from cfl_lightning.ensemble import EnsembleLanguageModel
    from cfl_lightning.data import PFADataModule
    from cfl_lightning.models import LSTMLanguageModel

    dm = PFADataModule(generator="parity", intervention="none", num_strings=20, val_strings=10,
                       test_strings=10, seed=0)
    model = LSTMLanguageModel(num_symbols=dm.num_symbols, param_budget=5_000)
    with pytest.raises(ValueError, match="pacing"):
        EnsembleLanguageModel([model], [dm], pacing=pacing)


def test_auto_pacing_is_by_width_on_the_cpu_and_lockstep_for_the_loop_engine():
    from cfl_lightning.ensemble import EnsembleLanguageModel
    from cfl_lightning.data import PFADataModule
    from cfl_lightning.models import TransformerLanguageModel

    dm = PFADataModule(generator="parity", intervention="none", num_strings=20, val_strings=10,
                       test_strings=10, seed=0)
    model = TransformerLanguageModel(num_symbols=dm.num_symbols, param_budget=20_000)
    stacked = EnsembleLanguageModel([model], [dm], engine="stacked")
    assert stacked.pacing == "auto" and stacked._pacing() == "width"
    loop = EnsembleLanguageModel([model], [dm], engine="loop")
    assert loop._pacing() == "lockstep"
    explicit = EnsembleLanguageModel([model], [dm], engine="stacked", pacing="lockstep")
    assert explicit._pacing() == "lockstep"
    assert np.all(np.array([stacked.data.pacing]) == "width")
