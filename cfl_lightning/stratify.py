r"""Stratified correlational designs: pick a sweep's unconstrained corpora by their realized count.

A correlational study trains on unconstrained corpora and reads the target's realized count off
each. Drawn at random, most corpora land in the crowded middle of the count range and the tails
that a claim rests on stay empty. :func:`stratify` builds, for every distinct *data setting* of a
correlational grid sweep (the point's ``data.*`` values; the points that differ only in the model
or ``seed_everything`` share one), the training corpus exactly as its run will -- the same
``fit`` command line parsed into a :class:`~cfl_lightning.data.PFADataModule`, the same seed, the
same corpus cache -- and records the event's realized count (or the number of strings containing
it). Nothing is trained. The settings are put into bins ``[E_i, E_{i+1})`` and in each bin up to
``K`` are chosen by a draw seeded with ``(seed, i)`` over the bin's settings in grid order, so the
choice depends on nothing but the seed and the bin's membership. The result is a grid sweep of
exactly the chosen settings (each with every model and seed of the original grid).

The choice is made on the conditioning variable only, before any training, so the mean of each
bin stays an unbiased estimate of the correlational curve at that bin (over the settings in the
bin). Bins are sampled at different rates, so a regression pooled across bins needs weights
``candidates / chosen`` per bin.

The written sweep keeps every parameter of the original; when one ``data.*`` parameter varies, its
values become the chosen ones (the points keep their names and run directories: results of the
original sweep are reused); when several vary, they are replaced by one parameter ``data`` whose
values are the chosen settings as mappings (``--data={'topology_seed': 5, 'num_strings': 2000}``,
which the training CLI merges into its data section).

**Pooled events** (``symbol:*``, ``state:*``). One unconstrained run scores every symbol and
state, so a pooled analysis puts each (run, symbol) pair at its own realized count. Stratifying
for it bins the *pairs*: a setting is a candidate of every bin one of its symbols (states) falls
in, and choosing it adds all its pairs at once. A bin is *full* when it holds at least ``K``
chosen pairs from at least ``M`` chosen settings (``min_settings``). The rule
(:func:`choose_pooled`): visit the bins from the fewest candidate pairs to the most (ties: lower
bin first); in each, walk its candidate settings in an order drawn with ``(seed, bin)``, choosing
each one not yet chosen while the bin is not full. So every bin ends full or with every
candidate it has, and the settings chosen for the rare bins fill the crowded ones first.
"""

from __future__ import annotations

import bisect
import csv
import io
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cfl_lightning.errors import CflError
from cfl_lightning.results import OCCURRENCE_PART
from cfl_lightning.sweep import SweepError, build_command, iter_grid

__all__ = [
    "DataSetting",
    "StratifyError",
    "Stratification",
    "UNITS",
    "data_settings",
    "fit_arguments",
    "realized_value",
    "check_design",
    "choose",
    "choose_pooled",
    "pooled_kind",
    "stratify",
    "stratified_sweep",
    "settings_csv",
]

UNITS = tuple(OCCURRENCE_PART)  # results.json's count units


class StratifyError(CflError):
    """Bad input to :func:`stratify` (bins, sizes, the event, or a sweep that is not correlational)."""


@dataclass
class DataSetting:
    """One distinct data setting of a grid and what stratification found for it.

    Attributes:
        params: the setting's ``data.*`` parameters, ``{"data.topology_seed": 5, ...}``.
        args: the ``fit`` command line (after ``fit``) of its first grid point.
        points: how many grid points share it (models x seeds).
        realized: the event's realized count in its training corpus (or strings containing it).
        bin: index of its bin, or None outside every bin.
        chosen: whether it was chosen.
        pooled: for a pooled event (``symbol:*``), the realized count of every symbol (state),
            ``{"symbol:a": 177, ...}``; None otherwise.
    """

    params: dict[str, Any]
    args: list[str]
    points: int = 0
    realized: int | None = None
    bin: int | None = None
    chosen: bool = False
    pooled: dict[str, int] | None = None

    def describe(self, varying: Sequence[str]) -> str:
        shown = [k for k in self.params if k in varying] or list(self.params)
        return ", ".join(f"{k}={self.params[k]}" for k in shown) or "the sweep's only data setting"


