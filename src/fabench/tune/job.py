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

import argparse
import json
import time
from pathlib import Path

from fabench.aiter_config import forward_config
from fabench.files import write_json
from fabench.measure.invocation import sweep_arguments
from fabench.measure.spec import to_plain
from fabench.measure.sweep_spec import SweepSpec
from fabench.shapes import shape_id
from fabench.tune import memory, space
from fabench.tune.kernel import Kernel, candidate_record

def sweep_timing(spec: SweepSpec, platform: str):
    """The benchmark's job settings for this platform with the sweep's counts; no do_bench (the
    winner's benchmark jobs cross-check it)."""
    import dataclasses

    from fabench.measure.job import measurement

    job = measurement(spec.settings, platform, spec.shape)
    counts = {key: value for key, value in dataclasses.asdict(spec.sweep.timing).items() if value is not None}
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


def run(spec: SweepSpec, reference_path: Path, shortlist_path: Path | None = None) -> dict:
    """Time every candidate of the spec's stage at its shape; the job's record."""
    from fabench.measure.device import accelerator as plat

    began = time.perf_counter()
    platform = plat.detect()
    settings, sweep, shape, stage = spec.settings, to_plain(spec.sweep), to_plain(spec.shape), spec.stage
    reference = forward_config(json.loads(Path(reference_path).read_text()))
    shortlist = json.loads(Path(shortlist_path).read_text())["values"] if shortlist_path else None
    kernel = Kernel(platform, sweep["kernel_module"])
    candidates, dropped_keys = plan(stage, sweep, reference, kernel, shortlist)
    limit = sweep["memory_limit"] or memory.device_limit(platform)
    for candidate in candidates:
        candidate["memory"] = memory_record(candidate["config"], shape, settings.dtype, platform, limit)
    job = sweep_timing(spec, platform)
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
    from fabench.measure.device.accelerator import device_name

    return device_name(platform)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return sweep_arguments("python -m fabench.tune", __doc__.splitlines()[0]).parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from fabench.measure.job import end_now
    from fabench.watchdog import watch_workflow

    args = parse_args(argv)
    watch_workflow()
    write_json(args.out, run(args.spec, args.aiter_config, args.shortlist))
    # Written: end now, as a benchmark job's process ends (its aiter configs folder removed).
    end_now(0)
