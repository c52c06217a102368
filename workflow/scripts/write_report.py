"""rule write_report: the run's process files -> each (variant, shape)'s result, results.json and
.csv, the plots, report.md and .html, config.json; in one process (see workflow/rules/report.smk)."""
import json
import os
import sys
from pathlib import Path

from fabench.analysis.policy import Rule
from fabench.files import JsonReadError, read_json, write_atomic, write_json
from fabench.report.findings import run_summary
from fabench.report.html import markdown_page
from fabench.report.plots import run_figures, write_run_plots
from fabench.report.render import render
from fabench.results.collect import ResultError, collect, result_schema
from fabench.results.merge import ProcessFileError, merge_files
from fabench.results.output_digests import record_digests
from fabench.results.published import load_published
from fabench.results.results_csv import results_csv
from fabench.measure.launch.worker_client import SPARES_ENV, leave_spares
from fabench.side_files import COMPILE_AHEAD, WORKFLOW_STARTED, side_file_or_note
from fabench.watchdog import WORKFLOW_ENV

sm = snakemake  # noqa: F821
sys.stderr = open(snakemake.log[0], "w")  # noqa: F821

# The run's measuring is over: its workers leave their spares first thing, so that these import
# beside this report and Snakemake's end instead of at the next run's start (docs/worker.md,
# Spares). It never costs the report.
try:
    spare_s = float(os.environ.get(SPARES_ENV) or 0)
    if spare_s and os.environ.get(WORKFLOW_ENV):
        leave_spares(os.environ[WORKFLOW_ENV], spare_s)
except (OSError, ValueError) as err:
    print(f"fabench report: the workers were not asked for their spares ({err})", file=sys.stderr)


def side_file(path, kind):
    """A side file checked (fabench.side_files); one that fails is left out, said in the
    log and on the terminal: it never costs the run's report."""
    value, note = side_file_or_note(path, kind)
    if note:
        for stream in (sys.stderr, sys.__stderr__):
            print(f"fabench report: {note}", file=stream, flush=True)
    return value


# A cell's process files lie in the folder named as its result: results/<run>/<variant>/<shape>/.
processes = {}
for path in map(Path, sm.input.processes):
    processes.setdefault(path.parent, []).append(path)
for cell in sm.output.cells:
    try:
        merged = merge_files(processes[Path(cell).with_suffix("")])
    except ProcessFileError as err:
        sys.exit(f"fabench merge of {cell}: {err}")
    write_json(cell, merged)
try:
    collected = collect(sm.output.cells, sm.params.variants, result_schema(sm.params.schema),
                        expected=sm.params.expected)
except ResultError as err:
    sys.exit(f"fabench collect: {err}")
# The compile ahead before the measuring processes (checkpoint compile_ahead), for the report's time line;
# one that compiled nothing (`skipped`: why) leaves the time line as a run without one.
ahead = side_file(sm.input.compile_ahead, COMPILE_AHEAD)
if ahead and "skipped" not in ahead:
    collected["compile_ahead"] = ahead
published = load_published(sm.input.published) if sm.input.published else None
# The report's findings as data (schemas/run_summary.schema.json), for scripts that read results.json.
collected["summary"] = run_summary(collected, dict(sm.params.config), published)
write_json(sm.output.json, collected)
write_atomic(sm.output.csv, results_csv(collected))
collected = json.loads(Path(sm.output.json).read_text())  # the plots and the report read what was written

# latency.png, speedup.png and roofline.png, the outputs declared in rule write_report's plots folder
write_run_plots(collected, Path(sm.output.latency).parent, Rule.of({"comparison": sm.params.rule}))

write_json(sm.output.config, dict(sm.params.config))
here = Path(sm.output.markdown).parent
figures = run_figures(collected)  # paths under the run's folder, where report.md is
try:  # the tuning sweep's record (fabench.tune.pick): unreadable, its section is left out with a note
    sweep = read_json(sm.input.sweep) if sm.input.sweep else None
except (OSError, JsonReadError) as err:
    sweep = None
    for stream in (sys.stderr, sys.__stderr__):
        print(f"fabench report: {sm.input.sweep}: {err}; the sweep's section is left out", file=stream, flush=True)
if sweep is not None and not isinstance(sweep, dict):
    sweep = None
started = side_file(sm.params.workflow_started, WORKFLOW_STARTED)  # written when this workflow started (onstart)
started_at = started["started_at"] if started else None
markdown = render(collected, dict(sm.params.config), published, Path(sm.params.template_dir), figures, sweep,
                  started_at)
write_atomic(sm.output.markdown, markdown)
write_atomic(sm.output.html, markdown_page(markdown, here, f"Run {collected['run']}"))
# Last: what was written, so that a file changed since is noticed (fabench.results.output_digests).
record_digests([path for path in sm.output if path != sm.output.digests], sm.output.digests)