@dataclass
class Stratification:
    """Result of :func:`stratify`: the settings (grid order), bins and what was chosen."""

    settings: list[DataSetting]
    varying: list[str]
    edges: list[float]
    per_bin: int
    seed: int
    event: str
    units: str
    counts: list[tuple[int, int]] = field(default_factory=list)  # (candidates, chosen) per bin
    min_settings: int = 0
    # pooled events only, per bin: (candidate pairs, candidate settings, chosen pairs, chosen settings)
    pair_counts: list[tuple[int, int, int, int]] = field(default_factory=list)

    @property
    def pooled(self) -> bool:
        return pooled_kind(self.event) is not None

    @property
    def chosen(self) -> list[DataSetting]:
        return [s for s in self.settings if s.chosen]


def pooled_kind(event: str) -> str | None:
    """``"symbol"`` for ``symbol:*``, ``"state"`` for ``state:*``, None for a single event."""
    kind, _, rest = str(event).partition(":")
    return kind if rest == "*" and kind in ("symbol", "state") else None


def check_design(edges: Sequence[float], per_bin: int, units: str) -> list[float]:
    edges = [float(e) for e in edges]
    if len(edges) < 2:
        raise StratifyError(f"--edges needs at least two values (one bin), got {len(edges)}")
    if not all(np.isfinite(edges)) or any(e < 0 for e in edges):
        raise StratifyError(f"--edges must be finite and non-negative, got {edges}")
    for lo, hi in zip(edges, edges[1:]):
        if not hi > lo:
            raise StratifyError(f"--edges must increase strictly; {hi:g} follows {lo:g}")
    if isinstance(per_bin, bool) or int(per_bin) != per_bin or per_bin < 1:
        raise StratifyError(f"--per-bin must be an integer >= 1, got {per_bin!r}")
    if units not in UNITS:
        raise StratifyError(f"--units must be one of {', '.join(UNITS)}, got {units!r}")
    return edges


def fit_arguments(
    config: Mapping[str, Any], params: Mapping[str, Any], cwd: str | os.PathLike
) -> list[str]:
    """The point's command line after ``fit``, as the runner builds it (paths made absolute).

    Raises:
        SweepError: the sweep's command does not run ``python -m cfl_lightning fit``.
    """
    command = build_command(config, params, absolute_from=cwd)
    if "fit" not in command or "cfl_lightning" not in command[: command.index("fit")]:
        raise SweepError(
            "the sweep's command does not run `python -m cfl_lightning fit`; stratify builds the "
            "data module of such commands"
        )
    return command[command.index("fit") + 1 :]


def data_settings(
    config: Mapping[str, Any], cwd: str | os.PathLike, max_points: int | None = None
) -> tuple[list[DataSetting], list[str]]:
    """The grid's distinct data settings (in grid order) and the ``data.*`` names that vary.

    Two points share a setting when their ``data.*`` parameters are equal (the model, its
    arguments and ``seed_everything`` do not change the training corpus).
    """
    settings: dict[str, DataSetting] = {}
    for params in iter_grid(config, max_points):
        data = {k: v for k, v in params.items() if k == "data" or k.startswith("data.")}
        key = json.dumps(data, sort_keys=True, default=str)
        if key not in settings:
            settings[key] = DataSetting(data, fit_arguments(config, params, cwd))
        settings[key].points += 1
    found = list(settings.values())
    names = list(found[0].params) if found else []
    varying = [n for n in names if len({json.dumps(s.params[n], default=str) for s in found}) > 1]
    return found, varying


def _data_flags(args: Sequence[str]) -> list[str]:
    """The ``fit`` arguments that set the data section: ``--config`` files' ``data`` sections
    and ``--data...`` flags, in order (later ones win, as in the training CLI)."""
    import yaml

    out: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        name, has_value, value = token.partition("=")
        if name in ("--config", "-c") or name == "--data" or name.startswith("--data."):
            if not has_value:
                i += 1
                if i >= len(args):
                    raise StratifyError(f"{name} has no value in the sweep's command")
                value = args[i]
            if name in ("--config", "-c"):
                try:
                    section = (yaml.safe_load(Path(value).read_text()) or {}).get("data")
                except (OSError, yaml.YAMLError, AttributeError) as err:
                    raise StratifyError(f"cannot read the config {value}: {err}") from None
                if section is not None:
                    text = section if isinstance(section, str) else json.dumps(section)
                    out.append(f"--data={text}")
            else:
                out.append(f"{name}={value}")
        i += 1
    return out


_PARSER: Any = None


