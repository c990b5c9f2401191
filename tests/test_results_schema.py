"""The results.json schema is one table: the docs render it, the writer orders by it, the reader
types by it, and a written file satisfies it (each with a negative control)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from cfl_lightning.callbacks import FinishedRun, build_results
from cfl_lightning.data import PFADataModule
from cfl_lightning.errors import CflError
from cfl_lightning.metrics import DecomposedKL, StateVisits, kl_entries
from cfl_lightning.results import (
    FIELDS,
    RESULT_KEYS,
    FieldReader,
    has_results,
    markdown_table,
    ordered,
    problem_in,
    type_problems,
    write_results,
)
from cfl_lightning.results.schema import TYPES, field

REPO = Path(__file__).resolve().parents[1]
SMALL = dict(num_strings=30, val_strings=10, test_strings=20, device="cpu", cache_dir="none")


def doc_table(text: str) -> str:
    begin = text.index("<!-- results-schema: begin")
    begin = text.index("\n", begin) + 1
    return text[begin:text.index("<!-- results-schema: end -->")]


def test_reference_shows_the_schema():
    text = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
    section = text.split("## results.json", 1)[1].split("\n## ", 1)[0]
    assert doc_table(section) == markdown_table()
    # negative control: a key renamed in the doc is caught
    assert doc_table(section.replace("| `steps` |", "| `step` |")) != markdown_table()


_DOC_ROW = re.compile(r"^\| `([^`]+)` \| (\w+) \|", re.M)


def documented_keys(section: str) -> list[tuple[str, str]]:
    """``(key, type)`` of every row of the reference's results.json table, read off the page."""
    return _DOC_ROW.findall(doc_table(section))


def test_every_documented_key_is_in_the_schema_and_every_key_documented():
    """Read off the page independently of :func:`markdown_table` (which renders the doc):
    the same keys, in file order, with the schema's types; keys are unique and each names its
    own field."""
    text = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
    section = text.split("## results.json", 1)[1].split("\n## ", 1)[0]
    documented = documented_keys(section)
    assert [key for key, _ in documented] == list(RESULT_KEYS)
    assert all(field(key).type == kind and kind in TYPES for key, kind in documented)
    assert len(set(RESULT_KEYS)) == len(RESULT_KEYS)
    assert all(field(f.name) is f and f.meaning for f in FIELDS)
    # negative controls: a key missing from the page, or one the schema lacks, is caught
    dropped = section.replace("| `steps` | integer |", "| steps | integer |")
    assert "steps" not in [key for key, _ in documented_keys(dropped)]
    extra = section.replace("| `steps` |", "| `steps_total` | integer | x | never |\n| `steps` |")
    assert [key for key, _ in documented_keys(extra)] != list(RESULT_KEYS)


def finished_results(tmp_path: Path, event: str | None = "state:odd") -> dict:
    """A complete results.json of a tiny run (uniform predictions), written and read back."""
    kwargs = dict(intervention="exact", event=event, count=40) if event else {}
    dm = PFADataModule(generator="parity", **kwargs, **SMALL)
    dm.setup("test")
    kl, visits = DecomposedKL(dm.pfsa), StateVisits(dm.pfsa.num_states)
    for batch in dm.test_dataloader():
        mask = batch["mask"].bool()
        log_probs = torch.full(batch["target_probs"].shape, -math.log(3), dtype=torch.float64)
        kl.update(log_probs, batch["states"], mask, batch.get("weights"))
        visits.update(batch["states"], mask)
    entries = kl_entries(kl.compute(), visits.compute(), dm.pfsa, dm.event)
    results = build_results(FinishedRun(
        nn.Linear(2, 3), dm, tmp_path, kl=entries, best_val_loss=0.5, epochs=2,
        train_time_s=1.0, seed=0, stopped_early=False, steps=10,
    ))
    path = write_results(tmp_path / "results.json", results)
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("event", ["state:odd", None])
def test_a_written_file_satisfies_the_schema(tmp_path, event):
    data = finished_results(tmp_path, event)
    assert list(data) == list(RESULT_KEYS)
    assert type_problems(data) == []
    assert has_results(tmp_path / "results.json")
    # it round-trips: read back key by key with the schema's types, and written again the same
    reader = FieldReader("results.json")
    read = {key: reader.get(data, key) for key in RESULT_KEYS}
    assert read == data
    assert all(type(read[k]) is type(v) for k, v in data.items() if field(k).type != "number")
    again = write_results(tmp_path / "again" / "results.json", data)
    assert again.read_bytes() == (tmp_path / "results.json").read_bytes()
    # negative controls: each departure is named
    assert type_problems({**data, "steps": 1.5}) == ["steps: expected integer, got float"]
    assert type_problems({**data, "model": None}) == ["model is null (never null)"]
    assert type_problems({**data, "stopped_early": 0}) == [
        "stopped_early: expected boolean, got int"
    ]
    assert type_problems({**data, "extra": 1}) == ["unknown key extra"]
    assert type_problems({k: v for k, v in data.items() if k != "seed"}) == ["missing seed"]


def test_the_writer_orders_by_the_schema():
    values = {key: None for key in reversed(RESULT_KEYS)}
    assert list(ordered(values)) == list(RESULT_KEYS)
    assert ordered({**values, "kl_total": float("nan")})["kl_total"] is None
    with pytest.raises(ValueError, match=r"missing \['steps'\]"):
        ordered({k: v for k, v in values.items() if k != "steps"})
    with pytest.raises(ValueError, match=r"not in the schema \['extra'\]"):
        ordered({**values, "extra": 1})


def test_the_reader_types_by_the_schema():
    reader = FieldReader("r.json")
    data = {"count": "12", "kl_total": "NaN", "event": "None", "occurrences": {"count": {}}}
    assert reader.get(data, "count") == 12 and reader.get(data, "kl_total") is None
    assert reader.get(data, "event") is None and reader.get(data, "steps") is None
    assert reader.get(data, "occurrences") == {"count": {}}
    with pytest.raises(CflError, match='r.json: count: expected an integer or null, got "many"'):
        reader.get({"count": "many"}, "count")
    with pytest.raises(CflError, match="kl: expected an object or null, got 3"):
        reader.get({"kl": 3}, "kl")
    with pytest.raises(KeyError):
        reader.get(data, "not_a_key")
    # booleans: as JSON, as text (W&B), missing; anything else named
    assert [reader.get({"stopped_early": v}, "stopped_early")
            for v in (True, False, "false", "True", None, "None")] == [
        True, False, False, True, None, None]
    with pytest.raises(CflError, match="stopped_early: expected a boolean or null, got 1"):
        reader.get({"stopped_early": 1}, "stopped_early")


@pytest.mark.parametrize(
    "data,problem",
    [
        ({"kl_total": 0.25}, None),
        ({"kl_total": 0}, None),
        ({}, "no kl_total"),
        ({"kl_total": None}, "kl_total is null, not a number"),
        ({"kl_total": True}, "kl_total is true, not a number"),
        ({"kl_total": float("inf")}, "kl_total is inf"),
    ],
)
def test_the_validity_rule(data, problem):
    assert problem_in(data) == problem
