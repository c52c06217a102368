# The config this run was made with, defaults filled in, kept beside its results (archived with
# them). Rule resolved_config.
from fabench.files import write_json

write_json(snakemake.output[0], dict(snakemake.params.config))
