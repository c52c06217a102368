"""rule write_report: the run's process files -> each (variant, shape)'s result, results.json and
.csv, the plots, report.md and .html, config.json; in one process (see workflow/rules/report.smk)."""
import json
import sys
from pathlib import Path

from fabench.analysis.policy import Rule
from fabench.files import write_atomic, write_json
from fabench.report.findings import run_summary
from fabench.report.html import markdown_page
from fabench.report.plots import run_figures, write_run_plots
from fabench.report.render import render
from fabench.results.collect import ResultError, collect, result_schema
from fabench.results.merge import ProcessFileError, merge_files
from fabench.results.published import load_published
from fabench.results.results_csv import results_csv

sm = snakemake  # noqa: F821
sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
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
# The compile ahead before the measuring processes (Snakefile onstart), for the report's time line.
ahead = Path(sm.params.compile_ahead)
if ahead.is_file():
    collected["compile_ahead"] = json.loads(ahead.read_text())
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
sweep = json.loads(Path(sm.input.sweep).read_text()) if sm.input.sweep else None
started = Path(sm.params.workflow_started)  # written when this workflow started (onstart)
started_at = json.loads(started.read_text())["started_at"] if started.is_file() else None
markdown = render(collected, dict(sm.params.config), published, Path(sm.params.template_dir), figures, sweep,
                  started_at)
write_atomic(sm.output.markdown, markdown)
write_atomic(sm.output.html, markdown_page(markdown, here, f"Run {collected['run']}"))
