#!/bin/bash
# The GPU lease of a host of two GPUs of one model (the device tool's nvidia-h100-x2), and the GPU
# tests on one card. Every command it runs goes through `run_cmd` below, and every command that
# measures through `on_cards`: each run with its own cards (CUDA_VISIBLE_DEVICES), lease folder
# (FABENCH_LEASE_DIR) and workers' folder (FABENCH_WORKER_DIR).
#
# From the checkout's root on the GPU host (docs/testing.md, "On a GPU host", gives the device calls):
#   tools/gpu-lease.sh start OUT [PLAN]  install the carried wheels (.whl/, or WHEELS) and this
#                                        checkout, copy it to STAGE, and run PLAN there detached
#                                        (setsid nohup), its log OUT/lease.log; PLAN: accept (default),
#                                        verdicts or tests
#   tools/gpu-lease.sh status OUT        the summary so far, and whether the plan still runs
#   tools/gpu-lease.sh collect OUT DEST  OUT packed as DEST/lease.tgz (whether or not the plan ended)
#   tools/gpu-lease.sh tests OUT [CARD]  the GPU tests on CARD (default 0), in the foreground
#   tools/gpu-lease.sh plan OUT PLAN     PLAN in the foreground, here (what start runs detached)
#   tools/gpu-lease.sh compare OUT RUN...  the comparisons again: every pair of these archived runs
#                                        (OUT/entry-RUN.txt names each one's entry), the detector check
# Plans:
#   accept: the GPU tests on card 1 beside a cold default run on card 0 (c1); then warm on card 0
#           alone (w1); warm on card 0 (w2) beside one on card 1 (k1); both cards (m1, the multi-gpu
#           profile) twice (m1, m2: m2 adopts m1's spares); a second round, warm on card 0 (w3)
#           beside warm on card 1 (k2); the preview on card 0 (pv). The runs on the same cards share
#           a workers' folder, so that each adopts the spares of the run before (docs/worker.md). Each run timed to its report (Snakemake's `report` target; its report's
#           own time line is quoted too), then archived with `fabench archive store` (not the
#           preview, which the archive refuses); then `fabench compare` of every pair of default runs and `fabench detector-check` on
#           their archive.
#   verdicts: the accept plan's warm runs only (w1; w2 beside k1; w3 beside k2; m1), compared:
#           fresh runs for the comparison rule's acceptance, in half the device time.
#   local-memory: the GPU tests beside c1 (cold) as in accept, w1 alone, then three rounds on both
#           cards of the default (local memory placed anew per trial: w2, k1, w3) against
#           timing.local_memory per_process (p1, p2, p3, archive-per-process), each setting on each
#           card in turn; both archives' detector checks; then m1 and the preview.
#   one-card: a host of one GPU: the GPU tests alone on it, then one after another c1 (cold), w1 and
#           the preview (each adopting the spares of the run before), w2 and a preview pv0 that leave
#           none, w3 (its own workers), and the comparisons of the default runs.
#   spares: one GPU, a few minutes: c1 (cold), then w1 and the preview, each adopting the spares the
#           run before left, and the pair compared.
#   tests:  the GPU tests alone on the host's last card (card 1 of two, card 0 of one).
# Everything lands in OUT: summary.txt (one line a step: exit status, seconds, pytest's counts; a line per failed test),
# each step's log, gpus.txt, commit.txt, the archives, compare/, detector-check.*, the runs' logs/.
# FABENCH_LEASE_DRY_RUN=1: nothing is run or installed; each command is written, with its
# environment, to OUT/commands.txt (and `start` runs its plan in the foreground). This is how a CPU
# host checks the plan (tests/test_gpu_lease_script.py).
# A copy of the checkout may carry another commit's .git: set FABENCH_PROJECT_COMMIT to the commit.
set -uo pipefail

