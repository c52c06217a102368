"""Why does compiled FlexAttention at (4,1024,8,64) measure 0.122 ms in one process and 0.046 in
another (issue 8 (c))? Each of N fresh processes, one after another, compiles it with the default
variant's kernel_options and records, for the same kernel:

  - the old pipeline's figure: per-iteration CUDA events with nothing queued ahead
  - the host time of one call (how long the Python call takes to return, GPU synchronized before)
  - the kernel's device time from graph replays queued behind a GPU sleep (fabench.measure.device.timing)
  - triton.testing.do_bench's median
  - the kernel names, Inductor's launch settings and candidate count, the source hash
  - whether Inductor's FX graph cache hit, compile time, SM clock (NVML), process time line

    python tools/flex_d64_probe.py --processes 4 --out probe.json

Hypotheses this separates: a benchmark-based (autotuned) choice (candidate_configs > 1), a
different kernel (names / source hash), different num_stages/num_warps (launch), clocks (NVML),
or the host: the old figure following host time rather than the kernel's device time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SHAPE = (4, 1024, 8, 64)
OPTIONS = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 1}  # the default variant's


def child() -> dict:
    born = time.perf_counter()
    import torch

    from fabench.measure.device import kernels, timing
    from fabench.measure.backends.registry import BACKENDS, Problem
    from fabench.measure.device.gpu_state import GpuState

    imported = time.perf_counter()
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(SHAPE, generator=gen).half().cuda() for _ in range(3))
    problem = Problem(q, k, v, True, "cuda", dict(OPTIONS, PRELOAD_V=False))
    prepared = BACKENDS["flex"].prepare(problem)
    fn = prepared.fn
    gpu = GpuState("cuda")
    clock_start = gpu.read()
    with kernels.InductorModules() as generated:
        began = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - began
    from torch._dynamo.utils import counters

    cache = {key: value for key, value in counters["inductor"].items() if "cache" in key}
    described = kernels.describe(kernels.profile_call(fn), generated.modules)
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    old = old_pipeline_samples(torch, fn, 100)
    host_us = timing.host_call_ms(fn, calls=50) * 1000.0
    timer = timing.DeviceTimer(fn, clear_l2=True, method="graph")
    timing.warm_up(fn, "cuda", timer, {"warmup_window_ms": 10, "warmup_tolerance": 0.02, "warmup_clock_tolerance": 0.01, "min_warmup_ms": 0, "max_warmup_ms": 1000}, 10)
    graph_clear = statistics.median(timer.samples(1000))
    graph_warm = statistics.median(timing.DeviceTimer(fn, clear_l2=False, method="graph").samples(1000))
    eager_timer = timing.DeviceTimer(fn, clear_l2=True, kernels_per_call=len(described["names"]), method="queued")
    eager_queued = statistics.median(eager_timer.samples(500))
    do_bench = timing.do_bench_ms(fn)
    measured = time.perf_counter()
    return {
        "pid": os.getpid(), "env": {k: v for k, v in os.environ.items() if k.startswith("TORCHINDUCTOR")},
        "old_events_median_ms": statistics.median(old), "old_events_p10_p90": [sorted(old)[10], sorted(old)[89]],
        "host_call_us_median": host_us,
        "graph_replay_clear_l2_ms": graph_clear, "graph_replay_warm_l2_ms": graph_warm,
        "eager_behind_sleep_ms": eager_queued, "eager_caught_up_chunks": eager_timer.caught_up,
        "do_bench_ms": do_bench, "compile_s": compile_s, "inductor_cache_counters": cache, "kernels": described,
        "clock_start": clock_start, "clock_end": gpu.read(),
        "timeline_s": {"import": imported - born, "measured": measured - born},
    }


def old_pipeline_samples(torch, fn, iters: int) -> list[float]:
    """The pipeline's device figure before issue 8: an event pair per call, nothing queued ahead."""
    pairs = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in pairs]


def parent(processes: int, out: str, env_variants: list[dict]) -> None:
    rows = []
    for index in range(processes):
        extra = env_variants[index % len(env_variants)] if env_variants else {}
        began = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__, "--child"], capture_output=True, text=True,
                              env={**os.environ, **extra}, timeout=300)
        wall = time.perf_counter() - began
        line = next((x for x in reversed(proc.stdout.splitlines()) if x.startswith("{")), None)
        row = json.loads(line) if line else {"error": proc.stderr[-2000:]}
        row.update(process=index, process_wall_s=wall, exit_code=proc.returncode)
        if "timeline_s" in row:  # how long the process took to end after its work was done
            row["timeline_s"]["exit_lag"] = wall - row["timeline_s"]["measured"]
        rows.append(row)
        print(summary_line(row), flush=True)
    with open(out, "w") as handle:
        json.dump(rows, handle, indent=2)


def summary_line(row: dict) -> str:
    if "error" in row:
        return f"process {row['process']}: failed: {row['error'][-300:]}"
    launch = row["kernels"]["launch"] or {}
    return (f"process {row['process']} {row['env']}: old events {row['old_events_median_ms']:.4f} ms, "
            f"host call {row['host_call_us_median']:.1f} us, graph {row['graph_replay_clear_l2_ms']:.4f} ms "
            f"(warm L2 {row['graph_replay_warm_l2_ms']:.4f}), eager behind sleep {row['eager_behind_sleep_ms']:.4f}, "
            f"do_bench {row['do_bench_ms']:.4f} ms; {','.join(row['kernels']['names'])} "
            f"sha {str(row['kernels']['source_sha256'])[:12]} warps {launch.get('num_warps')} "
            f"stages {launch.get('num_stages')} candidates {launch.get('candidate_configs')} grid {launch.get('grid')}; "
            f"compile {row['compile_s']:.1f} s, cache {row['inductor_cache_counters']}, "
            f"SM {row['clock_start'] and row['clock_start'].get('sm_clock_mhz')}->"
            f"{row['clock_end'] and row['clock_end'].get('sm_clock_mhz')} MHz; "
            f"timeline {({k: round(v, 1) for k, v in row['timeline_s'].items()})}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--out", default="flex-d64-probe.json")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE[,KEY=VALUE] for process i (cycled)")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child()), flush=True)
        return
    variants = [dict(pair.split("=", 1) for pair in spec.split(",") if pair) for spec in args.env]
    parent(args.processes, args.out, variants)


if __name__ == "__main__":
    main()
