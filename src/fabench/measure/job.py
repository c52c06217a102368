"""One benchmark job: one (variant, shape), every configured backend in turn, one JSON result.

    python -m fabench.measure.job --spec '<job spec JSON>' --process-index N \
        --aiter-config results/<run>/aiter-config/tuned.json --out OUT.json

(fabench.measure.launch.runner starts this module for a job's process N in isolate mode; a measuring
worker calls measure_to_file in its own interpreter instead.)

The job spec (fabench.measure.spec.JobSpec) holds the run name, the variant and its Triton config,
the shape and the run's shared settings: all the job measures, and nothing else.

A backend that cannot run here is recorded as unavailable, one that breaks as failed with its
reason; neither stops the job. Only bad arguments or an unwritable output fail the process.
"""

from __future__ import annotations

import time

IMPORTS_BEGAN = time.time()  # the process's time line starts its imports phase here

import dataclasses
import gc
import os
import shutil
import statistics
import sys
from pathlib import Path

import torch

from fabench.measure import metrics, provenance, timeline
from fabench.measure.device import accelerator as plat
from fabench.measure.backends.registry import BACKENDS, Backend, Problem, process_configs_dir
from fabench.measure.cell import Cell, trial_order
from fabench.measure.inputs import draw_ahead, kernel_config_record, make_inputs, reference_output
from fabench.measure.backends.failures import classify_failure
from fabench.measure.device.gpu_state import GpuState
from fabench.measure.invocation import (CACHE_ENV, MEASURING_ENV, USAGE, job_arguments, process_index,
                                        report_failure)
from fabench.measure.device.kernels import KERNEL_TIME, PERIOD
from fabench.measure.device.timing import DEVICE_TIME_METHODS
from fabench.config import SpecError, roles_error, sha256_json
from fabench.measure.spec import JobSpec, Measurement, Settings, Shape
from fabench.files import write_json
from fabench.platforms import PlatformName
from fabench.measure.record import FLOP_CONVENTION, SCHEMA_VERSION, SHARED_KEY, SKIPPED_KEY, method_settings

IMPORTS_ENDED = time.time()


def use_cpu_threads(threads: int | None) -> None:
    """A CPU job computes with `threads` threads, all of the host's cores when None. Snakemake sets
    OMP_NUM_THREADS to a job's `threads` (1 under --cores 1), which would time a single core;
    timed jobs never run side by side, so a CPU job may take every core. Recorded as
    method.cpu_threads."""
    torch.set_num_threads(threads or len(os.sched_getaffinity(0)))


def measurement(settings: Settings, platform: str, shape: Shape) -> Measurement:
    """What this process measures with: the run's settings, the CPU's smaller counts on a CPU."""
    return settings.measurement(platform, metrics.attention_flops(shape.batch, shape.seq, shape.heads,
                                                                  shape.head_dim, settings.causal))


