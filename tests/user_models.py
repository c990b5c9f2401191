"""A user's own ``LanguageModel``, taken from the guide: the ``GRULanguageModel`` block of
``docs/guide/models.md`` is executed here, so that the tests (in process, and
``--model=tests.user_models.GRULanguageModel`` in ensemble jobs) run the documented code itself.
"""

from __future__ import annotations

import re
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "models.md"
_PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def guide_block(containing: str) -> str:
    """The one ```` ```python ```` block of the guide whose code contains ``containing``."""
    found = [b for b in _PYTHON_BLOCK.findall(GUIDE.read_text()) if containing in b]
    if len(found) != 1:
        raise LookupError(f"{GUIDE}: {len(found)} python blocks contain {containing!r}, not 1")
    return found[0]


exec(compile(guide_block("class GRULanguageModel(LanguageModel)"), str(GUIDE), "exec"))
GRULanguageModel = globals()["GRULanguageModel"]  # defined by the guide's block

__all__ = ["GRULanguageModel", "guide_block", "GUIDE"]
