"""The headline study's version 1 contrasts under the other reading of the paper's measure.

    python docs/headline/verdict_weighted.py docs/headline/results.jsonl

Exactly ``verdict.py`` (same bins, counts, contrasts, intervals and gaps) on ``kl_target``, the
``p_pi``-weighted term ``p_pi(a) x`` (per-symbol contribution of ``a``), in nats per string,
instead of ``kl_target_unweighted``. docs/headline_study.md quotes both outputs side by side.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("verdict", Path(__file__).with_name("verdict.py"))
verdict = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(verdict)
verdict.METRIC = "kl_target"

main = verdict.main

if __name__ == "__main__":
    main(sys.argv[1:] or ["docs/headline/results.jsonl"])
