"""Where the run's time went: the measuring processes' phases summed by kind of work
(fabench.analysis.timeline), the span of the measure jobs and, when the workflow's start was
recorded, the time from Snakemake's start to this report. None for results without time lines."""

from __future__ import annotations

import time

from fabench.analysis.timeline import run_time_line
from fabench.report.format import md_text
from fabench.report.model import Run


def seconds(value: float | None) -> str | None:
    return None if value is None else f"{value:.1f} s"


def context(run: Run, published: dict | None) -> dict | None:
    line = run_time_line(run.results, run.started_at, time.time() if run.started_at else None)
    if line is None:
        return None
    total = line["in_processes_s"]
    return {
        "processes": line["processes"],
        "in_processes": seconds(total),
        "measuring": seconds(line["measuring_s"]),
        "measuring_share": f"{line['measuring_s'] / total:.0%}" if total else "n/a",
        "rows": [[md_text(g["group"]), f"{g['seconds']:.1f}", f"{g['share']:.0%}"] for g in line["groups"]],
        "phases": [[md_text(name), f"{value:.1f}"] for name, value in line["phases"].items()],
        "measure_span": seconds(line["measure_span_s"]),
        "workflow": seconds(line["workflow_s"]),
        "before_first_process": seconds(line["before_first_process_s"]),
        "measured_before_workflow": line["measured_before_workflow"],
        "earlier_processes": line["earlier_processes"],
        "gpus": len(line["gpus"]),
        "workers": line["workers"],
        "in_workers": line["in_workers"],
        "overlaps": [md_text(o) for o in line["overlaps"]],
    }
