"""The docs' lists of the registered kinds, written from the registries.

:func:`markdown_tables` is the "Kinds" section of docs/reference.md (a doc test checks that the
page holds exactly these tables; ``python -m cfl_lightning.kinds.docs docs/reference.md``
rewrites them there, :func:`filled`), :func:`choices_text` the lists in the data module's ``--help``
and :func:`choice_list` the one-line lists the guides and the CLI reference give.
"""

from __future__ import annotations

from cfl_lightning.kinds.events import EVENT_KIND_REGISTRY, event_forms
from cfl_lightning.kinds.generators import GENERATOR_REGISTRY
from cfl_lightning.kinds.interventions import INTERVENTION_KINDS

__all__ = ["markdown_tables", "choices_text", "choice_list", "filled", "TABLE_MARKERS"]

#: the comments around each generated table in docs/reference.md
TABLE_MARKERS = {
    name: (f"<!-- kinds:{name} -->", "<!-- /kinds -->")
    for name in ("generators", "events", "interventions")
}


def choice_list(registry: str, sep: str = " | ") -> str:
    """The names of one registry quoted and joined: ``"none" | "exact" | ...``.

    Args:
        registry: ``"generators"``, ``"interventions"`` or ``"events"`` (their text forms).
        sep: the separator.
    """
    if registry == "events":
        return sep.join(f'"{k.form}"' for k in EVENT_KIND_REGISTRY)
    entries = GENERATOR_REGISTRY if registry == "generators" else INTERVENTION_KINDS
    return sep.join(f'"{e.name}"' for e in entries)


def choices_text() -> dict[str, str]:
    """``{"generators": ..., "interventions": ..., "events": ...}``: one line each for help."""
    generators = "; ".join(
        f'"{g.name}": {g.description}' + (f", reads {', '.join(g.settings)}" if g.settings else "")
        for g in GENERATOR_REGISTRY
    )
    interventions = "; ".join(f'"{k.name}": {k.description}' for k in INTERVENTION_KINDS)
    return {"generators": generators, "interventions": interventions, "events": event_forms()}


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def markdown_tables() -> dict[str, str]:
    """``{"generators": table, "events": table, "interventions": table}`` in Markdown."""
    generators = _table(
        ("generator", "what it builds", "parameters (`automaton` flag / `data.` field)"),
        [
            (
                f"`{g.name}`",
                g.description,
                ", ".join(
                    f"`{p.flag}`" + (f" / `{p.setting}`" if p.setting else "")
                    + f" ({'unset' if p.default is None else p.default})"
                    for p in g.params
                ),
            )
            for g in GENERATOR_REGISTRY
        ],
    )
    events = _table(
        ("event", "counts", "decomposed-KL contribution"),
        [(f"`{k.form}`", k.description, k.quantity) for k in EVENT_KIND_REGISTRY],
    )
    interventions = _table(
        ("intervention", "the training corpus", "`count`", "analysis setting"),
        [
            (
                f"`{k.name}`",
                k.description,
                k.count_help or "none (refused)",
                f"`{k.setting}`",
            )
            for k in INTERVENTION_KINDS
        ],
    )
    return {"generators": generators, "events": events, "interventions": interventions}


def filled(text: str) -> str:
    """``text`` with each ``<!-- kinds:NAME -->`` ... ``<!-- /kinds -->`` block replaced by the
    registry's table.

    Raises:
        ValueError: a block's markers are missing.
    """
    tables = markdown_tables()
    for name, (start, end) in TABLE_MARKERS.items():
        head, found, rest = text.partition(start)
        _, closed, tail = rest.partition(end)
        if not found or not closed:
            raise ValueError(f"no {start} ... {end} block")
        text = f"{head}{start}\n{tables[name]}\n{end}{tail}"
    return text


if __name__ == "__main__":  # pragma: no cover - a maintainer's rewrite of the page
    import os
    import sys

    for page in sys.argv[1:]:
        with open(page, encoding="utf-8") as handle:
            text = filled(handle.read())
        with open(f"{page}.tmp", "w", encoding="utf-8") as handle:  # then renamed: atomic
            handle.write(text)
        os.replace(f"{page}.tmp", page)
