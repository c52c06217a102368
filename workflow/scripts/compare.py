"""rule compare: every entry of the archive -> compare/compare.{md,html,json,csv},
compare/plots/versions-<variant>.png (one per variant the entries hold) and compare/runs/<entry>.html
(each archived run's report as a page, for Snakemake's HTML report), by the comparison policy
of the config, through the writer `fabench compare` uses (fabench.report.compare_outputs).

Broken entries are left out and named in the outputs and the log; they do not fail the rule."""
import logging
import sys
from pathlib import Path

from fabench.analysis.policy import Code, Rule
from fabench.report.compare_outputs import ComparisonOutputs, result_line, write_comparison, write_entry_pages
from fabench.results.archive_read import list_entries
from fabench.results.compare import CompareError, compare_entries
from fabench.results.published import load_published
from fabench.results.unarchived import WORKFLOW_RESULTS, unarchived_lines

sm = snakemake  # noqa: F821
logging.basicConfig(filename=sm.log[0], level=logging.INFO, format="%(message)s")
entries = list_entries(Path(sm.params.root))
published = load_published(sm.input.published) if sm.input.published else None
try:
    comparison = compare_entries(entries, Rule.of({"comparison": sm.params.rule}), sm.params.baseline, published)
except CompareError as err:
    logging.error("compare: %s", err)
    sys.exit(f"compare: {err}")
for item in comparison["left_out"]:
    logging.warning("left out %s: %s", item["id"], "; ".join(item["problems"]))
# A finished run the archive does not hold is in no comparison: named on the page and in the log,
# with the command that stores it.
comparison["unarchived"] = unarchived_lines(WORKFLOW_RESULTS, Path(sm.params.root))
for line in comparison["unarchived"]:
    logging.warning("%s", line)
    print(f"compare: {line}", file=sys.stderr, flush=True)
write_comparison(comparison, ComparisonOutputs(markdown=Path(sm.output.markdown), json=Path(sm.output.json),
                                               csv=Path(sm.output.csv), html=Path(sm.output.html),
                                               plots=Path(sm.output.plots)))
write_entry_pages(entries, Path(sm.output.runs))
# The result's line; the terminal gets it as the workflow's last (fabench.report.last_lines).
logging.info("%s", result_line(comparison))
flagged = [f for f in comparison["flags"] if f["code"] == Code.REGRESSION]
logging.info("%d entries compared, %d left out, %d regression flag(s)", len(comparison["entries"]),
             len(comparison["left_out"]), len(flagged))