def _data_module(args: Sequence[str]) -> Any:
    """The :class:`~cfl_lightning.data.PFADataModule` that ``fit ARGS`` builds."""
    global _PARSER
    from jsonargparse import ArgumentParser

    from cfl_lightning.data import PFADataModule

    if _PARSER is None:
        _PARSER = ArgumentParser(exit_on_error=False, allow_abbrev=False)
        _PARSER.add_class_arguments(PFADataModule, "data", fail_untyped=False)
    try:
        cfg = _PARSER.parse_args(_data_flags(args))
    except Exception as err:  # noqa: BLE001 - jsonargparse raises ArgumentError and others
        raise StratifyError(f"bad data settings: {str(err).strip().splitlines()[0]}") from None
    return _PARSER.instantiate_classes(cfg).data


def realized_value(args: Sequence[str], event: str, units: str) -> tuple[int, str]:
    """The realized count of ``event`` in the training corpus of ``fit ARGS``.

    Returns:
        ``(value, intervention kind)``: total occurrences (``units="occurrences"``) or strings
        containing the event (``"strings"``), and the corpus's intervention kind (``"none"`` for
        a correlational run).

    Raises:
        CflError: the data module cannot be built, or the automaton lacks the event.
    """
    from cfl_lightning.automata import Event

    module = _data_module(args)
    kind = module.intervention.kind
    if kind != "none":
        return -1, kind
    parsed = Event.parse(event)
    module.automaton.event_table(parsed)  # unknown name or missing transition: EventError
    table = module.occurrences("train")[OCCURRENCE_PART[units]]
    return int(table[str(parsed)]), kind


def realized_values(args: Sequence[str], kind: str, units: str) -> tuple[dict[str, int], str]:
    """The realized count of every symbol (``kind="symbol"``) or state (``"state"``) in the
    training corpus of ``fit ARGS``, as ``({"symbol:a": n, ...}, intervention kind)``."""
    module = _data_module(args)
    intervention = module.intervention.kind
    if intervention != "none":
        return {}, intervention
    table = module.occurrences("train")[OCCURRENCE_PART[units]]
    return {spec: int(n) for spec, n in table.items() if spec.startswith(f"{kind}:")}, intervention


def _worker_init() -> None:
    import torch

    torch.set_num_threads(1)


def _measure(item: tuple[int, list[str], str, str]) -> tuple[int, Any, str | None]:
    index, args, event, units = item
    pooled = pooled_kind(event)
    try:
        if pooled is not None:
            value, kind = realized_values(args, pooled, units)
        else:
            value, kind = realized_value(args, event, units)
    except CflError as err:
        return index, None, str(err).strip().splitlines()[0]
    if kind != "none":
        return index, None, f"not correlational: its data.intervention is {kind!r}"
    return index, value, None


def choose(candidates: int, per_bin: int, seed: int, bin_index: int) -> list[int]:
    """Positions (sorted) of the chosen among ``candidates``: a draw seeded by ``(seed, bin)``."""
    if candidates <= per_bin:
        return list(range(candidates))
    rng = np.random.default_rng([int(seed), int(bin_index)])
    return sorted(int(i) for i in rng.choice(candidates, size=per_bin, replace=False))


def _bin_of(edges: Sequence[float], value: float) -> int | None:
    i = bisect.bisect_right(edges, value) - 1
    return i if 0 <= i < len(edges) - 1 else None


