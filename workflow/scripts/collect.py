# Every job's result, checked against the result schema and against the config it should have
# run with, collected into one results.json in the config's variant order. Rule collect.
import sys

from fabench.files import write_atomic, write_json
from fabench.results.collect import ResultError, collect, result_schema
from fabench.results.results_csv import results_csv

sys.stderr = open(snakemake.log[0], "w")
try:
    collected = collect(snakemake.input.results, snakemake.params.variants, result_schema(snakemake.params.schema),
                        expected=snakemake.params.expected)
except ResultError as err:
    sys.exit(f"fabench collect: {err}")
write_json(snakemake.output.json, collected)
write_atomic(snakemake.output.csv, results_csv(collected))