def run_job(spec: JobSpec, kernel_config_path: Path | None, project_commit: str | None, process: int = 0) -> dict:
    """Measure one job in this process; process is its index among the job's repeats."""
    started = provenance.now()
    clock = timeline.restart()
    settings, variant, shape = spec.settings, spec.variant, spec.shape
    with clock.phase("device set-up"):
        platform = plat.detect()
        if not platform.is_gpu:
            use_cpu_threads(settings.cpu.threads)
        job = measurement(settings, platform, shape)
        gpu_state = GpuState(platform)
    with clock.phase("aiter config read-back"):
        kernel_config = kernel_config_record(spec.triton, kernel_config_path, platform, settings.dtype)
    shared = shared_here(spec)
    cells = {name: Cell(backend_here(name, settings, platform), None, None, job, process)
             for name in settings.backends if name not in shared}
    reference_status = {"status": "ok", "failure_kind": None, "reason": None}
    if not any(cell.backend.unavailable(platform) is None for cell in cells.values()):
        # Nothing to time here (every backend shared or unavailable): no inputs, no fp32 reference.
        _fail_all(cells, platform, reference_status)
    else:
        with clock.phase("inputs and fp32 reference"):
            inputs, reference_status = _inputs_and_reference(shape, settings, platform)
        if inputs is None:
            _fail_all(cells, platform, reference_status)
        else:
            problem = Problem(*inputs[:3], settings.causal, platform, kernel_config["values"],
                              Path(kernel_config["path"]) if kernel_config["path"] else None)
            _measure(cells, problem, inputs[3], job, f"{variant} {spec.shape_id}", gpu_state)
        del inputs
    results = {name: cell.finish() for name, cell in cells.items()}
    fallbacks = {name: cell.device_fallback for name, cell in cells.items() if cell.device_fallback}
    kept = {name: cell.local_memory_kept for name, cell in cells.items() if cell.local_memory_kept}
    with clock.phase("provenance"):
        result = _result(spec, job, kernel_config, reference_status, results, fallbacks, kept, gpu_state,
                         {"started": started, "process": process,
                          **provenance.collect(plat.named(platform), sha256_json(settings.to_dict()), project_commit)})
    if shared:
        result[SHARED_KEY] = {"measured_in": spec.shared_from, "backends": shared}
    # The figures are the analysis stage's (the merge prints them); a process says what it recorded.
    say_unavailable(results)  # where the set-up did not (the reference failed first)
    for name, entry in results.items():
        if entry["status"] != "unavailable":  # said once by say_unavailable
            progress(f"{variant} {spec.shape_id} process {process} {name}: {_summary(entry)}")
    return result


def shared_here(spec: JobSpec) -> list[str]:
    """The configured backends this job leaves to the job of spec.shared_from (same shape): those
    whose registration says their kernel reads no variant config. A name not registered here stays
    (its job reports it unknown, as before)."""
    if not spec.shared_from:
        return []
    return [name for name in spec.settings.backends
            if name in BACKENDS and not BACKENDS[name].reads_variant_config]


def backend_here(name: str, settings: Settings, platform: PlatformName) -> Backend:
    """The registered backend, or, when the config leaves it out on this platform (cpu.leave_out),
    the same backend reported unavailable with that reason instead of measured."""
    backend = BACKENDS[name]
    if not platform.is_gpu and name in settings.cpu.leave_out:
        reason = "left out of CPU jobs by the config (cpu.leave_out)"
        return dataclasses.replace(backend, unavailable=lambda platform: reason)
    return backend


def _result(spec: JobSpec, job: Measurement, kernel_config: dict, reference_status: dict, results: dict,
            fallbacks: dict, kept: dict, gpu_state: GpuState, provenance_fields: dict) -> dict:
    settings, platform = spec.settings, job.platform
    return {
        "schema_version": SCHEMA_VERSION,
        "run": spec.run,
        "variant": spec.variant,
        "shape": spec.shape_dict,
        "shape_id": spec.shape_id,
        "dtype": settings.dtype,
        "causal": settings.causal,
        "platform": platform,
        "roles": settings.roles[platform],
        "method": _method(job, gpu_state, fallbacks, kept),
        "flops": job.flops,
        "flop_convention": FLOP_CONVENTION,
        "tolerance": dataclasses.asdict(settings.tolerance),
        "reference": reference_status,
        "kernel_config": kernel_config,
        "backends": results,
        "provenance": {**provenance_fields, "gpu": gpu_state.identity(), "finished": provenance.now()},
    }


def _inputs_and_reference(shape: Shape, settings: Settings, platform: str) -> tuple[tuple | None, dict]:
    """(q, k, v, reference) and the reference's status; (None, status) when either does not fit
    (or fails otherwise): the job then still writes its result, every backend failed with why."""
    here = plat.named(platform)
    stage = "inputs"
    try:
        q, k, v = make_inputs(shape, getattr(torch, settings.dtype), settings.seed, here.device)
        stage = "fp32 reference"
        reference = reference_output(q, k, v, settings.causal)
    except Exception as err:
        kind, why = classify_failure(err)
        gc.collect()
        here.empty_cache()  # what the failed allocation left cached
        return None, {"status": "failed", "failure_kind": kind, "reason": f"the {stage} could not be made: {why}"}
    return (q, k, v, reference), {"status": "ok", "failure_kind": None, "reason": None}


