"""Timing a sweep job's candidates with the benchmark's own code (fabench.measure.cell): each
candidate is a backend whose call is the kernel's flash_attn_func with the candidate's config=,
prepared and checked once, then timed in trials interleaved across the candidates."""

from __future__ import annotations

import gc

import torch

from fabench.analysis.entry import analyse_measured
from fabench.analysis.figures import METRICS
from fabench.analysis.noise import add_intervals
from fabench.analysis.result_types import BackendEntry, CellStats, correctness_of, with_backends
from fabench.measure.backends.registry import Backend, FallbackError, Prepared, Problem
from fabench.measure.cell import Cell
from fabench.measure.backends.failures import classify_failure
from fabench.measure.device.gpu_state import GpuState
from fabench.measure.inputs import make_inputs, reference_output
from fabench.measure.device.accelerator import named, synchronize
from fabench.measure.spec import Measurement, Settings, Shape
from fabench.shapes import shape_text
from fabench.tune.kernel import Kernel, candidate_record
from fabench.tune.memory import required_bytes


def candidate_backend(kernel: Kernel, candidate: dict) -> Backend:
    """The candidate as a backend: the kernel called with the launch options this platform accepts."""
    options = candidate["launch"]["applied"]

    def prepare(problem: Problem) -> Prepared:
        q, k, v, causal = problem.q, problem.k, problem.v, problem.causal
        return Prepared(fn=lambda: kernel.module.flash_attn_func(q, k, v, causal=causal, return_lse=True,
                                                                 config=options)[0],
                        kernel_config={"source": "config= argument", "values": options})

    return Backend(candidate["id"], candidate["id"], lambda platform: None, prepare, compiled=True)


def measure_candidates(candidates: list[dict], kernel: Kernel, settings: Settings, shape: dict, job: Measurement,
                       check_pruned: bool) -> list[dict]:
    """Every candidate's record at this shape. A candidate over the memory limit is not timed
    (the reference config always is: every speedup is taken against it)."""
    platform = job.platform
    try:
        q, k, v = make_inputs(Shape(**shape), getattr(torch, settings.dtype), settings.seed,
                              named(platform).device)
        reference = reference_output(q, k, v, settings.causal)
    except Exception as err:
        why = classify_failure(err)
        return [candidate_record(c, status="failed", failure_kind=why[0],
                        reason=f"not measured: the inputs or the fp32 reference could not be made: {why[1]}")
                for c in candidates]
    problem = Problem(q, k, v, settings.causal, platform, kernel_config={})
    cells = {c["id"]: Cell(candidate_backend(kernel, c), problem, reference, job)
             for c in candidates if c["memory"]["fits"] or c["reference"]}
    for cid, cell in cells.items():
        print(f"[fabench] sweep {shape_text(shape)} {cid} ...", flush=True)
        if cell.setup():
            _require_kernel(cell, kernel.kernel_name)
    state = GpuState(platform)
    for index in range(job.timing.trials):
        for cell in cells.values():
            if cell.live:
                cell.trial(index, state)
    for cell in cells.values():
        cell.release(collect=False)
    gc.collect()
    named(platform).empty_cache()
    entries = analysed(cells, job)
    records = []
    for candidate in candidates:
        if candidate["id"] in cells:
            records.append(from_entry(candidate, entries[candidate["id"]]))
        else:
            records.append(pruned(candidate, kernel, problem, check_pruned))
    return records


def analysed(cells: dict, job: Measurement) -> dict:
    """Every candidate's figures from the analysis stage, their intervals from the noise pooled over
    the job's candidates of similar duration (one process: between trials, as a CPU run's)."""
    entries = {cid: analyse_measured(cell.finish(), job) for cid, cell in cells.items()}
    for metric in METRICS:
        add_intervals([with_backends({}, entries)], metric)
    return entries


def _require_kernel(cell: Cell, name: str | None) -> None:
    """A call that launched kernels but none of the swept kernel's name ran something else: fell
    back. (A profile that saw no kernel at all cannot judge.)"""
    names = (cell.entry.get("kernels") or {}).get("names") or []
    if name and cell.gpu and names and not any(name in launched for launched in names):
        cell.fail(FallbackError(f"the call launched no {name} kernel (kernels: {', '.join(names[:6]) or 'none'})"))


def from_entry(candidate: dict, value: dict) -> dict:
    """The candidate's record from its backend entry: the figure the benchmark judges (device time
    where there is a device timer, else the published wall clock) with its interval."""
    entry = BackendEntry.of(value)
    launch = (entry.kernels or {}).get("launch") or {}
    return candidate_record(candidate, status=entry.status, failure_kind=entry.failure_kind, reason=entry.reason,
                   **_figure(entry.stats), correctness=correctness_of(entry), compile_s=entry.compile_s,
                   kernel_shared_memory=launch.get("shared_memory"),
                   required_bytes=required_bytes(entry.reason) if entry.failure_kind == "out_of_resources" else None)


def _figure(stats: CellStats | None) -> dict:
    """The judged figure's fields of a candidate's record, and its stability; none for an entry not
    analysed (candidate_record's defaults stand)."""
    if stats is None:
        return {}
    device = stats.metric("device_ms")
    summary = device or stats.metric("wall_mean_ms")
    figure = {"stable": stats.stable, "unstable_reason": stats.unstable_reason}
    if summary:
        figure.update(figure="device" if device else "wall", ms=summary.median, ci95=summary.get("ci95"),
                      spread=summary.get("spread"), n=summary.get("n", 0))
    return figure


def pruned(candidate: dict, kernel: Kernel, problem: Problem, check: bool) -> dict:
    """A candidate the model says cannot fit: not timed; with `check`, called once (compiling) to
    see whether the device agrees."""
    model = candidate["memory"]
    reason = f"memory model: {model['bytes']:,} bytes > {model['limit']:,} available ({model['formula']})"
    return candidate_record(candidate, status="pruned", failure_kind="out_of_resources", reason=reason,
                   pruned_check=compile_check(kernel, candidate, problem) if check else None)


def compile_check(kernel: Kernel, candidate: dict, problem: Problem) -> dict:
    """One untimed call: {compiled, failure_kind, reason, required_bytes}."""
    fn = candidate_backend(kernel, candidate).prepare(problem).fn
    try:
        fn()
        synchronize(problem.platform)
    except Exception as err:
        kind, why = classify_failure(err)
        return {"compiled": False, "failure_kind": kind, "reason": why, "required_bytes": required_bytes(why)}
    finally:
        named(problem.platform).empty_cache()
    return {"compiled": True, "failure_kind": None, "reason": None, "required_bytes": None}
