#!/bin/bash
# One run of the default experiment on a GPU host, archived (and, with "compare", the comparison
# of every archived run): how examples/h200/ was made. Usage: tools/h200-example.sh RUN [compare]
set -euo pipefail
run="$1"
start=$(date +%s)
python3 -m snakemake --cores 1 report archive --configfile examples/h200/h200.yaml --config "run=$run" \
    > "logs-$run.txt" 2>&1 || { tail -n 60 "logs-$run.txt"; exit 1; }
echo "run $run: $(( $(date +%s) - start )) s"
if [ "${2:-}" = compare ]; then
    python3 -m snakemake --cores 1 compare --configfile examples/h200/h200.yaml --config "run=$run" \
        --directory . > "logs-compare.txt" 2>&1 || { tail -n 60 logs-compare.txt; exit 1; }
    mkdir -p examples/h200/compare && cp -r compare/. examples/h200/compare/
fi