def draw_inputs_ahead(wanted: list[tuple]) -> int:
    """The CPU inputs of jobs to come, each [batch, seq, heads, head_dim, dtype, seed], drawn now
    (fabench.measure.inputs.draw_ahead: as many as are kept; how many): a measuring worker's
    start-up, so that its jobs copy them to the device instead of drawing them."""
    return draw_ahead([(Shape(b, s, h, d), getattr(torch, dtype), seed) for b, s, h, d, dtype, seed in wanted])


def _fail_all(cells: dict, platform: str, reference_status: dict) -> None:
    for cell in cells.values():
        reason = cell.backend.unavailable(platform)
        if reason:
            cell.entry.update(status="unavailable", reason=reason)
        else:
            cell.entry.update(status="failed", failure_kind=reference_status["failure_kind"],
                              reason=f"not measured: {reference_status['reason']}")


def _measure(cells: dict, problem: Problem, reference: torch.Tensor, job: Measurement, job_name: str,
             gpu_state: GpuState) -> None:
    """Set every backend up, then its trials interleaved: trial 1 of every backend, trial 2, ...,
    each round in the order trial_order gives (each trial records its place, `position`)."""
    for name, cell in cells.items():
        cell.problem, cell.reference = problem, reference
        if cell.backend.unavailable(problem.platform):
            cell.setup()  # records why; said once per process, not per job (say_unavailable)
            continue
        progress(f"{job_name} {name}: setting up")
        cell.setup()
        progress(f"{job_name} {name}: {'ready' if cell.live else _summary(cell.entry)}")
    say_unavailable({name: cell.entry for name, cell in cells.items()})
    trials, process = job.timing.trials, next(iter(cells.values())).process
    for index in range(trials):
        for position, name in enumerate(trial_order(list(cells), process, index, trials)):
            cell = cells[name]
            if cell.live:
                cell.trial(index, gpu_state, position)
                progress(f"{job_name} {name}: trial {index + 1}/{trials} {_trial_text(cell)}")
    with timeline.phase("release"):
        for cell in cells.values():
            cell.release(collect=False)
        gc.collect()
        plat.named(problem.platform).empty_cache()


# Backend and reason already said unavailable by this process: a measuring worker measures job after
# job, and the same five backends' reasons on every job made a seventh of a CPU run's terminal.
_SAID_UNAVAILABLE: set[tuple[str, str]] = set()


def say_unavailable(entries: dict) -> None:
    """One line naming the backends that cannot run here and why, those this process has not named yet."""
    new = {name: e["reason"] for name, e in entries.items()
           if e.get("status") == "unavailable" and (name, e.get("reason")) not in _SAID_UNAVAILABLE}
    if new:
        _SAID_UNAVAILABLE.update(new.items())
        progress("unavailable here (said once; each result records it): "
                 + "; ".join(f"{name}: {reason}" for name, reason in new.items()))


def progress(line: str) -> None:
    """One line of progress, flushed at once: the workflow shows it live on the terminal and in
    the job's log (stdout is a pipe there, which Python would otherwise buffer)."""
    print(f"[fabench] {line}", flush=True)


def _trial_text(cell: Cell) -> str:
    if not cell.live:
        return f"failed: {cell.entry['reason']}"
    trial = cell.entry["trials"][-1]
    samples = trial.get("device_samples_ms")
    device = f"{statistics.median(samples):.4f} ms device" if samples else ""
    # The published method's wall loop runs in a process's last trial only (on a GPU).
    wall = f"{trial['wall_mean_ms']:.4f} ms wall" if trial.get("wall_mean_ms") is not None else ""
    return ", ".join(part for part in (wall, device) if part) or "measured"


