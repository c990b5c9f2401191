#!/usr/bin/env bash
# Headline study version 4 (docs/headline_v4.md): every arm, in the order fixed before any run
# trained (a rule that reads no result):
#   A1  plain causal, N = 62 and 1,000 (both models, both trainings)      256 runs
#   B1  token-matched causal (T = 10,000), N = 62 and 1,000                256 runs
#   A2, B2  N = 250 in both causal arms                                    256 runs
#   C   correlational, stratified on symbol:* (55 topologies)             220 runs
# Each tier is a sweep file of its own with an output folder of its own. Resumable: run it again
# after an interruption (each sweep skips its finished points). Settings: PYTHON (default python), J (--parallel, default 2), E (--ensemble,
# default 8), RUNS (default runs/headline_v4).
#
#   WANDB_MODE=disabled bash sweeps/headline/v4/run_order.sh
set -uo pipefail
PYTHON=${PYTHON:-python}
J=${J:-2}
E=${E:-8}
RUNS=${RUNS:-runs/headline_v4}
V4=sweeps/headline/v4
. "$(dirname "${BASH_SOURCE[0]}")/../../run_tier.sh"  # run SWEEP OUTPUT

run "$V4/causal_plain_ends.yaml" "$RUNS/causal_plain_ends"     # A1
run "$V4/causal_tokens_ends.yaml" "$RUNS/causal_tokens_ends"   # B1
run "$V4/causal_plain_250.yaml" "$RUNS/causal_plain_250"       # A2
run "$V4/causal_tokens_250.yaml" "$RUNS/causal_tokens_250"     # B2
run "$V4/correlational.yaml" "$RUNS/correlational"             # C
exit "$status"
