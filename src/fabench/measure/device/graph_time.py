"""The kernels' own time per call by an independent method: CUDA/HIP graphs, timed by events.

A graph of [L2 clear, call] x N and a graph of [L2 clear] x N are replayed alternately; their
difference per call is the call's kernels plus the launch gap before each of them, with no host,
no profiler and no sleep in it. The analysis holds it against the CUPTI figure
(fabench.analysis.kernel_check, which states the tolerance and its parts).
"""

from __future__ import annotations

import math
import statistics
from typing import Callable

import torch

from fabench.measure.device.accelerator import Graph, here
from fabench.measure.device.timing import capture_graph

GRAPH_REPLAY_MS = 5.0  # each timed graph replay lasts about this long: long against the events' 0.5 us
GRAPH_MAX_CALLS = 50
GRAPH_MIN_CALLS = 2
GRAPH_REPLAYS = 5
GAP_KERNELS = 200
_gap_ms: float | None = None


def graph_calls(estimate_ms: float) -> int:
    """Calls per graph so that a replay lasts about GRAPH_REPLAY_MS (an L2 clear is ~0.1 ms)."""
    return max(GRAPH_MIN_CALLS, min(GRAPH_MAX_CALLS, math.ceil(GRAPH_REPLAY_MS / (estimate_ms + 0.1))))


def graph_kernel_time(fn: Callable[[], object], cache: torch.Tensor | None, calls: int,
                      names_of: Callable[[Callable[[], None]], list[str]] | None = None,
                      replays: int = GRAPH_REPLAYS) -> dict:
    """The kernels' own time per call by a method independent of CUPTI: the difference between a
    graph of [clear, call] x calls and a graph of [clear] x calls (each captured by
    timing.capture_graph, which warms it up and replays it once), replayed alternately `replays`
    times after one more untimed replay of each (a graph's first replays ran 2-10% slow on an H100),
    each replay timed by events. A graph launches its kernels back to back on the GPU,
    with no host between them, so what the difference holds beyond the call's kernels is the
    launch gap before each of them (gap_ms: the per-kernel time of a graph of tiny kernels, an
    upper bound of that gap). `names_of`, given, lists the device work of one replay (a profile
    taken after the timed replays): the kernels the captured call launched, which the analysis
    holds against the ones the cell identified. Raises what capture raises (the caller records it)."""
    def body(with_call: bool) -> Callable[[], None]:
        def run() -> None:
            for _ in range(calls):
                if cache is not None:
                    cache.zero_()
                if with_call:
                    fn()
        return run

    both = capture_graph(body(True))
    clears = capture_graph(body(False)) if cache is not None else None
    try:
        for graph in filter(None, (both, clears)):
            _replay_ms(graph)
        per_call = []
        for _ in range(replays):
            with_call = _replay_ms(both)
            per_call.append((with_call - (_replay_ms(clears) if clears is not None else 0.0)) / calls)
        names = names_of(both.replay) if names_of is not None else None
    finally:
        del both, clears
        here().synchronize()
    return {"per_call_ms": [round(v, 6) for v in per_call], "calls": calls, "replays": replays,
            "gap_ms": round(graph_launch_gap_ms(), 6), "device_work": names}


def _replay_ms(graph: Graph) -> float:
    start, end = here().event(), here().event()
    here().synchronize()
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def graph_launch_gap_ms() -> float:
    """The time per kernel of a graph of GAP_KERNELS one-element kernels (measured once per
    process): the launch gap between consecutive kernels of a graph plus the shortest kernel's own
    duration, so an upper bound of the gap a graph puts before each kernel of a call."""
    global _gap_ms
    if _gap_ms is None:
        x = torch.zeros(1, device=here().device)

        def tiny() -> None:
            for _ in range(GAP_KERNELS):
                x.add_(1)

        graph = capture_graph(tiny)  # replayed once there: the first replay uploads the graph
        _gap_ms = statistics.median(_replay_ms(graph) for _ in range(3)) / GAP_KERNELS
        del graph
    return _gap_ms
