"""Where the native fp32 gap between the graph check and CUPTI comes from (docs/timing.md, "The
native fp32 gap"): each kernel's time per call, eager and inside a replayed CUDA graph, both read by
CUPTI (torch.profiler), for the native backend at (4, seq, 8, 256) fp16 causal.

    python examples/h200-x2-lease-2026-11-27/kernel_gap_probe.py [--seq 2048 4096] [--calls 2] [--replays 5] [--backend native]

Per seq it prints, per kernel name: the eager stream's time per call ([L2 clear, call] x calls
queued back to back, as the pipeline's profiled stream), the same body replayed as a graph
(the graph check's [L2 clear, call] x calls), and their difference; then the sums, and the graph
check's own figure (graph minus a graph of the clears alone, by events, fabench.measure.device.graph_time)
for the frame. Reading it:
  the excess sits in the elementwise / softmax / copy kernels   -> memory (the graph's private pool)
  it is spread over the SGEMMs as well, in proportion            -> a clock or power effect in replays
  the CUPTI sums agree and only the events' figure is above      -> the graph method's frame
A last row repeats the eager stream after the graph's pool was made (same process): if eager
slows to the graph's figure there, the memory placement moved with the pool.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from fabench.measure.device import graph_time, timing
from fabench.measure.backends.registry import BACKENDS, Problem
from fabench.measure.job import make_inputs
from fabench.measure.spec import Shape


def per_kernel_us(run, calls: int, repeats: int) -> dict[str, float]:
    """Each device activity's mean time per call (us) over `repeats` runs of `run` (calls each), by CUPTI."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            run()
        torch.cuda.synchronize()
    totals: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name[:70]] += event.time_range.elapsed_us()  # a device activity: its own span
    return {name: total / (calls * repeats) for name, total in totals.items()}


def table(seq: int, eager: dict, graph: dict, again: dict, events_ms: float) -> None:
    print(f"\n(4, {seq}, 8, 256): us per call, CUPTI")
    print(f"{'kernel':70} {'eager':>10} {'graph':>10} {'diff':>8} {'eager after':>12}")
    for name in sorted(set(eager) | set(graph), key=lambda n: -eager.get(n, 0.0)):
        e, g = eager.get(name, 0.0), graph.get(name, 0.0)
        print(f"{name:70} {e:10.1f} {g:10.1f} {(g / e - 1) if e else float('nan'):+8.2%} {again.get(name, 0.0):12.1f}")
    sums = [sum(d.values()) for d in (eager, graph, again)]
    print(f"{'sum (clears included)':70} {sums[0]:10.1f} {sums[1]:10.1f} {sums[1] / sums[0] - 1:+8.2%} {sums[2]:12.1f}")
    print(f"graph check's own figure (graph minus clears, events): {events_ms * 1000:.1f} us per call")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq", type=int, nargs="+", default=[2048, 4096])
    parser.add_argument("--calls", type=int, default=2)
    parser.add_argument("--replays", type=int, default=5)
    parser.add_argument("--backend", default="native")
    args = parser.parse_args()
    cache = timing.l2_buffer()
    for seq in args.seq:
        q, k, v = make_inputs(Shape(batch=4, seq=seq, heads=8, head_dim=256), torch.float16, 0, "cuda")
        prepared = BACKENDS[args.backend].prepare(Problem(q, k, v, True, "cuda", {}))
        with prepared.context():
            fn = prepared.fn

            def body() -> None:
                for _ in range(args.calls):
                    cache.zero_()
                    fn()

            body()
            eager = per_kernel_us(body, args.calls, args.replays)
            graph = timing.capture_graph(body)
            graph.replay()
            in_graph = per_kernel_us(graph.replay, args.calls, args.replays)
            again = per_kernel_us(body, args.calls, args.replays)
            del graph
            torch.cuda.synchronize()
            checked = graph_time.graph_kernel_time(fn, cache, args.calls, replays=args.replays)
        table(seq, eager, in_graph, again, statistics.median(checked["per_call_ms"]))


if __name__ == "__main__":
    main()
