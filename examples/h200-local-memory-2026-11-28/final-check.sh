#!/bin/bash
# final-commit check on one H200: the GPU backends' tests (the lease's alone step), then the preview cold and warm
out=/tmp/fin; mkdir -p $out
rm -rf /tmp/fin-repo && mkdir -p /tmp/fin-repo && tar --exclude=./.whl-r* --exclude=./.git --exclude=./.probe -cf - . | tar -xf - -C /tmp/fin-repo
cd /tmp/fin-repo
python3 -m pip install --no-index --no-deps --no-compile --no-cache-dir --upgrade /tmp/wheels2/*.whl > $out/install.log 2>&1
python3 -m pip install --no-index --no-deps --no-build-isolation -e . >> $out/install.log 2>&1
echo "$(date -u +%T) installed" >> $out/summary.txt
nvidia-smi --query-gpu=index,name,uuid,driver_version,power.limit --format=csv,noheader >> $out/summary.txt
export FABENCH_PROJECT_COMMIT=613b201
s=$(date +%s)
timeout -s INT -k 30 120 python3 -m pytest -v -p no:cacheprovider -rfEs tests/test_gpu_backends.py > $out/tests-alone.log 2>&1
echo "$(date -u +%T) tests alone: exit $? $(( $(date +%s) - s )) s; $(grep -E '^=+ .*(passed|failed)' $out/tests-alone.log | tail -1)" >> $out/summary.txt
for r in pv0 pv1; do
  s=$(date +%s.%N)
  python3 -m snakemake report --cores 1 --configfile config/preview.yaml --config run=$r > $out/$r.log 2>&1
  echo "$(date -u +%T) $r: exit $? $(python3 -c "import time,sys;print(round(time.time()-float(sys.argv[1]),1))" $s) s; time line $(grep -oE '\([0-9.]+ s from its start\)' results/$r/report.md | head -1)" >> $out/summary.txt
  cp results/$r/report.md $out/report-$r.md
done
echo "$(date -u +%T) done" >> $out/summary.txt
