# The collected run rendered as the published report's Markdown. Rule render_report.
import json
import sys
from pathlib import Path

from fabench.files import write_atomic
from fabench.report.html import markdown_page
from fabench.results.published import load_published
from fabench.report.render import render
from fabench.report.roofline_plot import has_roofline

sys.stderr = open(snakemake.log[0], "w")
collected = json.loads(Path(snakemake.input.results).read_text())
published = load_published(snakemake.input.published) if snakemake.input.published else None
template_dir = Path(snakemake.params.template_dir)
here = Path(snakemake.output.markdown).parent
titles = ["Latency against sequence length", "Speedup over native"]
if has_roofline(collected):  # a run without its GPU's limits (a CPU) shows no roofline
    titles.append("Roofline: each cell against the GPU's limits")
figures = [(title, Path(path).relative_to(here).as_posix()) for title, path in zip(titles, snakemake.input.plots)]
sweep = json.loads(Path(snakemake.input.sweep).read_text()) if snakemake.input.sweep else None
started = Path(snakemake.params.workflow_started)  # written when this workflow started (onstart)
started_at = json.loads(started.read_text())["started_at"] if started.is_file() else None
markdown = render(collected, dict(snakemake.params.config), published, template_dir, figures, sweep, started_at)
write_atomic(snakemake.output.markdown, markdown)
write_atomic(snakemake.output.html, markdown_page(markdown, here, f"Run {collected['run']}"))
