#!/usr/bin/env bash
# Headline study version 2 (docs/headline_study.md, "Version 2"): every prepared arm, in the
# priority order fixed before any run trained (a rule that reads no result):
#   P1  correlational, pooled symbol:* stratification (75 topologies x 2 models)      150 runs
#   P2  causal, symbol a: the 16 new topologies x 5 counts, then version 1's 16 at 62  192 runs
#   P3  causal, state q1: 32 topologies x 5 counts                                     320 runs
#   P4  causal, symbol a: version 1's 128 runs again (a check; v1's results stand in)  128 runs
# Resumable: run it again after an interruption; each sweep skips its finished points (a point
# is done when its results.json parses with a finite kl_total). Settings: PYTHON (default
# python), J (--parallel, default 2), E (--ensemble, default 8), RUNS (default runs/headline_v2).
#
#   WANDB_MODE=disabled bash sweeps/headline/v2/run_order.sh
set -uo pipefail
PYTHON=${PYTHON:-python}
J=${J:-2}
E=${E:-8}
RUNS=${RUNS:-runs/headline_v2}
V2=sweeps/headline/v2
. "$(dirname "${BASH_SOURCE[0]}")/../../run_tier.sh"  # run SWEEP OUTPUT

run "$V2/correlational.yaml" "$RUNS/correlational"                  # P1
run "$V2/p2_causal_symbol_new.yaml" "$RUNS/causal_symbol"           # P2a
run "$V2/p2_causal_symbol_v1_n62.yaml" "$RUNS/causal_symbol"        # P2b
run "$V2/p3_causal_state.yaml" "$RUNS/causal_state"                 # P3
run "$V2/p4_causal_symbol_v1_repeat.yaml" "$RUNS/causal_symbol"     # P4
exit "$status"
