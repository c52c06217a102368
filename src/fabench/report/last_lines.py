"""The lines a workflow ends with (the Snakefile's onsuccess): for each run whose report this
invocation rendered, the run's result in one line and where its report is; for a comparison it
wrote, compare's result line (fabench.report.compare_outputs.result_line) and where its page is.
Snakemake's own last line says only how many steps ran.

A file counts as this invocation's when it was written after the workflow started (plan.started_at):
a target that rendered nothing ("Nothing to be done") adds no line.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Iterable

from fabench.report.compare_outputs import result_line

COMPARISON = Path("compare")
# A summary line's own markup, dropped for the terminal: bold, links to the report's sections, escapes.
LINK = re.compile(r"\s*\[[^\]]*\]\(#[^)]*\)")
ESCAPE = re.compile(r"\\(.)")


def written_since(path: Path, started_at: float) -> bool:
    return path.is_file() and path.stat().st_mtime >= started_at


def first_summary_line(report: str) -> str | None:
    """The report's first summary answer (the fastest backend), as plain text."""
    block = report.split("### Summary", 1)[1] if "### Summary" in report else ""
    line = next((line for line in block.splitlines() if line.startswith("- ")), None)
    if line is None:
        return None
    return ESCAPE.sub(r"\1", LINK.sub("", line[2:]).replace("**", "")).rstrip(".")


def run_line(run_dir: Path) -> str:
    collected = json.loads((run_dir / "results.json").read_text())
    statuses = Counter(b["status"] for r in collected["results"] for b in r["backends"].values())
    cells = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items()))
    headline = first_summary_line((run_dir / "report.md").read_text())
    return (f"run {run_dir.name}: {len(collected['results'])} jobs, cells {cells}"
            + (f"; {headline}" if headline else "") + f"; report: {run_dir / 'report.md'} ({run_dir / 'report.html'})")


def finished_lines(runs: Iterable[str], started_at: float, results_root: Path = Path("results"),
                   comparison: Path = COMPARISON) -> list[str]:
    lines = []
    for run in runs:
        run_dir = results_root / run
        if written_since(run_dir / "report.md", started_at) and (run_dir / "results.json").is_file():
            lines.append(run_line(run_dir))
    data = comparison / "compare.json"
    if written_since(data, started_at):
        lines.append(f"compare: {result_line(json.loads(data.read_text()))}; "
                     f"see {comparison / 'compare.md'} ({comparison / 'compare.html'})")
    return lines