DRY=${FABENCH_LEASE_DRY_RUN:-}
STAGE=${STAGE:-/tmp/fabench-lease-repo}  # the copy the plan runs in: a later device call replaces the synced tree
SCRATCH=${SCRATCH:-/tmp/fabench-lease}   # the runs' lease and workers' folders, the tests' compile caches
export PYTHONUNBUFFERED=1

# The GPU tests (docs/testing.md): the timing-sensitive backend tests alone on the card, then the
# rest beside each other on it, the whole-workflow ones (pytest -m gpu_workflow) in a pytest of their
# own started at once beside the others, each with its compile cache. Limits: 120 s, then 180 s.
GPU_ALONE="tests/test_gpu_backends.py"
# test_lease.py is left out on a GPU host: it declares GPUs 0 and 1 (FABENCH_GPUS) and sets
# CUDA_VISIBLE_DEVICES to them, so its jobs could run on the other card, beside a run there.
GPU_SHARED="tests/test_gpu_identity.py tests/test_kernel_time.py tests/test_trials.py tests/test_worker.py
            tests/test_runner.py tests/test_timeline.py"
ALONE_LIMIT_S=120
SHARED_LIMIT_S=180
# "slow" marks what is slow on a CPU host (tests/slow_tests.txt): on a GPU host those run too.
MARKS="not docker and not slurm"

usage() {
    sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
}

note() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$out/summary.txt"; }
seconds_since() { python3 -c "import sys, time; print(round(time.time() - float(sys.argv[1]), 1))" "$1"; }

run_cmd() {  # command...: run it, or in a dry run write it (its environment assignments first) to OUT/commands.txt
    local line
    if [ -n "$DRY" ]; then
        line=$(printf '%q ' "$@")
        printf '%s\n' "${line% }" >> "$out/commands.txt"  # one write: steps side by side write lines whole
        return 0
    fi
    "$@"
}

on_cards() {  # name, cards ("0", "1" or "0,1"), command...: the command on those GPUs, a lease folder of its own;
    # workers of its own, or with WORKERS=cards those of its cards: the runs on the same cards one after
    # another share them, so that each adopts the spares the run before left (docs/worker.md, Spares)
    local name=$1 cards=$2 workers=$1
    shift 2
    [ "${WORKERS:-}" = cards ] && workers="cards-${cards//,/+}"
    mkdir -p "$SCRATCH"
    run_cmd env CUDA_VISIBLE_DEVICES="$cards" FABENCH_LEASE_DIR="$SCRATCH/lease-$name" \
        FABENCH_WORKER_DIR="$SCRATCH/workers-$workers" "$@"
}

timed() {  # name, command...: its output to OUT/name.log; its exit status and wall time to the summary
    local name=$1 start rc
    shift
    start=$(date +%s.%N)
    "$@" > "$out/$name.log" 2>&1
    rc=$?
    note "$name: exit $rc, $(seconds_since "$start") s"
    return $rc
}

# ---------------------------------------------------------------- the GPU tests

pytest_counts() {  # log: pytest's last summary line (counts and time)
    grep -E '^=+ .*(passed|failed|error|skipped|deselected|no tests ran).* in [0-9.]+s' "$1" | tail -1 | tr -d '='
}

pytest_failures() {  # log: each failed or erroring test as pytest's short summary names it (-rfE), one line each
    grep -E '^(FAILED|ERROR) ' "$1" | cut -c1-300 || true
}

cache_env() {  # folder: the measuring processes' compile-cache variables (fabench.measure.invocation.CACHE_ENV) under it
    python3 -c 'import sys
from fabench.measure.invocation import CACHE_ENV
print(" ".join(f"{key}={sys.argv[1]}/{sub}" for key, sub in CACHE_ENV.items()))' "$1"
}

