"""The kernels' own time, confirmed by an independent clock: `cross_check.kernel_time`.

The device figure is the kernels' own durations per call, read by CUPTI (torch.profiler) from a
fed stream. The second method shares nothing with it but the kernels: CUDA/HIP graphs of
[L2 clear, call] x N and of [L2 clear] x N, replayed and timed by events; the difference per call
is the call's kernels plus the launch gap the graph puts before each of them, with no host, no
profiler and no sleep in it (fabench.measure.device.graph_time.graph_kernel_time). The two agree when

    -noise - gap <= graph / cupti - 1 <= gaps + noise      (the kernel's time the unit)

noise: both methods' measured noise, stated part by part: half the spread of the CUPTI figure's
  trial figures (its repeatability over the trials), the graph figure's standard error over its
  replays doubled (about a 95% bound) plus half the spread of its per-process medians (where
  several processes took graphs), and the events' resolution (0.5 us at each end of two replays)
  per call;
gaps: what the graph cannot remove and CUPTI does not count, one launch gap per kernel of the
  call, each bounded by the measured time per kernel of a graph of one-element kernels (gap_ms);
gap (below): one such gap the other way: the L2 clear before a call runs after the previous call's
  writes in the first graph but after another clear's in the second, and CUPTI frames each kernel
  with timestamps of its own; on an H100 small cells read up to 1.5 us below CUPTI's sum (one gap
  measured 1.5 us there).

The CUPTI side is the trials of the processes whose graphs were taken: every process's, unless a
capture failed in one, whose trials then stay out, so that the two figures come from the same
processes and a process effect moves both alike.

`half_width` is the check's power: the larger side of its tolerance; above JUDGE_BOUND (5%) the
check could not tell a 5% error from agreement and says "could not judge" (agrees null). A
disagreement reaches the claims on that cell (fabench.analysis.claims: `checked: differs`) and the
summary counts them.

`agrees` is null, with the reason, where the graphs were not taken (a CPU, a call that cannot be
captured, no kernel-time samples) or the captured call ran other kernels than the eager one
(a library may choose another algorithm under capture: then the graphs time other code). Results
measured before this check have no record: None.
"""

from __future__ import annotations

import math
import statistics

from fabench.analysis import stats
from fabench.analysis.result_types import Trial
from fabench.measure.record import EVENT_RESOLUTION_MS, KERNEL_TIME_METHOD

# The widest tolerance (either side, relative to the kernels' time) at which the check still judges:
# wider, it could not tell a 5% error in the figure from agreement (disturbed H100 runs reached
# +-173%, where a graph 129% above CUPTI "agreed"): "could not judge", with its half-width.
JUDGE_BOUND = 0.05


def graph_records(trials: list[dict]) -> list[dict]:
    return [dict(t.kernel_time_graph) | {"process": t.process} for t in map(Trial.of, trials) if t.kernel_time_graph]


def kernel_time_check(trials: list[dict], bound: float = JUDGE_BOUND) -> dict | None:
    """The verdict of the graph method on the cell's CUPTI figure; None where no trial recorded it
    (a CPU, or a result measured before the check existed). `bound`: the widest half-width at which
    it judges (JUDGE_BOUND; the tests of the agreement rule alone lift it)."""
    records = graph_records(trials)
    if not records:
        return None
    taken = [r for r in records if r.get("per_call_ms")]
    typed = _graphed_processes_trials(trials, taken or records)
    cupti = [stats.trial_figure(t.kernel_samples_ms) for t in typed if t.kernel_samples_ms]
    why = _not_comparable(records, taken, cupti, typed)
    if why:
        return _no_verdict(why)
    per_call = [v for r in taken for v in r["per_call_ms"]]
    figure, graph = stats.median(cupti), stats.median(per_call)
    if figure <= 0 or graph <= 0:
        return _no_verdict(f"graph figure {graph:.4f} ms is not a time (its replays differ by more than the call)")
    calls = min(r["calls"] for r in taken)
    noise = _noise(taken, per_call, cupti, figure, graph, calls)
    gap_ms = stats.median([r["gap_ms"] for r in taken])
    kernels = max(r.get("kernels_per_call") or 1 for r in taken)
    gaps = kernels * gap_ms / figure
    low, high = -(sum(noise.values()) + gap_ms / figure), gaps + sum(noise.values())
    difference = graph / figure - 1.0
    half_width = max(-low, high)  # the check's power: an error in the figure below this passes unseen
    agrees = (low <= difference <= high) if half_width <= bound else None
    out = {"method": KERNEL_TIME_METHOD, "graph_ms": round(graph, 6), "kernel_ms": round(figure, 6),
           "difference": round(difference, 6), "tolerance": {"low": round(low, 6), "high": round(high, 6)},
           "tolerance_parts": {**{k: round(v, 6) for k, v in noise.items()}, "gaps": round(gaps, 6),
                               "gap_below": round(gap_ms / figure, 6)},
           "gap_ms": gap_ms, "kernels_per_call": kernels, "calls_per_graph": calls,
           "replays": len(per_call), "half_width": round(half_width, 6), "agrees": agrees, "reason": None}
    out["reason"] = _reason(agrees, bound, {"low": low, "high": high, "difference": difference, "graph": graph,
                                            "figure": figure, "noise": sum(noise.values()), "kernels": kernels,
                                            "gap_ms": gap_ms})
    return out


