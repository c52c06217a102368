"""rule compare: every entry of the archive -> compare/compare.{md,json,csv} and compare/versions-<variant>.png,
by the comparison policy of the config (the same call as `fabench compare`).

Broken entries are left out and named in the outputs and the log; they do not fail the rule."""
import logging
import sys
from pathlib import Path

from fabench.files import write_atomic, write_json
from fabench.report.html import markdown_page
from fabench.report.plots import version_plot_name, versions_png
from fabench.results.published import load_published
from fabench.results.archive_read import list_entries
from fabench.analysis.policy import Rule
from fabench.results.compare import CompareError, compare_entries
from fabench.results.compare_csv import comparison_csv
from fabench.report.compare_markdown import render_markdown
from fabench.results.unarchived import WORKFLOW_RESULTS, unarchived_lines

sm = snakemake  # noqa: F821
logging.basicConfig(filename=sm.log[0], level=logging.INFO, format="%(message)s")
entries = list_entries(Path(sm.params.root))
published = load_published(sm.input.published) if sm.input.published else None
try:
    comparison = compare_entries(entries, Rule(**sm.params.rule), sm.params.baseline, published)
except CompareError as err:
    logging.error("compare: %s", err)
    sys.exit(f"compare: {err}")
for item in comparison["left_out"]:
    logging.warning("left out %s: %s", item["id"], "; ".join(item["problems"]))
plots = {Path(p).name: p for p in sm.output.plots}
figures = [(f"variant {variant} across the archived versions", version_plot_name(variant))
           for variant in sm.params.variants]
markdown = render_markdown(comparison, figures=figures)
# A finished run the archive does not hold is in no comparison: named here, with the command that stores it.
if pending := unarchived_lines(WORKFLOW_RESULTS, Path(sm.params.root)):
    for line in pending:
        logging.warning("%s", line)
        print(f"compare: {line}", file=sys.stderr, flush=True)
    markdown += "\n## Finished runs not in the archive\n\n" + "".join(f"- {line}\n" for line in pending)
write_atomic(sm.output.markdown, markdown)
write_json(sm.output.json, comparison)
write_atomic(sm.output.csv, comparison_csv(comparison))
for variant in sm.params.variants:
    write_atomic(plots[version_plot_name(variant)], versions_png(comparison, variant))
# after the pictures, which the page embeds
write_atomic(sm.output.html, markdown_page(markdown, Path(sm.output.html).parent, "Comparison across versions"))
flagged = [f for f in comparison["flags"] if f["flag"] == "regression"]
logging.info("%d entries compared, %d left out, %d regression flag(s)", len(comparison["entries"]),
             len(comparison["left_out"]), len(flagged))
