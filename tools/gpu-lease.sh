#!/bin/bash
# The GPU acceptance runs of one lease on a host of two GPUs (nvidia-h100-x2), each timed job on a
# GPU no other timed job uses:
#   smoke:      card 1 runs the GPU tests while card 0 runs the default experiment cold (c0).
#   acceptance: card 0 runs the default experiment cold (c1) while card 1 runs the GPU tests; then
#               card 1 runs it warm (w1) while card 0 runs the GPU tests; then both cards run it
#               (m2, profiles/multi-gpu with gpu=2), warm: issue 33's two-GPU run beside w1.
# Every run is archived under OUT/archive (config `archive.root`) and timed from Snakemake's start.
# Then (acceptance) card 1 runs the preview preset, warm.
#   cold:       card 0 runs the default experiment cold (c2) while card 1 runs the GPU tests.
#   verdicts:   issue 36's three runs in one lease: card 0 runs the default experiment cold (c6), then
#               warm (w6), then the preview warm and, where cuda-bench is installed, the peer
#               (nvbench, tools/nvbench_peer.py) on the same card, while card 1 runs the GPU tests;
#               then both cards (m6).
#   speed:      the verdicts plan's steps, for issue 37's acceptance: c8 cold, w8 warm, the preview,
#               the peer and w8n (w8 without compiling ahead) on card 0 beside the GPU tests on
#               card 1; then m8 on both cards.
#   tests:      the GPU tests' shared step on card 1 beside their workflow step on card 0.
# Usage, from the checkout's root: tools/gpu-lease.sh OUT smoke|acceptance|cold|verdicts|speed|tests
# A copy of the checkout may carry another commit's .git: set FABENCH_PROJECT_COMMIT to the commit.
# Run it detached (setsid nohup ...): a device call lasts 10 minutes at most.
set -uo pipefail
out=$(realpath -m "$1")
plan=$2
mkdir -p "$out"
export PYTHONUNBUFFERED=1
note() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$out/summary.txt"; }
timed() {  # name, command...: its output to OUT/name.log, its exit status and wall time to the summary
    local name=$1 start rc
    shift
    start=$(date +%s.%N)
    "$@" > "$out/$name.log" 2>&1
    rc=$?
    note "$name: exit $rc, $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s"
}
on_card() {  # card(s), command...: the command alone on those GPUs, with leases and workers of its own
    local cards=$1 tag=${1//,/-}
    shift
    CUDA_VISIBLE_DEVICES=$cards FABENCH_LEASE_DIR=/tmp/fabench-lease-$tag FABENCH_WORKER_DIR=/tmp/fabench-workers-$tag "$@"
}
# The tests that need a GPU or measure on one when it is there. The timing-sensitive backend tests
# run alone on the card; the rest (real measuring processes, workers, leases) in 8 pytest processes,
# the two within 5 minutes; the tests marked gpu_workflow (whole Snakemake runs) as a third step.
# Each step's exit, wall time and pytest's counts go to the summary.
GPU_ALONE="tests/test_gpu_backends.py"
# test_lease.py is left out on a GPU host: it declares GPUs 0 and 1 (FABENCH_GPUS) and sets
# CUDA_VISIBLE_DEVICES to them, so beside a run on the other card its jobs ran on that card (kernels
# 2-3x slower in that run's trials, seen in a lease). It needs no GPU; CI runs it.
GPU_SHARED="tests/test_gpu_identity.py tests/test_kernel_time.py tests/test_trials.py tests/test_worker.py
            tests/test_runner.py tests/test_timeline.py"
pytest_counts() {  # log: pytest's last summary line (counts and time), for the summary
    grep -E '^=+ .*(passed|failed|error|skipped|deselected).* in [0-9.]+s' "$1" | tail -1 | tr -d '='
}
tests_step() {  # name, card, limit s, pytest arguments...: one step's log, exit, wall time and counts
    local name=$1 card=$2 limit=$3 start rc
    shift 3
    start=$(date +%s.%N)
    # SIGINT at the limit: pytest stops as on Ctrl-C and still prints its failures, counts and
    # durations (a plain kill at the limit left a log without them); killed 30 s later if not.
    # STEP_CACHE (optional): one compile cache for the step's tests. Each test measures in a folder
    # of its own, so each compiled FlexAttention, aiter's Triton kernel and FlashAttention-4 cold
    # (seconds each on a GPU), in every test; shared, each kernel compiles once per step.
    # The cache variables are the measuring processes' own (fabench.measure.invocation.CACHE_ENV).
    local cache=()
    [ -n "${STEP_CACHE:-}" ] && read -ra cache < <(python3 -c 'import sys
from fabench.measure.invocation import CACHE_ENV
print(" ".join(f"{key}={sys.argv[1]}/{sub}" for key, sub in CACHE_ENV.items()))' "$STEP_CACHE")
    on_card "$card" env "${cache[@]}" timeout -s INT -k 30 "$limit" \
        python3 -m pytest -v -p no:cacheprovider -rs --durations=25 "$@" \
        > "$out/$name.log" 2>&1
    rc=$?
    note "$name: exit $rc, $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s; $(pytest_counts "$out/$name.log")"
    return $rc
}
step_cache() { echo "/tmp/fabench-test-cache-card$1"; }  # card: the compile cache its test steps share
shared_step() {  # card: the GPU tests that share the card, in 8 pytest processes
    # Test by test (--dist load): by file, test_worker.py's workers, each ~10 s of start-up on an
    # H200, ran one after another in one process, past the step's limit.
    STEP_CACHE=$(step_cache "$1") tests_step "tests-card$1-shared" "$1" 180 \
        -m 'not slow and not docker and not slurm and not gpu_workflow' -n 8 --dist load $GPU_SHARED
}
workflow_step() {  # card: whole Snakemake runs on the test experiment (pytest -m gpu_workflow), timed apart
    STEP_CACHE=$(step_cache "$1") tests_step "tests-card$1-workflow" "$1" 420 \
        -m 'gpu_workflow and not docker and not slurm' $GPU_SHARED
}
gpu_tests() {  # card: the GPU tests in two steps within 5 minutes, then the workflow-level ones apart
    local rc
    tests_step "tests-card$1-alone" "$1" 120 -m 'not docker and not slurm' $GPU_ALONE
    rc=$?
    shared_step "$1"
    rc=$((rc | $?))
    workflow_step "$1"
    return $((rc | $?))
}
experiment() {  # run name, snakemake options...: the default experiment, reported and archived
    local run=$1
    shift
    python3 -m snakemake report archive --config "run=$run" "archive={root: $out/archive}" "$@"
}

nvidia-smi --query-gpu=index,name,uuid,driver_version,power.limit --format=csv,noheader > "$out/gpus.txt"
note "start ($plan) on $(tr '\n' ';' < "$out/gpus.txt")"
case $plan in
cold)  # one cold default run on card 0, the GPU tests on card 1 beside it
    gpu_tests 1 &
    tests=$!
    timed c2 on_card 0 experiment c2 --cores 1
    wait "$tests"
    ;;
smoke)
    gpu_tests 1 &
    tests=$!
    timed c0 on_card 0 experiment c0 --cores 1
    wait "$tests"
    ;;
