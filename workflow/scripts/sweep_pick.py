# The sweep's winner: sweep.json, aiter's config file and variants.yaml. Rule sweep_pick.
import sys

from fabench.tune.pick import load_jobs, write_winner

sys.stderr = open(snakemake.log[0], "w")
summary = write_winner(
    load_jobs(list(snakemake.input.jobs)),
    dict(snakemake.params.sweep),
    dict(snakemake.params.variants),
    dict(snakemake.output.items()),
    snakemake.input.manifest[0] if snakemake.input.manifest else None,
)
winner = summary["winner"]
print(f"sweep winner {winner['id']}: {summary['objective']} speedup {winner['score']:.3f} over "
      f"{summary['reference_variant']}; written to {snakemake.output.variants}", file=sys.stderr)
