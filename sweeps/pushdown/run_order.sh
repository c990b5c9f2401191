#!/usr/bin/env bash
# Pushdown case study (docs/reproduction_pushdown.md): every arm, in the priority order fixed
# before any run trained (a rule that reads no result): P1 Dyck-2 causal (30 runs), P2 Dyck-2
# correlational, P3 random pushdown causal (30), P4 random pushdown correlational.
# Resumable: run it again after an interruption. Settings: PYTHON, J (--parallel, default 2),
# E (--ensemble, default 8), RUNS (default runs/pushdown).
#
#   WANDB_MODE=disabled bash sweeps/pushdown/run_order.sh
set -uo pipefail
PYTHON=${PYTHON:-python}
J=${J:-2}
E=${E:-8}
RUNS=${RUNS:-runs/pushdown}
S=sweeps/pushdown
. "$(dirname "${BASH_SOURCE[0]}")/../run_tier.sh"  # run SWEEP OUTPUT

run "$S/dyck_causal.yaml" "$RUNS/dyck_causal"                  # P1
run "$S/dyck_correlational.yaml" "$RUNS/dyck_correlational"    # P2
run "$S/random_causal.yaml" "$RUNS/random_causal"              # P3
run "$S/random_correlational.yaml" "$RUNS/random_correlational" # P4
exit "$status"
