#!/usr/bin/env bash
# One prepared GPU check (run through the device tool from the repo root; logs go to $OUT).
#   bash benchmarks/gpu_check.sh sampling   # CUDA law tests, sampler benchmark, Lightning layer on CUDA
#   bash benchmarks/gpu_check.sh ensemble   # ensemble checks (<= 8 minutes): CUDA test, profile,
#                                           # capture fallback, whole runs, sampler law checks
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
    # under 8 minutes: the CUDA test (a captured step equals the eager one), a profile of one
    # M=128 LSTM ensemble, the capture fallback shown, whole runs of both architectures and the
    # grid estimate (no new row after 120 s), then the sampler's CUDA law checks (bounded and
    # initial-state events included)
    timeout 60 python -m pytest -q -p no:cacheprovider tests/test_ensemble.py -k "cuda" 2>&1 \
      | tee "$OUT/cuda_ensemble_tests.log" | tail -5
    timeout 100 python benchmarks/gpu_ensemble_profile.py --device cuda --profile --epochs 3 \
      --members 128 2>&1 | tee "$OUT/gpu_ensemble_profile.log"
    timeout 45 python benchmarks/gpu_ensemble_profile.py --device cuda --fallback 2>&1 \
      | grep -v "Tip\|available\|LOCAL_RANK" | tee "$OUT/gpu_ensemble_fallback.log"
    timeout 170 python benchmarks/bench_ensemble.py --device cuda --max-epochs 10 --members 32,128 \
      --time-limit 120 --skip-steps 2>&1 | tee "$OUT/gpu_ensemble.log"
    timeout 100 python -m pytest -q -p no:cacheprovider tests/test_sampling.py tests/test_backward.py \
      tests/test_count_law.py tests/test_bounded_counts.py -k cuda 2>&1 \
      | tee "$OUT/cuda_law_tests.log" | tail -8
    ;;
esac
