# Sourced by the studies' run_order.sh scripts: `run SWEEP OUTPUT` runs one sweep (tier) with
# the settings PYTHON, E (--ensemble) and J (--parallel) the script set, and records a failure
# in `status` (the script exits with it) without stopping the later tiers; an interruption
# (exit 130) or bad input or a locked output (exit 2) stops the whole order at once.
status=0

run() {  # run SWEEP OUTPUT
    echo "== $1 -> $2"
    "$PYTHON" -m cfl_lightning sweep "$1" --output "$2" --ensemble "$E" --parallel "$J"
    local rc=$?
    if [ "$rc" -eq 130 ] || [ "$rc" -eq 2 ]; then exit "$rc"; fi  # interrupted, or bad input/locked
    [ "$rc" -eq 0 ] || status=1
}
