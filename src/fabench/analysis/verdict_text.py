"""The words for the comparison policy's verdicts (fabench.analysis.policy.judge), by reason code.

The policy decides and returns codes and values; this module is where they become English, so
that the callers (compare's outputs, the report's claims) share one wording and no caller reads
another's sentences back. `reason` says why without the change itself; `why` leads with the
change ("+2.10% device time (90% interval ..)"), as a comparison between runs states it.
"""

from __future__ import annotations

from fabench.analysis.figures import METRICS
from fabench.analysis.policy import Code
from fabench.analysis.legacy import KERNELS_NOTE
from fabench.measure.observations import Kind


def observation_text(item: dict) -> str:
    """A measuring process's observation (fabench.measure.observations) in words; an older result's
    note keeps the words it was recorded in (`text`)."""
    if item.get("text"):
        return item["text"]
    kind = item["kind"]
    if kind == Kind.WARMUP_UNSETTLED:
        return f"process {item['process']} trial {item['trial']}: warm-up did not settle within {item['max_warmup_ms']} ms"
    if kind == Kind.NO_KERNEL_TIME:
        return f"process {item['process']} trial {item['trial']}: no kernel time: {item['why']}"
    if kind == Kind.KERNELS_DIFFER:
        return KERNELS_NOTE + "; ".join(
            f"process {p['process']}: {', '.join(p['names'])} (source sha256 {str(p.get('source_sha256'))[:12]}, "
            f"launch {p.get('launch')})" for p in item["processes"])
    return f"{kind}: {', '.join(f'{k}={v}' for k, v in item.items() if k != 'kind')}"

# Why a run of one process per job (a CPU run) supports no verdict between runs, in every caller's words.
ONE_PROCESS_WHY = "one process per job: the noise between processes is not estimated"


def not_ok_text(entry: dict) -> str:
    """A status as `status (failure kind): reason`; `entry` is a backend entry or policy.status_of's values."""
    kind = f" ({entry['failure_kind']})" if entry.get("failure_kind") else ""
    return f"{entry['status']}{kind}: {entry.get('reason') or 'no reason recorded'}"


def change_text(verdict: dict) -> str | None:
    """The change and its interval: "+2.10% device time (90% interval +1.20% .. +3.00%)"; None without a ratio."""
    if verdict.get("ratio") is None:
        return None
    text = f"{verdict['ratio'] - 1:+.2%} {METRICS[verdict['metric']]}"
    low_high, level = verdict.get("interval"), verdict["values"].get("level")
    if low_high and level:
        text += f" ({level:.0%} interval {low_high[0] - 1:+.2%} .. {low_high[1] - 1:+.2%})"
    return text


def _status_reason(code: Code, values: dict) -> str | None:
    """The words of a change of status (the backend ran in one run only), None for a change in time."""
    old, new, runs = values.get("old"), values.get("new"), values["runs"]
    if old is None or new is None:
        return None
    if code == Code.NOT_OK:
        return f"{new['status']} in both"
    if code == Code.OTHER_HARDWARE:
        moved = f"{'ok' if old['status'] == 'ok' else old['status']} -> {'ok' if new['status'] == 'ok' else new['status']}"
        return f"{moved}, but the hardware changed ({' -> '.join(values['hardware'])})"
    if code == Code.REGRESSION:
        return f"was ok in {runs[0]}, now {not_ok_text(new)}"
    if code == Code.NOW_AVAILABLE:
        return f"runs now (was {not_ok_text(old)} in {runs[0]})"
    return f"runs again (was {not_ok_text(old)} in {runs[0]})"


