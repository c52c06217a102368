"""One sweep job: one stage of the sweep at one shape, every candidate timed in this one process.

    python -m fabench.tune --spec '<sweep job spec JSON>' --aiter-config <reference variant's config> \
        --out results/<run>/tune/<stage>/<shape>.json [--shortlist results/<run>/tune/shortlist.json]

The candidates are measured as the benchmark measures a backend (fabench.measure.cell): a first
call that compiles and is checked against the fp32 reference (wrong numbers cannot win), the
kernels it launched, then `trials` trials interleaved across the candidates, each a warm-up until
time and SM clock settle and device time from calls queued behind a GPU sleep; only the counts
are the sweep's own (sweep.timing), so that the default sweep fits its time budget. A candidate
the memory model says cannot fit is not compiled (with sweep.check_pruned it is compiled once,
untimed, to check the model). Whatever a candidate raises is its record, never the job's end.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from fabench.aiter_config import forward_config
from fabench.files import output_file_arg, write_json
from fabench.shapes import shape_id
from fabench.tune import memory, space
from fabench.tune.kernel import Kernel, candidate_record

SWEEP_TIMING_KEYS = ("warmup", "iters", "trials", "min_trial_ms", "min_warmup_ms", "max_warmup_ms")


def sweep_timing(settings: dict, sweep: dict, platform: str, shape: dict):
    """The benchmark's job settings for this platform with the sweep's counts; no do_bench (the
    winner's benchmark jobs cross-check it)."""
    import dataclasses

    from fabench.measure.job import measurement
    from fabench.measure.spec import Settings, Shape

    job = measurement(Settings.from_dict(settings), platform, Shape(**shape))
    counts = {key: sweep["timing"][key] for key in SWEEP_TIMING_KEYS if key in sweep["timing"]}
    # A candidate's time is checked by the benchmark's jobs once it is a variant, not in the sweep.
    return dataclasses.replace(job, timing=dataclasses.replace(job.timing, **counts, do_bench=False))


def plan(stage: str, sweep: dict, reference: dict, kernel: Kernel, shortlist: list[dict] | None) -> tuple:
    """(candidates, keys the platform refuses with why); each candidate with its launch options."""
    refused = kernel.launch_options(reference)[1] if kernel.module is not None else {}
    swept, dropped = space.platform_space(sweep["space"], refused)
    found = space.candidates(stage, swept, reference, shortlist)
    for candidate in found:
        applied, not_applied = kernel.launch_options(candidate["config"])
        candidate["launch"] = {"applied": applied, "not_applied": not_applied}
    return found, dropped


def memory_record(config: dict, shape: dict, dtype: str, platform: str, limit: int | None) -> dict:
    model = memory.estimate(config, shape["head_dim"], dtype, platform)
    return {**model, "limit": limit, "fits": limit is None or model["bytes"] <= limit}


def run(spec: dict, reference_path: Path, shortlist_path: Path | None = None) -> dict:
    """Time every candidate of the spec's stage at its shape; the job's record."""
    from fabench.measure.device import platform as plat
    from fabench.measure.spec import to_plain

    began = time.perf_counter()
    platform = plat.detect()
    settings, sweep, shape, stage = spec["settings"], spec["sweep"], spec["shape"], spec["stage"]
    reference = forward_config(json.loads(Path(reference_path).read_text()))
    shortlist = json.loads(Path(shortlist_path).read_text())["values"] if shortlist_path else None
    kernel = Kernel(platform, sweep["kernel_module"])
    candidates, dropped_keys = plan(stage, sweep, reference, kernel, shortlist)
    limit = sweep["memory_limit"] or memory.device_limit(platform)
    for candidate in candidates:
        candidate["memory"] = memory_record(candidate["config"], shape, settings["dtype"], platform, limit)
    job = sweep_timing(settings, sweep, platform, shape)
    if kernel.module is None:
        records = [candidate_record(c, status="unavailable", reason=kernel.reason) for c in candidates]
    else:
        from fabench.tune.measure import measure_candidates

        records = measure_candidates(candidates, kernel, settings, shape, job, sweep["check_pruned"])
    return {"stage": stage, "shape": shape, "shape_id": shape_id(shape), "platform": platform,
            "device": _device_name(platform), "memory_limit": limit,
            "not_applied": dropped_keys, "timing": to_plain(job.timing), "reference": reference,
            "candidates": records, "compile_s": sum(r["compile_s"] or 0.0 for r in records),
            "elapsed_s": time.perf_counter() - began}


def _device_name(platform: str) -> str:
    from fabench.measure.device.platform import device_name

    return device_name(platform)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import os
    import sys

    from fabench.watchdog import watch_workflow

    parser = argparse.ArgumentParser(prog="python -m fabench.tune", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, type=json.loads, help="the sweep job's spec, JSON")
    parser.add_argument("--aiter-config", required=True, type=Path, help="the reference variant's patched config")
    parser.add_argument("--out", required=True, type=output_file_arg)
    parser.add_argument("--shortlist", type=Path, help="the coarse stage's survivors (stage refine)")
    args = parser.parse_args(argv)
    watch_workflow()
    write_json(args.out, run(args.spec, args.aiter_config, args.shortlist))
    # Written: end now, skipping the clean-up of compile workers and atexit hooks (seconds per job).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
