"""rule archive: the finished run -> archive/<label>/<run-id>/, and results/<run>/archived.json naming it.

Refused (the rule fails, the log says why, nothing is written) when the run is incomplete. When
its measurements are already an intact entry (a previous `snakemake archive` stored it and was
stopped before writing its receipt, or archive.label changed), the receipt names that entry and
nothing new is stored."""
import logging
import sys
from pathlib import Path

from fabench.results.archive_layout import ArchiveError
from fabench.results.archive_read import load_entry
from fabench.results.archive_store import AlreadyArchived, archive_run, write_receipt
from fabench.results.collect import result_schema

sm = snakemake  # noqa: F821
logging.basicConfig(filename=sm.log[0], level=logging.INFO, format="%(message)s")


def say(line):
    logging.info("%s", line)
    print(f"archive: {line}", file=sys.stderr, flush=True)


extra = {"config.json": sm.input.config}
if sm.input.manifest:
    extra["image-manifest.json"] = sm.input.manifest
try:
    entry = archive_run(Path(sm.params.run_dir), Path(sm.params.root), sm.params.label, extra,
                        schema=result_schema(sm.params.schema), notify=say)
except AlreadyArchived as err:
    if not load_entry(err.entry).ok:
        logging.error("archive refused: %s", err)
        sys.exit(f"archive refused: {err}")
    entry = err.entry
    say(f"{sm.params.run_dir}: {err}; the receipt names that entry, nothing new is stored")
except ArchiveError as err:
    logging.error("archive refused: %s", err)
    sys.exit(f"archive refused: {err}")
else:
    say(f"{sm.params.run_dir}: archived as {entry}")
write_receipt(Path(sm.output[0]), entry)