def _method(job: Measurement, gpu_state: GpuState, fallbacks: dict, kept: dict) -> dict:
    """How this result was measured: the published method's counts and the timing actually used."""
    timing, platform = job.timing, job.platform
    gpu = platform.is_gpu
    return {
        **method_settings(job),
        "device_timer": f"{platform}-events-{timing.device_method}" if gpu else None,
        "device_time": DEVICE_TIME_METHODS[timing.device_method] if gpu else None,
        # The device figure and the per-call period beside it (fabench.measure.device.kernels.stream_figures).
        "device_figure": KERNEL_TIME if gpu else None,
        "period": PERIOD if gpu else None,
        "device_fallbacks": fallbacks,
        "local_memory_kept": kept,
        "gpu_state": gpu_state.describe(),
        "environment": {key: os.environ.get(key) for key in (*MEASURING_ENV, *CACHE_ENV)},
        "cpu_threads": torch.get_num_threads(),
    }


def _summary(entry: dict) -> str:
    """A backend's raw outcome in this process (its figures are derived by fabench.analysis)."""
    if entry["status"] == "unavailable":
        return f"unavailable: {entry['reason']}"
    trials = len(entry["trials"])
    if entry["status"] == "failed":
        return f"failed after {trials} trial(s): {entry['reason']}" if trials else f"failed: {entry['reason']}"
    return f"ok, {trials} trial(s) recorded"


def measure_job(spec: JobSpec, kernel_config_path: Path | None, project_commit: str | None, process: int) -> dict:
    """One process's share of the job, measured in this interpreter: its result with its time line,
    or a marker the merge skips. A process beyond its platform's repeats (the workflow planned for
    another platform than the job found, see fabench.planned_platform) measures nothing. Called once
    per process (isolate mode) or once per job by a measuring worker (fabench.measure.launch.worker)."""
    platform = plat.detect()
    problem = roles_error(spec.settings.roles, platform)
    if problem:
        raise SpecError(problem)
    wanted = spec.settings.timing_on(platform).repeats
    if process >= wanted:
        return {SKIPPED_KEY: f"process {process} not needed: {platform} jobs measure in {wanted} process(es)"}
    result = run_job(spec, kernel_config_path, project_commit, process)
    # Writing and exiting come after the record: the runner records when the process ended.
    result["timeline"] = timeline.current().record()
    return result


def measure_to_file(spec: JobSpec, kernel_config_path: Path | None, project_commit: str | None, process: int,
                    out: Path, start_up: list[dict] | None = None, worker: dict | None = None) -> int:
    """Measure one process of the job and write its result for the merge: the exit code a measuring
    process ends with (0; USAGE for a spec this host cannot run; 1 for a failure, its reason the
    last line of output). `start_up` are the phases before the job this process paid for it (by
    default its imports; a worker gives its imports to its first job alone, and to each job the
    hand-over); `worker`, when a worker measured it, which one and how many jobs it had run before."""
    if start_up is None:
        start_up = [{"phase": "imports", "start": IMPORTS_BEGAN, "end": IMPORTS_ENDED}]
    try:
        result = measure_job(spec, kernel_config_path, project_commit, process)
        if "timeline" in result:
            result["timeline"]["phases"][:0] = start_up
            if worker:
                result["timeline"]["worker"] = worker
        write_json(out, result)
    except SpecError as err:  # the spec does not fit this host (no roles for its platform)
        print(f"python -m fabench.measure: error: {err}", file=sys.stderr, flush=True)
        return USAGE
    except Exception as err:  # its reason is the last line the terminal and the log show
        report_failure(err, spec, process)
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    """One measuring process, as the runner starts it in isolate mode (--process-index N):
    measure, write, end."""
    parser = job_arguments("python -m fabench.measure.job")
    parser.add_argument("--process-index", type=process_index, required=True, help="this process's index among the repeats")
    args = parser.parse_args(argv)
    end_now(measure_to_file(args.spec, args.aiter_config, args.project_commit, args.process_index, args.out))


def end_now(code: int) -> None:
    """End this measuring process (a job's or a sweep's) at once, its result written: a normal exit
    spent 5-7 s on an H200 in clean-up (Inductor's compile workers, atexit hooks), for every process
    of every job. os._exit skips the atexit hook that removes the process's aiter configs folder,
    so that is removed here."""
    if process_configs_dir.cache_info().currsize:
        shutil.rmtree(process_configs_dir(), ignore_errors=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