acceptance)
    gpu_tests 1 &
    tests=$!
    timed c1 on_card 0 experiment c1 --cores 1
    wait "$tests"
    gpu_tests 0 &
    tests=$!
    timed w1 on_card 1 experiment w1 --cores 1
    wait "$tests"
    timed m2 on_card 0,1 experiment m2 --profile profiles/multi-gpu --resources gpu=2
    timed preview on_card 1 python3 -m snakemake --cores 1 report --configfile config/preview.yaml --config run=pv
    ;;
verdicts|speed)
    n=$([ "$plan" = verdicts ] && echo 6 || echo 8)
    gpu_tests 1 &
    tests=$!
    timed "c$n" on_card 0 experiment "c$n" --cores 1
    timed "w$n" on_card 0 experiment "w$n" --cores 1
    timed preview on_card 0 python3 -m snakemake --cores 1 report --configfile config/preview.yaml --config run=pv
    # The peer, nvbench (tools/nvbench_peer.py), where its bindings (cuda-bench) are installed.
    if python3 -c "import cuda.bench" 2>/dev/null; then
        timed peer on_card 0 python3 tools/nvbench_peer.py "$out/nvbench.json"
    else
        note "peer: not run (cuda-bench is not installed)"
    fi
    if [ "$plan" = speed ]; then
        # What compiling ahead costs a warm run: the same run with every job compiling its own
        # (measure.compile_ahead: never), archived with the rest. (2 trials a process instead of 3
        # was measured at 108259a: examples/h200-x2-speed-2026-11-27, w7t2.)
        printf 'measure:\n  compile_ahead: never\n' > "$out/never.yaml"
        timed "w${n}n" on_card 0 experiment "w${n}n" --cores 1 --configfile "$out/never.yaml"
    fi
    wait "$tests"
    timed "m$n" on_card 0,1 experiment "m$n" --profile profiles/multi-gpu --resources gpu=2
    ;;
tests)  # the GPU tests' shared step on card 1 beside their workflow step on card 0 (no runs)
    shared_step 1 &
    tests=$!
    workflow_step 0
    wait "$tests"
    ;;
*)
    note "no such plan: $plan (smoke, acceptance, cold, verdicts, speed or tests)"
    exit 2
    ;;
esac
cp -r results "$out/results" 2>/dev/null
cp -r logs "$out/logs" 2>/dev/null
note "done"
