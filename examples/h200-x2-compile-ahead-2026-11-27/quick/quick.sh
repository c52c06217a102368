#!/bin/bash
# A short lease without FlashAttention-4: install the dependencies, copy the tree, then on card 0 a cold
# run (compiles ahead, leaves stamps) and a warm one (finds them). Usage: bash quick.sh COMMIT
set -u
mkdir -p /tmp/stage && cp .stage/w.tar.xz .stage/install_w.sh /tmp/stage/
bash /tmp/stage/install_w.sh > /tmp/install.log 2>&1 || { tail -20 /tmp/install.log; exit 1; }
rm -rf /tmp/repo && mkdir /tmp/repo && tar --exclude=./build --exclude=./.stage --exclude=./results --exclude=./logs -cf - . | tar -xf - -C /tmp/repo
cd /tmp/repo && python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >> /tmp/install.log 2>&1 || { tail -20 /tmp/install.log; exit 1; }
export PYTHONUNBUFFERED=1 FABENCH_PROJECT_COMMIT=$1
out=/tmp/lease && mkdir -p $out
one() {
    local name=$1 s rc
    shift
    s=$(date +%s.%N)
    CUDA_VISIBLE_DEVICES=0 FABENCH_LEASE_DIR=/tmp/fabench-lease-0 FABENCH_WORKER_DIR=/tmp/fabench-workers-0 \
        python3 -m snakemake report archive --config run=$name "archive={root: $out/archive}" --cores 1 "$@" > "$out/$name.log" 2>&1
    rc=$?
    echo "$(date -u +%H:%M:%S) $name: exit $rc, $(python3 -c "print(round($(date +%s.%N) - $s, 1))") s" >> "$out/summary.txt"
}
nvidia-smi --query-gpu=index,name,uuid --format=csv,noheader > $out/gpus.txt
one c10
one w10
echo "$(date -u +%H:%M:%S) done" >> $out/summary.txt