def paired_text(values: dict) -> str:
    """The paired test's evidence (within_run.paired): its processes and trials, the p where it was computed."""
    found = values["paired"]
    side = (f"all {found['trials']} paired trials on this side" if found["consistent"] == found["trials"] else
            f"{found['consistent']} of {found['trials']} paired trials on this side")
    if found.get("p") is None:
        return f"{side}, in {found['processes']} process(es)"
    prior = found["df"] - (found["processes"] - 1)
    pooled = (f", its variance moderated by the nearest in duration of the run's {found['pooled_pairs']} pairs "
              f"(a prior of {prior} df)" if found.get("pooled_pairs") and prior else "")
    runs = (f"with a run's own shift of {found['between_runs']:.2%} a cell (calibrated)" if found.get("between_runs")
            else "in this run (no calibrated shift between runs is included)")
    return (f"paired test over {found['processes']} processes ({side}{pooled}) {runs}: p = {found['p']:.2g} "
            f"(Student t, {found['df']} df: process effects on a ratio taken as normal)")


def one_process_paired(values: dict) -> str:
    """Two backends of one job measured in one process: what their paired trials show, and why no test."""
    found = values["paired"]
    shown = (f"every one of {found['trials']} paired trials on this side, by {found['least']:.2f}x at least"
             if found.get("least") else f"{found['consistent']} of {found['trials']} paired trials on this side")
    return f"{shown}, but all in one process: {ONE_PROCESS_WHY}, so no test ({REPEATS_SETTING} gives one)"


# The setting that runs each job in two processes, which the paired test needs (a CPU host's default is one).
REPEATS_SETTING = "two processes a job, `cpu: {repeats: 2}` on a CPU host"


def apart_text(apart: dict, rule) -> str:
    """within_run.processes_apart's finding in words."""
    return (f"every process median of the slower ({apart['processes']} processes) beyond every one of the faster, "
            f"by {apart['gap']:.1%} at least (more than the {rule.within_run_margin():.2%} margin; Welch t over process medians "
            f"p = {apart['p']:.2g}, {apart['df']:.1f} df), though trials of a cell spread beyond stable_spread")


def reason(verdict: dict) -> str:
    """Why the verdict is what it is, in words, without the change itself."""
    code, values = verdict["code"], verdict["values"]
    status = _status_reason(code, values)
    if status:
        return status
    if "paired" in values:
        if code == Code.ONE_PROCESS:
            return one_process_paired(values)
        if code != Code.UNSTABLE:
            return f"{_words(code, values)}; {paired_text(values)}"
    return _words(code, values)


def _words(code: Code, values: dict) -> str:
    margin = f"the {values['margin']:.2%} margin" if "margin" in values else "the margin"
    words = {
        Code.REGRESSION: lambda: f"beyond the noise and {margin}",
        Code.IMPROVEMENT: lambda: f"beyond the noise and {margin}",
        Code.SMALL_CHANGE: lambda: f"a real change, but within {margin}",
        Code.SAME: lambda: f"within the noise and {margin}",
        Code.NOISY: lambda: f"within the noise, which hides changes up to {values['hides']:.1%}, more than {margin}",
        Code.CLOCK: lambda: (f"only {values['cycles_ratio'] - 1:+.2%} in cycles (time x SM clock, "
                             f"{values['clock_mhz'][0]:.0f} -> {values['clock_mhz'][1]:.0f} MHz), so the clock "
                             f"moved, not the kernel's work"),
        Code.UNSTABLE: lambda: "trials unstable in " + "; ".join(
            f"{run}: {why or 'unstable'}" for run, why in values["unstable"].items()),
        Code.ONE_PROCESS: lambda: (f"{ONE_PROCESS_WHY} ({' and '.join(values['one_process'])}), and it is what "
                                   f"separates two runs"),
        Code.NO_INTERVAL: lambda: "no noise estimate in both runs",
        Code.NO_FIGURE: lambda: "no median recorded in both",
        Code.OTHER_HARDWARE: lambda: f"the hardware changed ({' -> '.join(values['hardware'])}): not a software change",
        Code.OTHER_CODE: lambda: "other code: " + ", ".join(values["differences"]),
        Code.OTHER_EXPERIMENT: lambda: "another experiment: " + "; ".join(values["differences"]),
        Code.MISSING: lambda: "not measured in both",
    }
    return words[Code(code)]()


def why(verdict: dict) -> str:
    """The verdict between two runs in words: the change (new against old) and why."""
    change = change_text(verdict)
    return f"{change}: {reason(verdict)}" if change else reason(verdict)
