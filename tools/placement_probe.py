"""Does a kernel's time depend on where its memory lies? One process's probe, on a GPU.

Two processes of one cell lie 1-3% apart on Triton-generated kernels (FlexAttention, aiter's
Triton kernel at seq 1024-2048) while a process's own trials agree within 0.2-0.9%: something
fixed per process sets the figure. This probe times the pipeline's own cells (fabench.measure.cell,
the profiled kernel loop) in one process under two kinds of change that a process fixes:

- inputs: q, k, v copied to the device anew for each of PLACEMENTS placements, each behind a pad
  of its own size, every placement kept alive (so each lies elsewhere);
- local memory: the context's stack limit set to another size (cuCtxSetLimit, as
  fabench.measure.device.accelerator does), which makes the driver place the local memory (where
  spilled registers go) anew, the first placement's cells timed again. The run committed in
  examples/h200-local-memory-2026-11-28 set it through the runtime's cudaDeviceSetLimit (the same
  limit of the same primary context), before the pipeline had the driver call.

Run it in several processes: where the inputs' placements within one process spread as far as
processes do, the process effect is the inputs' placement. Writes one JSON: per backend and seq,
each condition's trial figures.

    python tools/placement_probe.py OUT.json [--process N]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

from fabench.aiter_config import patch_local
from fabench.analysis.stats import trial_figure
from fabench.config import config_schema, read_config_file, schema_error
from fabench.files import output_file_arg, write_json
from fabench.measure.backends.registry import BACKENDS, Problem
from fabench.measure.cell import Cell
from fabench.measure.device.gpu_state import GpuState
from fabench.measure.inputs import kernel_config_record, make_inputs, reference_output
from fabench.measure.job import measurement
from fabench.measure.spec import Settings, Shape

BACKEND_NAMES = ("flex", "triton", "sdpa_flash")
SEQS = (1024, 2048)
PLACEMENTS = 4
TRIALS = 3
STACK_SIZES = (1024 + 256, 1024 + 512, 1024)  # bytes a thread; 1024 is CUDA's default
STACK_TRIALS = 2


def set_stack(size: int) -> str:
    """The context's stack limit set to `size` bytes a thread: the driver places local memory anew."""
    from cuda.bindings import driver

    torch.cuda.synchronize()
    (err,) = driver.cuCtxSetLimit(driver.CUlimit.CU_LIMIT_STACK_SIZE, size)
    return f"set {size}: {err.name}, now {driver.cuCtxGetLimit(driver.CUlimit.CU_LIMIT_STACK_SIZE)[1]}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=output_file_arg)
    parser.add_argument("--process", type=int, default=0)
    args = parser.parse_args()
    random.seed(args.process)
    config = read_config_file("config.yaml")
    problem = schema_error(config, config_schema())  # also sets the schema's defaults
    if problem:
        parser.error(f"config.yaml: {problem}")
    settings = Settings.of(config, "cuda")
    # No process's last trial: the checks and the wall loop are not what is probed.
    settings = dataclasses.replace(settings, timing=dataclasses.replace(settings.timing, trials=10_000, do_bench=False))
    configs = Path(tempfile.mkdtemp(prefix="placement-probe-"))
    patch_local({}, configs / "default.json", configs / "default.meta.json")
    kernel_config = kernel_config_record({}, configs / "default.json", "cuda", settings.dtype)
    gpu_state = GpuState("cuda")
    keep = []  # every placement's tensors and pads stay allocated
    out = {"process": args.process, "device": torch.cuda.get_device_name(), "cells": {}, "stack": []}
    cells = {}
    for seq in SEQS:
        shape = Shape(4, seq, 8, 256)
        job = measurement(settings, "cuda", shape)
        for placement in range(PLACEMENTS):
            pad = torch.empty(random.randint(1, 48) * (1 << 21) + random.randint(0, 255) * 4096,
                              dtype=torch.uint8, device="cuda")
            q, k, v = make_inputs(shape, torch.float16, settings.seed, "cuda")  # the same values each time
            keep.extend([pad, q, k, v])
            if not placement:
                reference = reference_output(q, k, v, settings.causal)
            problem = Problem(q, k, v, settings.causal, "cuda", kernel_config["values"], configs / "default.json")
            for name in BACKEND_NAMES:
                cell = Cell(BACKENDS[name], problem, reference, job, args.process)
                began = time.perf_counter()
                ok = cell.setup()
                print(f"seq {seq} placement {placement} {name}: set up {time.perf_counter() - began:.1f} s "
                      f"{'ok' if ok else cell.entry.get('reason')} q at {q.data_ptr():#x}", flush=True)
                if ok:
                    cells[(seq, placement, name)] = cell
                    out["cells"].setdefault(f"{name} {seq}", {})[f"inputs {placement}"] = {
                        "q_ptr": q.data_ptr(), "trials": []}
    # Interleaved: every cell's trial t before any cell's trial t + 1.
    for index in range(TRIALS):
        for (seq, placement, name), cell in cells.items():
            cell.trial(index, gpu_state)
            record = cell.entry["trials"][-1]
            out["cells"][f"{name} {seq}"][f"inputs {placement}"]["trials"].append(
                trial_figure(record["kernel_samples_ms"]))
    for size in STACK_SIZES:
        out["stack"].append(set_stack(size))
        for (seq, placement, name), cell in cells.items():
            if placement:
                continue
            figures = []
            for _ in range(STACK_TRIALS):
                index = len(cell.entry["trials"])
                cell.trial(index, gpu_state)
                figures.append(trial_figure(cell.entry["trials"][-1]["kernel_samples_ms"]))
            out["cells"][f"{name} {seq}"][f"stack {size}"] = {"trials": figures}
    for key, conditions in out["cells"].items():
        line = "  ".join(f"{c}: " + ",".join(f"{t * 1000:.2f}" for t in v["trials"]) for c, v in conditions.items())
        print(f"{key} (us) {line}", flush=True)
    write_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