pytest_step() {  # name, card, limit s, pytest arguments...: one pytest, its log, exit status, wall time and counts
    local name=$1 card=$2 limit=$3 start rc cache=()
    shift 3
    # Each step's own compile cache: its tests measure in folders of their own, where each compiled
    # backend otherwise compiled cold in every test; two steps side by side do not write one cache.
    [ -n "$DRY" ] || read -ra cache < <(cache_env "$SCRATCH/cache-$name")
    start=$(date +%s.%N)
    # SIGINT at the limit: pytest stops as on Ctrl-C and still prints its failures, counts and
    # durations (a plain kill left a log without them); killed 30 s later if not.
    on_cards "$name" "$card" "${cache[@]}" timeout -s INT -k 30 "$limit" \
        python3 -m pytest -v -p no:cacheprovider -rfEs --durations=25 "$@" > "$out/$name.log" 2>&1
    rc=$?
    note "$name: exit $rc, $(seconds_since "$start") s; $(pytest_counts "$out/$name.log")"
    # Which tests failed, in the summary itself: a lease taken back before its logs came home
    # still says them in the last lines a device call printed.
    [ -z "$DRY" ] && [ -f "$out/$name.log" ] && pytest_failures "$out/$name.log" | while IFS= read -r line; do
        note "$name: $line"
    done
    return $rc
}

gpu_tests() {  # card: the GPU tests on it, within ALONE_LIMIT_S + SHARED_LIMIT_S; nonzero when any step failed
    local card=$1 start rc workflow
    start=$(date +%s.%N)
    # shellcheck disable=SC2086  # the lists split into their files
    pytest_step "tests-card$card-alone" "$card" "$ALONE_LIMIT_S" -m "$MARKS" $GPU_ALONE
    rc=$?
    # The whole-workflow tests run longest (a Snakemake run each): started first, beside the rest.
    # shellcheck disable=SC2086
    pytest_step "tests-card$card-workflow" "$card" "$SHARED_LIMIT_S" -m "gpu_workflow and $MARKS" -n 2 $GPU_SHARED &
    workflow=$!
    # shellcheck disable=SC2086
    pytest_step "tests-card$card-shared" "$card" "$SHARED_LIMIT_S" -m "not gpu_workflow and $MARKS" \
        -n 8 --dist load $GPU_SHARED
    rc=$((rc | $?))
    wait "$workflow"
    rc=$((rc | $?))
    note "tests-card$card: exit $rc, $(seconds_since "$start") s in all"
    return $rc
}

# ---------------------------------------------------------------- the runs

report_time() {  # run: "N s" from the report's own time line (Snakemake's start to the report), if it says
    grep -oE '\([0-9.]+ s from its start\)' "results/$1/report.md" 2>/dev/null | grep -oE '[0-9.]+ s' | head -1
}

work_kinds() {  # run: the report's time by kind of work ("Where the run's time went"), on one line
    sed -n "/^### Where the run's time went/,/^---/p" "results/$1/report.md" 2>/dev/null \
        | awk -F'|' '/^\| [a-z]/ && $3 ~ /[0-9]/ {gsub(/^ +| +$/, "", $2); gsub(/ /, "", $3); gsub(/ /, "", $4);
                     printf "%s%s %s s (%s)", sep, $2, $3, $4; sep = "; "}'
}

run_timed() {  # name, cards, snakemake options...: one run timed to its report, its report kept in OUT
    local name=$1 cards=$2 rc
    shift 2
    WORKERS=cards timed "$name" on_cards "$name" "$cards" python3 -m snakemake report --config "run=$name" "$@"
    rc=$?
    [ -z "$DRY" ] && note "$name: to the report by its time line: $(report_time "$name")"
    # Its time by kind of work in the summary, and its report beside it: a preview is archived
    # nowhere, and a lease taken back early leaves only the summary.
    [ -z "$DRY" ] && note "$name: by kind of work: $(work_kinds "$name")"
    [ -z "$DRY" ] && cp "results/$name/report.md" "$out/report-$name.md" 2>/dev/null
    return $rc
}

