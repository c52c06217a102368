# The coarse stage's best candidates, which the refine stage varies further. Rule sweep_shortlist.
import sys
from pathlib import Path

from fabench.tune.pick import write_shortlist

sys.stderr = open(snakemake.log[0], "w")
write_shortlist(list(snakemake.input), dict(snakemake.params.sweep), Path(snakemake.output[0]))