def choose_pooled(
    realized: Sequence[Mapping[str, int]],
    edges: Sequence[float],
    per_bin: int,
    min_settings: int,
    seed: int,
) -> list[bool]:
    """Which settings to choose so that bins of (setting, event) pairs fill up.

    Args:
        realized: per setting (grid order), the realized count of each pooled event.
        edges: bin edges; a pair is in bin ``i`` when its count lies in ``[E_i, E_{i+1})``.
        per_bin: ``K``, the chosen pairs a bin needs to be full.
        min_settings: ``M``, the distinct chosen settings a bin needs to be full.
        seed: seed of the order in which each bin's candidates are tried.

    Returns:
        ``chosen[j]`` for every setting. The rule: bins in order of their candidate pairs
        (fewest first, ties by index); in each, its candidates (settings with a pair in it) in
        the order of ``default_rng([seed, bin]).permutation``, each not yet chosen is chosen
        while the bin has fewer than ``K`` chosen pairs or fewer than ``M`` chosen settings.
        Every bin ends full or with all its candidates chosen.
    """
    bins = len(edges) - 1
    # per setting: {bin: pairs of that setting in that bin}
    per_setting = []
    for values in realized:
        inside: dict[int, int] = {}
        for value in values.values():
            i = _bin_of(edges, value)
            if i is not None:
                inside[i] = inside.get(i, 0) + 1
        per_setting.append(inside)
    candidates = [[j for j, inside in enumerate(per_setting) if i in inside] for i in range(bins)]
    available = [sum(per_setting[j][i] for j in candidates[i]) for i in range(bins)]
    chosen = [False] * len(per_setting)
    pairs = [0] * bins
    settings = [0] * bins
    for i in sorted(range(bins), key=lambda b: (available[b], b)):
        if not candidates[i]:
            continue
        order = np.random.default_rng([int(seed), int(i)]).permutation(len(candidates[i]))
        for position in order:
            if pairs[i] >= per_bin and settings[i] >= min_settings:
                break
            j = candidates[i][int(position)]
            if chosen[j]:
                continue
            chosen[j] = True
            for b, n in per_setting[j].items():
                pairs[b] += n
                settings[b] += 1
    return chosen


def _check_min_settings(min_settings: int) -> int:
    if isinstance(min_settings, bool) or int(min_settings) != min_settings or min_settings < 0:
        raise StratifyError(f"--min-settings must be an integer >= 0, got {min_settings!r}")
    return int(min_settings)


def stratify(
    config: Mapping[str, Any],
    *,
    event: str,
    edges: Sequence[float],
    per_bin: int,
    seed: int = 0,
    units: str = "occurrences",
    parallel: int = 1,
    cwd: str | os.PathLike = ".",
    max_points: int | None = None,
    progress: bool = False,
    min_settings: int | None = None,
) -> Stratification:
    """Measure every data setting of a correlational sweep and choose up to ``per_bin`` per bin.

    Args:
        config: a validated grid sweep (:func:`~cfl_lightning.sweep.load_sweep`) whose
            command runs ``python -m cfl_lightning fit``.
        event: ``state:NAME``, ``symbol:SYM`` or ``transition:SOURCE:SYM``; or a pooled
            ``symbol:*`` / ``state:*``, whose bins hold (setting, symbol) pairs
            (:func:`choose_pooled`).
        edges: increasing bin edges ``E_0 < ... < E_k``; bin ``i`` is ``[E_i, E_{i+1})``.
        per_bin: ``K``, the most settings chosen per bin (pooled: the pairs that fill a bin).
        min_settings: pooled events only: ``M``, the distinct settings that fill a bin
            (default 0).
        seed: seed of the choice.
        units: ``occurrences`` (total traversals) or ``strings`` (strings containing the event).
        parallel: processes measuring settings at once.
        cwd: directory relative paths of the command (``--config``) are resolved from.
        progress: draw a progress bar on stderr (only when it is a terminal).

    Raises:
        StratifyError: bad bins or sizes, a setting that is not correlational, an event its
            automaton lacks, or a data setting that cannot be built (named).
    """
    from cfl_lightning.automata import Event

    edges = check_design(edges, per_bin, units)
    pooled = pooled_kind(event)
    if pooled is None:
        if min_settings is not None:
            raise StratifyError("--min-settings applies to a pooled event (symbol:* or state:*)")
        event = str(Event.parse(event))
    else:
        min_settings = _check_min_settings(0 if min_settings is None else min_settings)
    settings, varying = data_settings(config, cwd, max_points)
    from cfl_lightning.progress import Progress

    jobs = [(i, s.args, event, units) for i, s in enumerate(settings)]
    bar = Progress(len(jobs), "stratify: building corpora", enabled=None if progress else False)
    try:
        for index, value, error in _run(jobs, parallel):
            if error is not None:
                raise StratifyError(f"data setting {settings[index].describe(varying)}: {error}")
            if pooled is None:
                settings[index].realized = value
            else:
                settings[index].pooled = value
            bar.update(1)
    finally:
        bar.close()
    result = Stratification(settings, varying, edges, int(per_bin), int(seed), event, units)
    if pooled is not None:
        return _pooled_result(result, int(min_settings))
    members: list[list[DataSetting]] = [[] for _ in edges[:-1]]
    for setting in settings:
        assert setting.realized is not None
        i = bisect.bisect_right(edges, setting.realized) - 1
        if 0 <= i < len(members):
            setting.bin = i
            members[i].append(setting)
    for i, inside in enumerate(members):
        picked = choose(len(inside), per_bin, seed, i)
        for j in picked:
            inside[j].chosen = True
        result.counts.append((len(inside), len(picked)))
    return result


