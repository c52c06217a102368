"""How a compute-heavy kernel's device time follows the GPU's power cap (issue 8's seq-4096 gap).

    python tools/power_probe.py [--seq 4096] [--seconds 2.0] [--out probe.json]

For SDPA pinned to cuDNN and to flash at (4, seq, 8, 256), fp16, causal: after the GPU idled,
queue the call back to back for --seconds in windows of ~10 ms of device time (the pipeline's
DeviceTimer, L2 cleared before each call) and print each window's median beside the SM clock,
power and NVML's clock-event reasons read right after it; then triton's do_bench three times.
Then three trials the way the pipeline takes them (warm-up, device loop, do_bench, wall loop),
with the clock at each step. Prints a summary; --out keeps every window as JSON.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from fabench.files import output_file_arg, write_json
from fabench.measure.device import timing
from fabench.measure.backends.registry import BACKENDS, Problem
from fabench.measure.device.gpu_state import GpuState
from fabench.measure.job import make_inputs

TIMING = {"warmup_window_ms": 10, "warmup_tolerance": 0.02, "warmup_clock_tolerance": 0.01,
          "min_warmup_ms": 100, "max_warmup_ms": 1000, "min_trial_ms": 20, "iters": 100}


def series(fn, timer, state: GpuState, seconds: float) -> list[dict]:
    out, began = [], time.perf_counter()
    estimate = statistics.median(timer.samples(4))
    count = max(4, round(10 / estimate))
    while time.perf_counter() - began < seconds:
        median = statistics.median(timer.samples(count))
        out.append({"t_s": round(time.perf_counter() - began, 4), "median_ms": median, **(state.read() or {})})
    return out


def pipeline_trial(fn, timer, state: GpuState) -> dict:
    """One trial in the order fabench.measure.cell takes it, with the state at every step."""
    steps = {"start": state.read()}
    warm = timing.warm_up(fn, "cuda", timer, TIMING, 0, state.sm_clock)
    steps["after_warmup"] = dict(state.read(), iters=warm["iters"])
    iters = timing.trial_iters(TIMING, warm["estimate_ms"])
    device = statistics.median(timer.samples(iters))
    steps["after_device"] = state.read()
    bench = timing.do_bench_ms(fn)
    steps["after_do_bench"] = state.read()
    wall = timing.wall_mean_ms(fn, "cuda", iters)
    return {"warmup_iters": warm["iters"], "settled": warm["settled"], "iters": iters, "wall_ms": wall,
            "device_ms": device, "do_bench_ms": bench, "steps": steps, "caught_up": timer.caught_up}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--out", type=output_file_arg)
    args = parser.parse_args()
    state = GpuState("cuda")
    q, k, v = make_inputs({"batch": 4, "seq": args.seq, "heads": 8, "head_dim": 256}, torch.float16, 0, "cuda")
    problem = Problem(q, k, v, True, "cuda", {})
    report = {}
    for name in ("sdpa_cudnn", "sdpa_flash"):
        prepared = BACKENDS[name].prepare(problem)
        with prepared.context():
            fn = prepared.fn
            fn()
            torch.cuda.synchronize()
            timer = timing.DeviceTimer(fn, clear_l2=True)
            time.sleep(2.0)  # let the GPU idle and its clocks fall, as between jobs
            windows = series(fn, timer, state, args.seconds)
            benches = [(timing.do_bench_ms(fn), state.read()) for _ in range(3)]
            trials = []
            for _ in range(3):
                time.sleep(0.3)
                trials.append(pipeline_trial(fn, timer, state))
        report[name] = {"windows": windows, "do_bench": benches, "trials": trials}
        print(f"== {name} (4,{args.seq},8,256): window median, SM MHz, W, reasons")
        for w in windows[:: max(1, len(windows) // 40)]:
            print(f"  t={w['t_s']:.3f}s {w['median_ms']:.4f} ms  {w.get('sm_clock_mhz')} MHz "
                  f"{w.get('power_w')} W  reasons={w.get('clock_event_reasons')}")
        for ms, st in benches:
            print(f"  do_bench {ms:.4f} ms  then {st.get('sm_clock_mhz')} MHz {st.get('power_w')} W "
                  f"reasons={st.get('clock_event_reasons')}")
        for trial in trials:
            clocks = {k: (s.get("sm_clock_mhz"), s.get("clock_event_reasons")) for k, s in trial["steps"].items()}
            print(f"  pipeline trial: warm-up {trial['warmup_iters']} iters (settled {trial['settled']}), device {trial['device_ms']:.4f}, "
                  f"wall {trial['wall_ms']:.4f}, do_bench {trial['do_bench_ms']:.4f}; clocks {clocks}")
        del prepared, fn, timer
    if args.out:
        write_json(Path(args.out), report)


if __name__ == "__main__":
    main()