experiment() {  # name, cards, archive root, snakemake options...: one run timed to its report, then archived
    local name=$1 cards=$2 root=$3 rc
    shift 3
    run_timed "$name" "$cards" "$@"
    rc=$?
    # The entry's folder (stdout of archive store) names it in the comparisons.
    run_cmd fabench archive store "results/$name" --root "$root" > "$out/entry-$name.txt" 2> "$out/archive-$name.log"
    note "$name: archived, exit $? ($(cat "$out/entry-$name.txt" 2>/dev/null))"
    return $rc
}

preview_run() {  # name, cards: the preview timed to its report; never archived (archive store refuses a preview)
    run_timed "$1" "$2" --cores 1 --configfile config/preview.yaml
}

default_run() {  # name, cards, snakemake options...: the default experiment (config.yaml), into OUT/archive
    experiment "$1" "$2" "$out/archive" "${@:3}"
}

compare_all() {  # runs...: every pair of these default runs, then the detector check on their archive
    local runs=("$@") i j a b
    mkdir -p "$out/compare"
    for ((i = 0; i < ${#runs[@]}; i++)); do
        for ((j = i + 1; j < ${#runs[@]}; j++)); do
            a=${runs[i]} b=${runs[j]}
            run_cmd fabench compare "$(entry_of "$a")" "$(entry_of "$b")" --root "$out/archive" \
                --out-md "$out/compare/$a-vs-$b.md" --out-json "$out/compare/$a-vs-$b.json" \
                > "$out/compare/$a-vs-$b.log" 2>&1
            note "compare $a $b: exit $?, $(tail -1 "$out/compare/$a-vs-$b.log")"
        done
    done
    timed detector-check run_cmd fabench detector-check --root "$out/archive" \
        --out-md "$out/detector-check.md" --out-json "$out/detector-check.json"
}

entry_of() {  # run: its archived entry's folder (a dry run names it by the run)
    if [ -n "$DRY" ]; then echo "ENTRY-$1"; else cat "$out/entry-$1.txt"; fi
}

plan_accept() {
    local tests
    gpu_tests 1 &
    tests=$!
    default_run c1 0 --cores 1          # cold: a fresh copy of the checkout, no compile cache
    wait "$tests"
    default_run w1 0 --cores 1          # warm, alone
    default_run k1 1 --cores 1 &        # warm on card 1 (its compile ahead's stamps are card 0's) ...
    tests=$!
    default_run w2 0 --cores 1          # ... beside warm on card 0
    wait "$tests"
    default_run m1 0,1 --profile profiles/multi-gpu --resources gpu=2
    default_run m2 0,1 --profile profiles/multi-gpu --resources gpu=2  # adopting m1's spares, as w2 w1's
    default_run k2 1 --cores 1 &        # a second round on both cards: more pairs of each kind
    tests=$!
    default_run w3 0 --cores 1
    wait "$tests"
    preview_run pv 0
    host_costs
    compare_all c1 w1 w2 k1 m1 m2 w3 k2
}

plan_spares() {  # one GPU, a few minutes: c1 (cold), then w1 and the preview, each adopting the run before's spares
    default_run c1 0 --cores 1
    default_run w1 0 --cores 1
    preview_run pv 0
    compare_all c1 w1
}

plan_one_card() {  # a host of one GPU: the GPU tests alone, then the runs one after another on it
    # With spares (the default) against without (measure.spare_worker_s 0, joining `--config run=NAME`):
    # w1 and pv adopt the spares of the run before; w2 and pv0 leave none, so pv0 and w3 start their own.
    local no_spare="measure={spare_worker_s: 0}"
    gpu_tests 0
    default_run c1 0 --cores 1          # cold: a fresh copy of the checkout, no compile cache
    default_run w1 0 --cores 1          # warm, adopting c1's spares
    preview_run pv 0                    # adopting w1's round-0 spare
    default_run w2 0 "$no_spare" --cores 1
    run_timed pv0 0 "$no_spare" --cores 1 --configfile config/preview.yaml
    default_run w3 0 --cores 1          # warm, starting its own workers
    host_costs
    compare_all c1 w1 w2 w3
}

plan_verdicts() {  # the runs of the verdicts' acceptance alone: no GPU tests, no cold run, no preview
    local other
    default_run w1 0 --cores 1
    default_run k1 1 --cores 1 &
    other=$!
    default_run w2 0 --cores 1
    wait "$other"
    default_run k2 1 --cores 1 &
    other=$!
    default_run w3 0 --cores 1
    wait "$other"
    default_run m1 0,1 --profile profiles/multi-gpu --resources gpu=2
    compare_all w1 w2 k1 w3 k2 m1
}

plan_local_memory() {  # local memory placed anew per trial (the default) against per process, same cards
    # The setting joins `--config run=NAME` (experiment's first option): a second --config would replace it.
    local tests other per_process="timing={local_memory: per_process}"
    gpu_tests 1 &
    tests=$!
    default_run c1 0 --cores 1
    wait "$tests"
    default_run w1 0 --cores 1
    # Three rounds on both cards, each setting on each card in turn: per process into an archive of
    # its own (another experiment: the setting is part of its identity).
    experiment p1 1 "$out/archive-per-process" "$per_process" --cores 1 &
    other=$!
    default_run w2 0 --cores 1
    wait "$other"
    default_run k1 1 --cores 1 &
    other=$!
    experiment p2 0 "$out/archive-per-process" "$per_process" --cores 1
    wait "$other"
    experiment p3 1 "$out/archive-per-process" "$per_process" --cores 1 &
    other=$!
    default_run w3 0 --cores 1
    wait "$other"
    compare_all c1 w1 w2 k1 w3
    timed detector-check-per-process run_cmd fabench detector-check --root "$out/archive-per-process" \
        --out-md "$out/detector-check-per-process.md" --out-json "$out/detector-check-per-process.json"
    default_run m1 0,1 --profile profiles/multi-gpu --resources gpu=2
    preview_run pv 0
}

plan() {  # plan: run it here, in the foreground
    case $1 in
    accept) plan_accept ;;
    verdicts) plan_verdicts ;;
    local-memory) plan_local_memory ;;
    one-card) plan_one_card ;;
    spares) plan_spares ;;
    tests) gpu_tests "$(last_card)" ;;
    *) note "no such plan: $1 (accept, verdicts, local-memory, one-card, spares or tests)"; return 2 ;;
    esac
}