def _graphed_processes_trials(trials: list[dict], records: list[dict]) -> list[Trial]:
    """The trials of the processes whose graphs are judged (all, unless a capture failed in one):
    against the same processes' trials, a process effect moves both figures alike."""
    graphed = {r["process"] for r in records}
    return [t for t in map(Trial.of, trials) if t.process in graphed]


def _reason(agrees: bool | None, bound: float, at: dict) -> str | None:
    """The check's words where it could not judge or disagrees (`at`: its figures, unrounded); None
    where it agrees."""
    if agrees is None:
        return (f"could not judge: its tolerance {at['low']:+.1%} to {at['high']:+.1%} is wider than "
                f"+-{bound:.0%} (graphs {at['difference']:+.1%} against CUPTI)")
    if not agrees:
        return (f"graphs {at['graph']:.4f} ms per call against CUPTI's {at['figure']:.4f} ms: {at['difference']:+.1%}, "
                f"outside {at['low']:+.1%} to {at['high']:+.1%} (noise {at['noise']:.1%}, "
                f"{at['kernels']} launch gap(s) of at most {at['gap_ms'] * 1000:.2f} us)")
    return None


def _not_comparable(records: list[dict], taken: list[dict], cupti: list[float], trials: list[Trial]) -> str | None:
    """Why the graphs' figure cannot be set against CUPTI's: no graph taken, no kernel-time
    samples, or other kernels under capture; None when it can."""
    if not taken:
        return f"graphs not taken: {records[0].get('error') or 'no record'}"
    if not cupti:
        return "no kernel-time samples to compare with"
    other = _other_kernels(taken, trials)
    if other:
        return f"under graph capture the call ran other kernels ({other}): the graphs timed other code"
    return None


def _noise(taken: list[dict], per_call: list[float], cupti: list[float], figure: float, graph: float,
           calls: int) -> dict[str, float]:
    """Both methods' measured noise, part by part, relative to the kernels' time (the module's text)."""
    by_process = [stats.median(r["per_call_ms"]) for r in taken]
    graph_se = statistics.stdev(per_call) / math.sqrt(len(per_call)) if len(per_call) > 1 else 0.0
    return {"cupti": stats.spread(cupti) / 2,
            "graph": 2 * graph_se / graph + (stats.spread(by_process) / 2 if len(by_process) > 1 else 0.0),
            "resolution": 4 * EVENT_RESOLUTION_MS / calls / figure}


def _other_kernels(taken: list[dict], trials: list[Trial]) -> str | None:
    """The captured call's kernels that the eager call's profiled streams never ran (and the other
    way round), named; None where they are the same or either side was not read."""
    eager = {name for t in trials for name in t.kernel_names}
    for record in taken:
        captured = set(record.get("device_work") or ())
        if eager and captured and captured != eager:
            added, missing = sorted(captured - eager), sorted(eager - captured)
            return "; ".join(filter(None, [f"ran {', '.join(n[:60] for n in added)}" if added else "",
                                           f"not {', '.join(n[:60] for n in missing)}" if missing else ""]))
    return None


def _no_verdict(reason: str) -> dict:
    return {"method": KERNEL_TIME_METHOD, "agrees": None, "reason": f"could not judge: {reason}"}
