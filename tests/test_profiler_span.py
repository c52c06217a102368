"""The profiler check's figure from a trace: each call's kernels told apart by position, the span
from its first kernel's start to its last one's end (gaps included). No GPU needed: the trace
events are as torch.profiler's chrome trace holds them (ts and dur in microseconds)."""

from __future__ import annotations

from fabench.measure.kernels import spans_from_trace


def kernel(ts, dur):
    return {"ts": ts, "dur": dur}


def trace(calls, per_call, cleared=True, gap=2.0):
    events, now = [kernel(0, 500)], 500.0  # the sleep the calls are queued behind
    for call in range(calls):
        if cleared:
            events.append(kernel(now, 40))  # the L2 clear
            now += 40
        for _ in range(per_call):
            events.append(kernel(now, 10 + call))
            now += 10 + call + gap
    return events


def test_each_calls_span_counts_the_gaps_between_its_kernels_and_not_the_l2_clear():
    # Three kernels of 10 us with 2 us gaps: 10 + 2 + 10 + 2 + 10 = 34 us; calls grow by 3 us each.
    spans, why_not = spans_from_trace(trace(5, 3), 5, 3, cleared=True)
    assert why_not is None and [round(s * 1000, 6) for s in spans] == [34, 37, 40, 43, 46]


def test_without_l2_clear_the_calls_follow_the_sleep_directly():
    spans, why_not = spans_from_trace(trace(4, 1, cleared=False), 4, 1, cleared=False)
    assert why_not is None and [round(s * 1000, 6) for s in spans] == [10, 11, 12, 13]


def test_a_trace_of_another_length_is_not_read():
    value, why_not = spans_from_trace(trace(5, 3)[:-1], 5, 3, cleared=True)
    assert value is None and "holds 20 kernels, not the 21 expected" in why_not