last_card() {  # the host's last GPU: card 1 of two (beside a run on card 0), card 0 of one
    if [ -n "$DRY" ]; then echo 1; else echo $(($(nvidia-smi -L | wc -l) - 1)); fi
}

describe_host() {  # the cards and the commit, to OUT
    if [ -n "$DRY" ]; then
        echo "dry run: no GPU asked" > "$out/gpus.txt"
    else
        nvidia-smi --query-gpu=index,name,uuid,driver_version,power.limit --format=csv,noheader > "$out/gpus.txt"
    fi
    { git rev-parse HEAD 2>/dev/null; git status --short 2>/dev/null | head -20; } > "$out/commit.txt"
    note "on $(tr '\n' ';' < "$out/gpus.txt") at $(head -1 "$out/commit.txt")"
}

host_costs() {  # what each job's launcher and Snakemake's own start cost on this host, to OUT/host-costs.txt
    [ -n "$DRY" ] && return 0
    {
        for what in "python3 -c pass" "python3 -m fabench.measure --help" "python3 -m snakemake --version"; do
            python3 -c 'import subprocess, sys, time
times = []
for _ in range(3):
    began = time.perf_counter()
    subprocess.run(sys.argv[1].split(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    times.append(time.perf_counter() - began)
print(f"{sys.argv[1]}: {min(times):.3f} s (best of 3)")' "$what"
        done
        python3 -X importtime -c "import fabench.measure.launch.runner, jsonschema" 2>&1 | sort -t'|' -k2 -n -r | head -15
    } > "$out/host-costs.txt" 2>&1
}

run_plan() {  # plan: in the staged copy (the current folder), OUT's summary and logs
    local rc
    describe_host
    note "plan $1: start"
    plan "$1"
    rc=$?
    [ -z "$DRY" ] && { cp -r logs "$out/logs" 2>/dev/null; true; }
    note "plan $1: done, exit $rc"
    return $rc
}

# ---------------------------------------------------------------- start, status, collect

install() {  # the carried wheels, then this checkout, into the interpreter's own environment
    # Not `pip install --target`: nvidia-cutlass-dsl puts its packages on the path by a .pth file,
    # which Python reads from site-packages only (docs/gpu.md).
    local wheels=${WHEELS:-.whl}
    if compgen -G "$wheels/*.whl" > /dev/null || [ -n "$DRY" ]; then
        timed install-wheels run_cmd python3 -m pip install --no-index --no-deps --no-compile --no-cache-dir \
            --upgrade "$wheels"/*.whl || return 1
    else
        note "install-wheels: none under $wheels (the host's own packages)"
    fi
    timed install-project run_cmd python3 -m pip install --no-index --no-deps --no-build-isolation -e "$STAGE" || return 1
    [ -n "$DRY" ] || timed check-imports python3 -c "import snakemake, jsonschema, yaml, fabench, pytest, xdist"
}

stage() {  # this checkout copied to STAGE (anew: a cold compile cache), without results, caches and wheels
    run_cmd rm -rf "$STAGE"
    run_cmd mkdir -p "$STAGE"
    if [ -z "$DRY" ]; then
        tar --exclude=./build --exclude=./results --exclude=./logs --exclude=./.snakemake --exclude=./.whl \
            --exclude=./archive --exclude=./compare -cf - . | tar -xf - -C "$STAGE" || return 1
    fi
}

running() {  # OUT: whether its plan's process still runs
    [ -f "$out/lease.pid" ] && kill -0 "$(cat "$out/lease.pid")" 2>/dev/null
}

start() {  # plan: stage, install, and the plan detached in the staged copy
    local plan=$1
    if running; then
        echo "a plan runs already in $out (pid $(cat "$out/lease.pid"))" >&2
        return 1
    fi
    rm -rf "$out" && mkdir -p "$out"
    stage || { note "stage: failed"; return 1; }
    install || { note "install: failed (see $out/install-*.log)"; return 1; }
    if [ -n "$DRY" ]; then
        (cd "$STAGE" 2>/dev/null || cd .; run_plan "$plan")
        return
    fi
    cd "$STAGE" || return 1
    setsid nohup bash "$STAGE/tools/gpu-lease.sh" plan "$out" "$plan" > "$out/lease.log" 2>&1 < /dev/null &
    echo $! > "$out/lease.pid"
    note "started: plan $plan, pid $(cat "$out/lease.pid"), in $STAGE; tools/gpu-lease.sh status $out"
}

status() {
    cat "$out/summary.txt" 2>/dev/null
    if running; then echo "running (pid $(cat "$out/lease.pid"))"; else echo "not running"; fi
}

collect() {  # dest: OUT packed as DEST/lease.tgz
    local dest=$1
    mkdir -p "$dest"
    status > "$out/status.txt"
    tar -czf "$dest/lease.tgz" -C "$(dirname "$out")" "$(basename "$out")" || return 1
    echo "$dest/lease.tgz: $(du -h "$dest/lease.tgz" | cut -f1); $(tail -1 "$out/status.txt")"
}

[ $# -ge 2 ] || usage
command=$1
out=$(realpath -m "$2")
case $command in
start) start "${3:-accept}" ;;
status) status ;;
collect) [ $# -ge 3 ] || usage; collect "$(realpath -m "$3")" ;;
tests) mkdir -p "$out" && describe_host && gpu_tests "${3:-0}" ;;
plan) [ $# -ge 3 ] || usage; mkdir -p "$out" && run_plan "$3" ;;
compare) [ $# -ge 4 ] || usage; compare_all "${@:3}" ;;
*) usage ;;
esac
