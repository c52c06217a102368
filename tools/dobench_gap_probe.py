"""Why cuDNN SDPA at (4,4096,8,256) reads slower by do_bench than by our device timer.

    python tools/dobench_gap_probe.py

In one process, the GPU kept busy throughout: triton's do_bench; our DeviceTimer for ~100 ms
(int8 L2 buffer, as the pipeline); a do_bench-like loop of our own (no sleep, events per call,
L2 cleared with an int32 buffer as do_bench's, then with our int8 one); our DeviceTimer with an
int32 buffer. Each method's median and the SM clock right after it, three rounds.
"""

from __future__ import annotations

import statistics

import torch

from fabench.measure.device import timing
from fabench.measure.backends.registry import BACKENDS, Problem
from fabench.measure.device.gpu_state import GpuState
from fabench.measure.job import make_inputs


def plain_loop(fn, cache: torch.Tensor, n: int) -> float:
    """do_bench's timed loop: clear, start event, call, end event; nothing queued ahead."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for start, end in zip(starts, ends):
        cache.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def main() -> None:
    state = GpuState("cuda")
    q, k, v = make_inputs({"batch": 4, "seq": 4096, "heads": 8, "head_dim": 256}, torch.float16, 0, "cuda")
    prepared = BACKENDS["sdpa_cudnn"].prepare(Problem(q, k, v, True, "cuda", {}))
    int32 = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")
    with prepared.context():
        fn = prepared.fn
        fn()
        ours = timing.DeviceTimer(fn, clear_l2=True)
        ours32 = timing.DeviceTimer(fn, clear_l2=True)
        ours32.cache = int32
        for _ in range(200):  # into the power-capped state
            fn()
        methods = {
            "do_bench": lambda: timing.do_bench_ms(fn),
            "ours int8 (200 iters)": lambda: statistics.median(ours.samples(200)),
            "plain loop int32": lambda: plain_loop(fn, int32, 200),
            "plain loop int8": lambda: plain_loop(fn, timing.l2_buffer(), 200),
            "ours int32 (200 iters)": lambda: statistics.median(ours32.samples(200)),
            "ours int8 (40 iters)": lambda: statistics.median(ours.samples(40)),
        }
        for round_ in range(3):
            for name, method in methods.items():
                ms = method()
                print(f"round {round_} {name:24s} {ms:.4f} ms  then {state.sm_clock()} MHz")
        print(f"chunks not proven fed: {ours.caught_up} (int8), {ours32.caught_up} (int32)")

if __name__ == "__main__":
    main()
