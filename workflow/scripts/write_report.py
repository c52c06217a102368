"""rule write_report: the run's process files -> each (variant, shape)'s result, results.json and
.csv, the plots, report.md and .html, config.json; in one process (see workflow/rules/report.smk)."""
import json
import sys
from pathlib import Path

from fabench.analysis.policy import Rule
from fabench.files import write_atomic, write_json
from fabench.report.html import markdown_page
from fabench.report.latency_plot import latency_png
from fabench.report.render import render
from fabench.report.roofline_plot import has_roofline, roofline_png
from fabench.report.speedup_plot import speedup_png
from fabench.results.collect import ResultError, collect, result_schema
from fabench.results.merge import ProcessFileError, merge_files
from fabench.results.published import load_published
from fabench.results.results_csv import results_csv
from fabench.results.shared import shown

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
write_json(sm.output.json, collected)
write_atomic(sm.output.csv, results_csv(collected))
collected = json.loads(Path(sm.output.json).read_text())  # the plots and the report read what was written

shown_cells = shown(collected)  # backends measured once per shape appear in every variant's lines
write_atomic(sm.output.latency, latency_png(shown_cells))
write_atomic(sm.output.speedup, speedup_png(shown_cells, Rule.of({"comparison": sm.params.rule})))
write_atomic(sm.output.roofline, roofline_png(shown_cells))
plots = [sm.output.latency, sm.output.speedup, sm.output.roofline]

write_json(sm.output.config, dict(sm.params.config))
published = load_published(sm.input.published) if sm.input.published else None
here = Path(sm.output.markdown).parent
titles = ["Latency against sequence length", "Speedup over native"]
if has_roofline(collected):  # a run without its GPU's limits (a CPU) shows no roofline
    titles.append("Roofline: each cell against the GPU's limits")
figures = [(title, Path(path).relative_to(here).as_posix()) for title, path in zip(titles, plots)]
sweep = json.loads(Path(sm.input.sweep).read_text()) if sm.input.sweep else None
started = Path(sm.params.workflow_started)  # written when this workflow started (onstart)
started_at = json.loads(started.read_text())["started_at"] if started.is_file() else None
markdown = render(collected, dict(sm.params.config), published, Path(sm.params.template_dir), figures, sweep,
                  started_at)
write_atomic(sm.output.markdown, markdown)
write_atomic(sm.output.html, markdown_page(markdown, here, f"Run {collected['run']}"))
