#!/bin/bash
cd /tmp/fabench-lease-repo
source <(sed -n '/^note()/,/^}/p' tools/gpu-lease.sh)
out=/tmp/lease; S=/tmp/fabench-lease
run() { # name card per_process?
  local n=$1 c=$2 extra=$3 root=$out/archive s=$(date +%s.%N)
  [ -n "$extra" ] && root=$out/archive-per-process
  CUDA_VISIBLE_DEVICES=$c FABENCH_LEASE_DIR=$S/lease-$n FABENCH_WORKER_DIR=$S/workers-$n python3 -m snakemake report --config run=$n ${extra:+"$extra"} --cores 1 > $out/$n.log 2>&1
  echo "$(date -u +%T) $n: exit $?, $(python3 -c "import time,sys;print(round(time.time()-float(sys.argv[1]),1))" $s) s" >> $out/summary.txt
  fabench archive store results/$n --root $root > $out/entry-$n.txt 2> $out/archive-$n.log
}
run p4 0 "timing={local_memory: per_process}" & a=$!; run k2 1 ""; wait $a
run p5 0 "timing={local_memory: per_process}" & a=$!; run k3 1 ""; wait $a
CUDA_VISIBLE_DEVICES=1 timeout 120 python3 -m pytest -v -p no:cacheprovider tests/test_gpu_backends.py -k "confirmed_by_the_second_method or local_memory" > $out/tests-rerun.log 2>&1
echo "$(date -u +%T) rerun: $(tail -1 $out/tests-rerun.log)" >> $out/summary.txt
fabench detector-check --root $out/archive --out-md $out/detector-check-2.md --out-json $out/detector-check-2.json > /dev/null 2>&1
fabench detector-check --root $out/archive-per-process --out-md $out/detector-check-per-process-2.md --out-json $out/detector-check-per-process-2.json > /dev/null 2>&1
echo "$(date -u +%T) extra done" >> $out/summary.txt
