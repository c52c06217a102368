#!/bin/bash
# The GPU tests' shared step again on card 1, cold step cache, limit $1 s (beside extra.sh on card 0).
cd /tmp/repo
export PYTHONUNBUFFERED=1
cache=/tmp/fabench-test-cache-card1-b
rm -rf "$cache"
s=$(date +%s.%N)
CUDA_VISIBLE_DEVICES=1 FABENCH_LEASE_DIR=/tmp/fabench-lease-1b FABENCH_WORKER_DIR=/tmp/fabench-workers-1b \
TORCHINDUCTOR_CACHE_DIR=$cache/inductor TRITON_CACHE_DIR=$cache/triton FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=$cache/flash-attn-cute \
timeout -s INT -k 30 "$1" python3 -m pytest -v -p no:cacheprovider -rs --durations=40 \
  -m 'not slow and not docker and not slurm and not gpu_workflow' -n 8 --dist load \
  tests/test_gpu_identity.py tests/test_kernel_time.py tests/test_trials.py tests/test_worker.py tests/test_runner.py tests/test_timeline.py \
  > /tmp/lease/tests2-card1-shared.log 2>&1
rc=$?
echo "$(date -u +%H:%M:%S) tests2-card1-shared (limit $1 s, cold cache): exit $rc, $(python3 -c "print(round($(date +%s.%N) - $s, 1))") s; $(grep -E '^=+ .*(passed|failed).* in ' /tmp/lease/tests2-card1-shared.log | tail -1 | tr -d '=')" >> /tmp/lease/summary.txt
