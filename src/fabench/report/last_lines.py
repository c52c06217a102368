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

from fabench.analysis.result_types import backend_dicts

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


def findings_words(summary: dict) -> str | None:
    """The run's findings (results.json's `summary`, fabench.report.findings) in a few words: the
    backend fastest by its median at the most shapes of the last variant, how many of those the
    policy judged faster than the next, and how many of the report's questions the run decided."""
    items = [f for f in summary["fastest"] if f["fastest"]]
    if not items:
        return None
    last = [f for f in items if f["variant"] == items[-1]["variant"]]
    name, count = Counter(f["fastest"] for f in last).most_common(1)[0]
    judged = sum(1 for f in last if f["fastest"] == name and f["verdict"] == "faster")
    decided = summary["decided"]
    return (f"fastest by its median: {name} at {count} of {len(last)} shapes in {last[0]['variant']}'s table, "
            f"{judged} judged ahead beyond the noise; decided {decided['answered']} of {decided['asked']} questions")


def run_line(run_dir: Path) -> str:
    """The run in one line: its jobs, cells by status, its findings (from results.json's summary;
    for results written before it, the report's first summary answer) and its report's path."""
    collected = json.loads((run_dir / "results.json").read_text())
    statuses = Counter(b["status"] for r in collected["results"] for b in backend_dicts(r).values())
    cells = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items()))
    summary = collected.get("summary")
    headline = (findings_words(summary) if summary else None) or first_summary_line((run_dir / "report.md").read_text())
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
        # Imported only here: compare_outputs draws (matplotlib), 1.2 s of imports on the CPU host in
        # the workflow's own process after a run's report, which has no comparison to say.
        from fabench.report.compare_outputs import result_line

        lines.append(f"compare: {result_line(json.loads(data.read_text()))}; "
                     f"see {comparison / 'compare.md'} ({comparison / 'compare.html'})")
    return lines
