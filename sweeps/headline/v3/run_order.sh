#!/usr/bin/env bash
# Headline study version 3 (docs/headline_study.md, "Version 3: plan"): every prepared arm, in the
# priority order fixed before any run trained (a rule that reads no result):
#   P1  correlational, weight seed 1, pooled symbol:* stratification (69 topologies x 2 models)  138 runs
#   P2  causal, symbol a, weight seed 1: the 32 topologies x 5 counts x 2 models                320 runs
#   P3  causal, state q1, weight seed 1: the 32 topologies x 5 counts x 2 models                320 runs
#   P4  the transformer's state D3, weight seed 0: 55 new topologies x N in {500, 1000}         110 runs
# Resumable: run it again after an interruption; each sweep skips its finished points.
# Settings: PYTHON (default python), J (--parallel, default 2), E (--ensemble, default 8),
# RUNS (default runs/headline_v3).
#
#   WANDB_MODE=disabled bash sweeps/headline/v3/run_order.sh
set -uo pipefail
PYTHON=${PYTHON:-python}
J=${J:-2}
E=${E:-8}
RUNS=${RUNS:-runs/headline_v3}
V3=sweeps/headline/v3
. "$(dirname "${BASH_SOURCE[0]}")/../../run_tier.sh"  # run SWEEP OUTPUT

run "$V3/correlational.yaml" "$RUNS/correlational"          # P1
run "$V3/causal_symbol.yaml" "$RUNS/causal_symbol"          # P2
run "$V3/causal_state.yaml" "$RUNS/causal_state"            # P3
run "$V3/d3_state_transformer.yaml" "$RUNS/d3_state"        # P4
exit "$status"
