"""rule plots: results/<run>/results.json -> results/<run>/plots/{latency,speedup}.png"""
import json
import logging
from pathlib import Path

from fabench.files import write_atomic
from fabench.report.plots import latency_png, speedup_png

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s")  # noqa: F821
collected = json.loads(Path(snakemake.input.results).read_text())  # noqa: F821
write_atomic(snakemake.output.latency, latency_png(collected))  # noqa: F821
write_atomic(snakemake.output.speedup, speedup_png(collected))  # noqa: F821
logging.info("wrote %s and %s", snakemake.output.latency, snakemake.output.speedup)  # noqa: F821
