"""rule plots: results/<run>/results.json -> results/<run>/plots/{latency,speedup,roofline}.png; the
speedup's marks follow the config's comparison rule (params.rule), as the report's claims do."""
import json
import logging
from pathlib import Path

from fabench.analysis.policy import Rule
from fabench.files import write_atomic
from fabench.report.latency_plot import latency_png
from fabench.report.roofline_plot import roofline_png
from fabench.report.speedup_plot import speedup_png
from fabench.results.shared import shown

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s")  # noqa: F821
# Backends measured once per shape appear in every variant's lines, as in the report's tables.
collected = shown(json.loads(Path(snakemake.input.results).read_text()))  # noqa: F821
rule = Rule.of({"comparison": snakemake.params.rule})  # noqa: F821
write_atomic(snakemake.output.latency, latency_png(collected))  # noqa: F821
write_atomic(snakemake.output.speedup, speedup_png(collected, rule))  # noqa: F821
write_atomic(snakemake.output.roofline, roofline_png(collected))  # noqa: F821
logging.info("wrote %s, %s and %s", snakemake.output.latency, snakemake.output.speedup,  # noqa: F821
             snakemake.output.roofline)  # noqa: F821
