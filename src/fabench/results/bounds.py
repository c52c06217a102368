"""What a number in a result or in the published numbers can be: the one definition every reader
applies (collect, merge, the archive's store and read, the published file, the CSV), after the
finite-number check of fabench.files.

A finite number can still be no measurement: a trial of 1e308 ms, a time of 1e-300 ms or below
zero, a median of 10^200 ms. Such a value would be archived, printed with hundreds of digits, and
turned into an infinity by the figures derived from it (a speedup, TFLOP/s). Each field is bounded
by what it measures, known by its name as the result schema and the published schema spell it:

- a time in ms (a key `ms` or ending in `_ms`, the figures of a dict so named, the published
  times of each backend): 0, or from MIN_MS to MAX_MS; a difference of two times
  (SIGNED_MS) may be negative, as large;
- a duration in seconds (a key ending in `_s`): 0 to MAX_SECONDS;
- a ratio of two times (RATIOS): 0 to MAX_RATIO, what two bounded times can give;
- a count or an index (COUNTS): a whole number, not negative;
- any other number: at most MAX_MAGNITUDE either way (a FLOP count, a Unix time, a seed).

A field out of its bound is one line naming it (its JSON path) and the bound, in the form the
finite-number check uses, so that every reader reports it as it reports a NaN.
"""

from __future__ import annotations

from fabench.measure.record import MAX_MS, MIN_MS  # the longest and the shortest time a figure can be
MAX_SECONDS = 1e7  # a compile, a wait for a GPU lease: about 4 months
MAX_RATIO = MAX_MS / MIN_MS
MAX_MAGNITUDE = float(2**64)  # what 64 bits count: a seed, a FLOP count, a Unix time all fit
# A difference of two times: what launching adds per call; a graph replay with its calls minus one
# without them, per call (fabench.measure.device.graph_time.graph_kernel_time), which noise can take below zero.
SIGNED_MS = frozenset({"host_overhead_ms", "per_call_ms"})
RATIOS = frozenset({"speedup", "spread"})
COUNTS = frozenset({"n", "iters", "warmup", "warmup_iters", "repeats", "trials", "index", "position", "process",
                    "cells", "df", "replicates", "device_count", "jobs", "number", "profiled_restreams", "chunks",
                    "unfed_chunks", "chunk_calls", "calls", "replays", "kernels_per_call"})
# The figures of a dict named for a time (device_ms: {median, p10, ...}; stats.<metric>: {...}).
TIME_FIGURES = frozenset({"mean", "median", "p10", "p90", "min", "max", "ci95", "pi95", "process_medians"})


def _short(value) -> str:
    """A number as an error line shows it: as Python writes it, unless that takes more than a few
    digits (an integer of 200 digits), then to 6 significant digits."""
    text = repr(value)
    if len(text) <= 24:
        return text
    try:
        return format(value, ".6g")
    except OverflowError:  # an integer beyond any float
        return f"an integer of {len(str(abs(value)))} digits"


def _kind(keys: list[str]) -> str:
    """What the number at a path of these keys is: ms, signed_ms, seconds, ratio, count or number."""
    last = keys[-1] if keys else ""
    parent = keys[-2] if len(keys) > 1 else ""
    if last in RATIOS or parent == "speedup":
        return "ratio"
    if last in COUNTS:
        return "count"
    if last in SIGNED_MS:
        return "signed_ms"
    if last == "ms" or last.endswith("_ms") or parent == "ms" or (parent.endswith("_ms") and last in TIME_FIGURES):
        return "ms"
    if last.endswith("_s"):
        return "seconds"
    return "number"


def _problem(value, kind: str) -> str | None:
    """Why `value` cannot be a number of this kind, or None."""
    if kind == "ms" and not (value == 0 or MIN_MS <= value <= MAX_MS):
        return f"{_short(value)} ms is not a time a measurement can take (0, or {MIN_MS:g} to {MAX_MS:g} ms)"
    if kind == "signed_ms" and not abs(value) <= MAX_MS:
        return f"{_short(value)} ms is not a difference of two times (at most {MAX_MS:g} ms either way)"
    if kind == "seconds" and not 0 <= value <= MAX_SECONDS:
        return f"{_short(value)} s is not a duration (0 to {MAX_SECONDS:g} s)"
    if kind == "ratio" and not 0 <= value <= MAX_RATIO:
        return f"{_short(value)} is not a ratio of two times (0 to {MAX_RATIO:g})"
    if kind == "count" and not (value >= 0 and (isinstance(value, int) or value.is_integer())):
        return f"{_short(value)} is not a count (a whole number, not negative)"
    if not abs(value) <= MAX_MAGNITUDE:
        return f"{_short(value)} is beyond any measurement (at most {MAX_MAGNITUDE:.3g} either way)"
    return None


def bounds_problem(value: object) -> str | None:
    """The first number of a decoded result or published file outside what it can measure, as
    "<JSON path>: why"; None when there is none. Walked without recursion, as json_problem is."""
    pending = [(value, "$", [])]
    while pending:
        item, where, keys = pending.pop()
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            problem = _problem(item, _kind(keys))
            if problem:
                return f"{where}: {problem}"
        elif isinstance(item, dict):
            pending += [(v, f"{where}.{k}", [*keys, str(k)]) for k, v in reversed(list(item.items()))]
        elif isinstance(item, list):
            pending += [(v, f"{where}[{i}]", keys) for i, v in reversed(list(enumerate(item)))]
    return None
