#!/bin/bash
# After the speed plan: warm runs on card 0 with nothing beside them (the plan's ran beside the GPU tests).
cd /tmp/repo
export PYTHONUNBUFFERED=1 FABENCH_PROJECT_COMMIT=$1
out=/tmp/lease
one() {
    local name=$1 s rc
    shift
    s=$(date +%s.%N)
    CUDA_VISIBLE_DEVICES=0 FABENCH_LEASE_DIR=/tmp/fabench-lease-0 FABENCH_WORKER_DIR=/tmp/fabench-workers-0 "$@" > "$out/$name.log" 2>&1
    rc=$?
    echo "$(date -u +%H:%M:%S) $name (alone): exit $rc, $(python3 -c "print(round($(date +%s.%N) - $s, 1))") s" >> "$out/summary.txt"
}
one w9 python3 -m snakemake report archive --config run=w9 "archive={root: $out/archive}" --cores 1
one w9n python3 -m snakemake report archive --config run=w9n "archive={root: $out/archive}" --cores 1 --configfile "$out/never.yaml"
one pv2 python3 -m snakemake --cores 1 report --configfile config/preview.yaml --config run=pv2
echo "$(date -u +%H:%M:%S) extra done" >> "$out/summary.txt"
