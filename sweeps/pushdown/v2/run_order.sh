#!/usr/bin/env bash
# Pushdown study version 2 (docs/pushdown_v2.md): every arm, in the order fixed before any run
# trained (a rule that reads no result):
#   P1  pop:( plain       (plain_pop.yaml)              20 automata x 3 counts x 2 models x 2 trainings = 240
#   P2  pop:( tokens      (tokens/pop_S.yaml, one per automaton, in the order of the selection) 240
#   P3  class:q/( plain   (plain_class.yaml)                                                   240
#   P4  class:q/( tokens  (tokens/class_S.yaml)                                                240
# Each sweep file has an output folder of its own. Resumable: run it again after an
# interruption (each sweep skips its finished points). Settings: PYTHON (default python), J
# (--parallel, default 1), E (--ensemble, default 8), RUNS (default runs/pushdown_v2).
#
#   WANDB_MODE=disabled bash sweeps/pushdown/v2/run_order.sh
set -uo pipefail
PYTHON=${PYTHON:-python}
J=${J:-1}
E=${E:-8}
RUNS=${RUNS:-runs/pushdown_v2}
V2=sweeps/pushdown/v2
# the 20 automata in the order draw.py --select chose them
SEEDS="918 633 882 978 625 334 612 785 520 611 510 575 380 757 606 771 973 763 451 966"
. "$(dirname "${BASH_SOURCE[0]}")/../../run_tier.sh"  # run SWEEP OUTPUT

run "$V2/plain_pop.yaml" "$RUNS/pop_plain"                                   # P1
for s in $SEEDS; do run "$V2/tokens/pop_$s.yaml" "$RUNS/pop_tokens/$s"; done  # P2
run "$V2/plain_class.yaml" "$RUNS/class_plain"                               # P3
for s in $SEEDS; do run "$V2/tokens/class_$s.yaml" "$RUNS/class_tokens/$s"; done  # P4
exit "$status"