def _pooled_result(result: Stratification, min_settings: int) -> Stratification:
    """Fill ``result`` (settings measured for a pooled event) by :func:`choose_pooled`."""
    result.min_settings = min_settings
    realized = [s.pooled or {} for s in result.settings]
    picked = choose_pooled(realized, result.edges, result.per_bin, min_settings, result.seed)
    for setting, chosen in zip(result.settings, picked):
        setting.chosen = chosen
    for i in range(len(result.edges) - 1):
        cand_pairs = cand_settings = pairs = settings = 0
        for setting, values in zip(result.settings, realized):
            inside = sum(1 for v in values.values() if _bin_of(result.edges, v) == i)
            if inside:
                cand_pairs += inside
                cand_settings += 1
                if setting.chosen:
                    pairs += inside
                    settings += 1
        result.pair_counts.append((cand_pairs, cand_settings, pairs, settings))
        result.counts.append((cand_pairs, pairs))
    return result


def _run(
    jobs: list[tuple[int, list[str], str, str]], parallel: int
) -> Iterable[tuple[int, Any, str | None]]:
    if parallel <= 1 or len(jobs) <= 1:
        yield from map(_measure, jobs)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(parallel, mp_context=context, initializer=_worker_init) as pool:
        yield from pool.map(_measure, jobs, chunksize=max(1, len(jobs) // (8 * parallel)))


def stratified_sweep(config: Mapping[str, Any], result: Stratification) -> dict[str, Any]:
    """The grid sweep of exactly the chosen settings, with every other parameter as it was.

    Raises:
        StratifyError: no setting was chosen.
    """
    chosen = result.chosen
    if not chosen:
        raise StratifyError(
            f"no data setting has a realized {result.event} in the bins "
            f"[{result.edges[0]:g}, {result.edges[-1]:g}) ({len(result.settings)} settings)"
        )
    out = dict(config)
    params = {k: v for k, v in config["parameters"].items() if k not in result.varying}
    if len(result.varying) == 1:
        name = result.varying[0]
        params[name] = {"values": [s.params[name] for s in chosen]}
        params = {k: params[k] for k in config["parameters"]}  # the original order
    elif result.varying:
        params["data"] = {
            "values": [{k[len("data.") :]: s.params[k] for k in result.varying} for s in chosen]
        }
    out["parameters"] = params
    if "name" in out:
        out["name"] = f"{out['name']}_stratified"
    bins = ", ".join(
        f"[{lo:g}, {hi:g})" for lo, hi in zip(result.edges, result.edges[1:])
    )
    per_bin = (
        f"until each holds {result.per_bin} pairs from {result.min_settings} settings"
        if result.pooled else f"up to {result.per_bin} per bin"
    )
    out["description"] = (
        f"{config.get('description', config.get('name', 'sweep'))}; stratified on "
        f"{result.event} ({result.units}) in bins {bins}, {per_bin} "
        f"(seed {result.seed}): {len(chosen)} of {len(result.settings)} data settings"
    )
    return out


def settings_csv(result: Stratification) -> str:
    """One row per data setting: varying ``data.*`` values, ``realized_count``, ``unit``, ``bin``
    (lower edge, empty outside every bin) and ``chosen``. Pooled events: one row per (setting,
    symbol) pair, with an ``event`` column before ``realized_count``."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    names = result.varying or list(result.settings[0].params if result.settings else [])
    if result.pooled:
        writer.writerow([*names, "event", "realized_count", "unit", "bin", "chosen"])
        for s in result.settings:
            for event, value in (s.pooled or {}).items():
                i = _bin_of(result.edges, value)
                edge = "" if i is None else f"{result.edges[i]:g}"
                writer.writerow([*(s.params[n] for n in names), event, value, result.units,
                                 edge, str(s.chosen).lower()])
        return buffer.getvalue()
    writer.writerow([*names, "realized_count", "unit", "bin", "chosen"])
    for s in result.settings:
        edge = "" if s.bin is None else f"{result.edges[s.bin]:g}"
        writer.writerow(
            [*(s.params[n] for n in names), s.realized, result.units, edge, str(s.chosen).lower()]
        )
    return buffer.getvalue()
