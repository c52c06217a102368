"""Where the run's time went: the measuring processes' phases summed by kind of work
(fabench.report.wall_clock), how many jobs and processes and workers measured, the span of the
measure jobs, why the GPU trials stopped, the setting that would cut the largest kind of work and,
when the workflow's start was recorded, the time Snakemake spent before the first measuring process
and after the last one. None for results without time lines."""

from __future__ import annotations

from fabench.report.wall_clock import run_time_line
from fabench.report.format import md_text
from fabench.report.model import Run

# How a kind of work is named in the table where the words differ by platform: on a CPU the
# warm-up is the checked first call (fabench.report.wall_clock).
CPU_LABELS = {"measuring: warm-up": "measuring: warm-up (the checked first call)"}


def seconds(value: float | None) -> str | None:
    return None if value is None else f"{value:.1f} s"


def label(group: str, cpu: bool) -> str:
    return md_text(CPU_LABELS.get(group, group) if cpu else group)


def time_line(run: Run) -> dict | None:
    """The run's time line (fabench.report.wall_clock.run_time_line), up to the report's rendering
    when the workflow rendering it recorded its start."""
    return run_time_line(run.results, run.started_at, run.rendered_at, run.compile_ahead)


def context(run: Run, published: dict | None) -> dict | None:
    line = time_line(run)
    if line is None:
        return None
    total = line["in_processes_s"]
    largest = line["largest"]
    between = line["between_jobs"]
    ahead = line["compile_ahead"]
    return {
        "jobs": line["jobs"],
        "processes": line["processes"],
        "cpu": line["cpu"],
        "in_processes": seconds(total),
        "measuring": seconds(line["measuring_s"]),
        "measuring_share": f"{line['measuring_s'] / total:.0%}" if total else "n/a",
        "rows": [[label(g["group"], line["cpu"]), f"{g['seconds']:.1f}", f"{g['share']:.0%}"] for g in line["groups"]],
        "phases": [[md_text(name), f"{value:.1f}"] for name, value in line["phases"].items()],
        "measure_span": seconds(line["measure_span_s"]),
        # Shown from a tenth of a second: below it the phases' own boundaries, not a wait.
        "workers_waiting": seconds(line["workers_waiting_s"]) if line["workers_waiting_s"] >= 0.1 else None,
        "workflow": seconds(line["workflow_s"]),
        "before_first_process": seconds(line["before_first_process_s"]),
        "before_compile_ahead": seconds(line["before_compile_ahead_s"]),
        "after_compile_ahead": seconds(line["after_compile_ahead_s"]),
        "after_last_process": seconds(line["after_last_process_s"]),
        "measured_before_workflow": line["measured_before_workflow"],
        "earlier_processes": line["earlier_processes"],
        "gpus": len(line["gpus"]),
        "workers": line["workers"],
        "in_workers": line["in_workers"],
        "adopted_workers": line.get("adopted_workers", 0),
        "overlaps": [md_text(o) for o in line["overlaps"]],
        "between": between and {"gaps": between["gaps"], "seconds": seconds(between["seconds"]),
                                "split": between["split"], "before_launcher": seconds(between["before_launcher_s"]),
                                "launcher": seconds(between["launcher_s"]),
                                "to_measuring": seconds(between["to_measuring_s"]), "ready": between["ready"],
                                "recorded": between["split"] + between["ready"],
                                "ready_to_lease": seconds(between["ready_to_lease_s"]),
                                "ready_to_measuring": seconds(between["ready_to_measuring_s"])},
        # Workers start beside the compile ahead in worker mode on a GPU only (its record says how many).
        "compile_ahead": ahead and {**ahead, "seconds": seconds(ahead["seconds"]),
                                    "workers_started": (run.compile_ahead or {}).get("workers_started", 0)},
        "stops": line["trial_stops"],
        "largest": largest and {"group": largest["group"], "label": label(largest["group"], line["cpu"]),
                                "seconds": seconds(largest["seconds"]), "share": f"{largest['share']:.0%}",
                                "setting": largest["setting"]},
    }
