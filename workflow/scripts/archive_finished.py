"""rule archive: once this config's runs are archived (rule archive_run), every other finished
results/<run> the archive does not hold yet is stored too, under its own config's archive.label
(fabench.results.unarchived). A run that cannot be stored (not finished, refused) is named with
why in the log and on the terminal; it does not fail the rule, whose job is the runs that can be."""
import logging
import sys
from pathlib import Path

from fabench.results.collect import result_schema
from fabench.side_files import RECEIPT, side_file_or_note
from fabench.results.unarchived import WORKFLOW_RESULTS, store_unarchived

sm = snakemake  # noqa: F821
logging.basicConfig(filename=sm.log[0], level=logging.INFO, format="%(message)s")


def say(line):
    logging.info("%s", line)
    print(f"archive: {line}", file=sys.stderr, flush=True)


for run in sm.params.previews:
    say(f"results/{run} is a preview (config.preview: true), too few samples to compare versions by: not archived")
outcome = store_unarchived(WORKFLOW_RESULTS, Path(sm.params.root), sm.params.own_runs,
                           schema=result_schema(sm.params.schema), notify=say)
for stored in outcome:
    say(f"{stored.run_dir}: archived as {stored.entry}" if stored.entry else f"{stored.run_dir} not archived: {stored.refused}")


def archived_as(run: str) -> str:
    """Where this config's run is archived, from its receipt (checked: fabench.side_files)."""
    receipt, note = side_file_or_note(Path(f"results/{run}/archived.json"), RECEIPT)
    return f"results/{run} as {receipt['entry']}" if receipt else f"results/{run}: {note or 'no receipt'}"


# The last line names every run this command answers for: this config's (stored by rule archive_run,
# now or before; a preview never is) and the others.
own = [archived_as(run) for run in sm.params.own_runs if run not in sm.params.previews]
say(f"this config's run(s) in the archive: {', '.join(own) or 'none'}; "
    f"{sum(s.entry is not None for s in outcome)} other finished run(s) archived, "
    f"{sum(s.entry is None for s in outcome)} not")
