"""rule archive: the finished run -> archive/<label>/<run-id>/, and results/<run>/archived.json naming it.

Refused (the rule fails, the log says why, nothing is written) when the run is incomplete."""
import logging
import sys
from pathlib import Path

from fabench.results.archive_layout import ArchiveError
from fabench.results.archive_store import archive_run, write_receipt
from fabench.results.collect import result_schema

sm = snakemake  # noqa: F821
logging.basicConfig(filename=sm.log[0], level=logging.INFO, format="%(message)s")
extra = {"config.json": sm.input.config}
if sm.input.manifest:
    extra["image-manifest.json"] = sm.input.manifest
try:
    entry = archive_run(Path(sm.params.run_dir), Path(sm.params.root), sm.params.label, extra,
                        expected_jobs={tuple(job) for job in sm.params.expected_jobs},
                        schema=result_schema(sm.params.schema))
except ArchiveError as err:
    logging.error("archive refused: %s", err)
    sys.exit(f"archive refused: {err}")
write_receipt(Path(sm.output[0]), entry)
logging.info("archived %s as %s", sm.params.run_dir, entry)
