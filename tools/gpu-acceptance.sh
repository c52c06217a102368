#!/bin/bash
# The GPU acceptance runs of issues 24 and 25, on one GPU, one after another (how examples/h100 was
# made): the kernel-time probe, the GPU tests, the default experiment in worker mode with cold
# compile caches (w1) and warm (w2), then with one process per job (iso), each archived; then the
# comparison of the three. Usage: tools/gpu-acceptance.sh OUT_DIR (a copy of the checkout as the
# working directory: the runs write results/, logs/ and examples/h100/ in it).
set -uo pipefail
out="$1"
mkdir -p "$out"
cfg=examples/h100/h100.yaml
note() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$out/summary.txt"; }
timed() {  # name, command...: runs it, logs to OUT/name.log, notes its exit status and wall time
    local name=$1 start rc
    shift
    start=$(date +%s.%N)
    "$@" > "$out/$name.log" 2>&1
    rc=$?
    note "$name: exit $rc, $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s"
}
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit --format=csv,noheader > "$out/gpu.txt"
note "start on $(cat "$out/gpu.txt")"
timed probe python3 tools/kernel_time_probe.py
timed gpu-tests python3 -m pytest -q -p no:cacheprovider -m 'not slow and not docker and not slurm' -rs \
    tests/test_gpu_backends.py tests/test_gpu_identity.py tests/test_kernel_time.py tests/test_trials.py \
    tests/test_worker.py tests/test_runner.py tests/test_timeline.py tests/test_lease.py
for run in w1 w2; do
    timed "$run" python3 -m snakemake --cores 1 report archive --configfile "$cfg" --config "run=$run"
done
timed iso python3 -m snakemake --cores 1 report archive --configfile "$cfg" --config "run=iso" "measure={mode: isolate}"
timed compare python3 -m snakemake --cores 1 compare --configfile "$cfg" --config "run=iso"
note "done"
