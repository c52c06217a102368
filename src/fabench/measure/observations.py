"""What a measuring process observes beyond the trials, as coded items: `{"kind": ..., values}`.

The measuring process records these in a backend entry's `observations.notes`; the analysis
(fabench.analysis.entry) decides what each kind doubts and fabench.analysis.verdict_text writes
its words. The kinds live here, on the measuring side, so that the analysis imports them and the
measuring process never imports the analysis. Results from before the kinds were recorded hold
English notes; fabench.analysis.legacy reads those back into these kinds.
"""

from __future__ import annotations

from enum import StrEnum


class Kind(StrEnum):
    WARMUP_UNSETTLED = "warmup_unsettled"  # {process, trial, max_warmup_ms}: the warm-up never settled
    NO_KERNEL_TIME = "no_kernel_time"  # {process, trial, why}: the profiler's trace could not be read
    KERNELS_DIFFER = "kernels_differ"  # {processes: [{process, names, source_sha256, launch}]}: by the merge
    NOTE = "note"  # {text}: an older result's note no kind fits (legacy only)


def warmup_unsettled(process: int, trial: int, max_warmup_ms: float) -> dict:
    return {"kind": Kind.WARMUP_UNSETTLED.value, "process": process, "trial": trial, "max_warmup_ms": max_warmup_ms}


def no_kernel_time(process: int, trial: int, why: str) -> dict:
    return {"kind": Kind.NO_KERNEL_TIME.value, "process": process, "trial": trial, "why": why}


def kernels_differ(processes: list[dict]) -> dict:
    return {"kind": Kind.KERNELS_DIFFER.value, "processes": processes}
