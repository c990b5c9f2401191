#!/usr/bin/env bash
# One prepared GPU check (run through the device tool from the repo root; logs go to $OUT).
#   bash benchmarks/gpu_check.sh sampling   # CUDA law tests, sampler benchmark, Lightning layer on CUDA
#   bash benchmarks/gpu_check.sh ensemble   # ensemble benchmark (<= 5 minutes): whole runs of both
#                                           # architectures and the grid estimate first, then one step
# The GPU machine has torch, lightning, torchmetrics, scipy, hypothesis but no jsonargparse/wandb:
# everything here goes through the Python API.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 WANDB_MODE=disabled
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
nvidia-smi -L
python -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
case "${1:-sampling}" in
  sampling)
    timeout 240 python -m pytest -q -p no:cacheprovider tests/test_sampling.py tests/test_backward.py \
      tests/test_count_law.py tests/test_datamodule.py -k cuda 2>&1 | tee "$OUT/cuda_tests.log" | tail -15
    timeout 200 python benchmarks/gpu_sampling.py --device cuda 2>&1 | tee "$OUT/gpu_sampling.log"
    timeout 120 python benchmarks/gpu_fit_smoke.py --device cuda 2>&1 | grep -v "Tip\|available\|LOCAL_RANK" \
      | tee "$OUT/gpu_fit_smoke.log"
    ;;
  ensemble)
    # whole runs start until 150 s, step rows until 210 s, the benchmark ends by 250 s; then
    # the CUDA tests (a CUDA-graph step equals the eager fixed-shape step): under 5 minutes
    timeout 250 python benchmarks/bench_ensemble.py --device cuda --max-epochs 10 --members 32,128 \
      --method-members 1,32,128 --steps 10 --time-limit 150 --step-time-limit 210 2>&1 \
      | tee "$OUT/gpu_ensemble.log"
    timeout 40 python -m pytest -q -p no:cacheprovider tests/test_ensemble.py -k "cuda" 2>&1 \
      | tee "$OUT/cuda_ensemble_tests.log" | tail -5
    ;;
esac
