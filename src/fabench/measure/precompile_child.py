"""One job's kernels built ahead: its compiled backends' first calls, before any job of the run is timed.

    python -m fabench.measure.precompile_child --spec '<job spec JSON>' --out RECORD.json

fabench.measure.launch.precompile starts one such process per job of the run, several at once,
on the GPU it leased before the run's first measuring process: no job is timed meanwhile. Each runs,
for every backend of its job that compiles (its registration's `compiled`) and can run here, what
the job's own first call runs (fabench.measure.cell.Cell.setup): `prepare` and one call, on the
job's inputs, with the measuring processes' environment, so the kernels land in the compile caches
the jobs read (fabench.measure.invocation.COMPILE_CACHE). It checks nothing: each job still checks
its own first call against the fp32 reference.

aiter's config is patched here as rule patch_config patches it (fabench.aiter_config.patch_local,
into this process's own folder): the compile ahead runs before that rule's jobs.

What fails is recorded with its reason, never raised: the job meets the same failure and reports it
as its cell. The record (format FORMAT) holds this process's phases and each backend's outcome.
"""

from __future__ import annotations

import time

IMPORTS_BEGAN = time.time()

import gc
import sys
from pathlib import Path

import torch

from fabench import aiter_config
from fabench.files import write_json
from fabench.measure import timeline
from fabench.measure.backends.failures import classify_failure
from fabench.measure.backends.registry import Backend, Problem, process_configs_dir
from fabench.measure.device import accelerator as plat
from fabench.measure.invocation import job_arguments
from fabench.measure.inputs import kernel_config_record, make_inputs
from fabench.measure.job import backend_here, end_now, shared_here, use_cpu_threads
from fabench.measure.spec import JobSpec

IMPORTS_ENDED = time.time()
FORMAT = "fabench-compile-ahead/1"


def compiled_backends(spec: JobSpec, platform) -> tuple[dict[str, Backend], dict[str, dict]]:
    """The job's backends whose first call compiles and that can run here, and the outcome of those
    that cannot (the job's own choice: shared backends left to the first variant's job, the CPU's
    leave_out)."""
    runnable, outcomes = {}, {}
    shared = shared_here(spec)
    for name in spec.settings.backends:
        if name in shared:
            continue
        try:
            backend = backend_here(name, spec.settings, platform)
        except KeyError:  # an unknown name: the job reports it
            continue
        if not backend.compiled:
            continue
        reason = backend.unavailable(platform)
        if reason:
            outcomes[name] = {"status": "unavailable", "reason": reason}
        else:
            runnable[name] = backend
    return runnable, outcomes


def compile_job(spec: JobSpec) -> dict:
    """Build the job's compiled kernels here: the record of what each backend did."""
    clock = timeline.restart()
    clock.add("imports", IMPORTS_BEGAN, IMPORTS_ENDED)
    settings = spec.settings
    with clock.phase("device set-up"):
        platform = plat.detect()
        if not platform.is_gpu:
            use_cpu_threads(settings.cpu.threads)
    runnable, outcomes = compiled_backends(spec, platform)
    if runnable:
        with clock.phase("aiter config read-back"):
            # Beside, not among, the configs aiter's loader is pointed at (load_patched places them).
            patched = Path(process_configs_dir()) / "patched" / f"{spec.variant}.json"
            aiter_config.patch_local(dict(spec.triton), patched, patched.with_suffix(".meta.json"))
            kernel_config = kernel_config_record(spec.triton, patched, platform, settings.dtype)
        with clock.phase("inputs"):
            q, k, v = make_inputs(spec.shape, getattr(torch, settings.dtype), settings.seed,
                                  plat.named(platform).device)
        problem = Problem(q, k, v, settings.causal, platform, kernel_config["values"], patched)
        for name, backend in runnable.items():
            began = time.time()
            try:
                with clock.phase("compile ahead", name):
                    prepared = backend.prepare(problem)
                    with prepared.context():
                        prepared.fn()
                        plat.synchronize(platform)
                outcomes[name] = {"status": "compiled", "seconds": time.time() - began}
            except Exception as err:  # the job meets it again, and reports it as its cell
                kind, why = classify_failure(err)
                outcomes[name] = {"status": "failed", "failure_kind": kind, "reason": why,
                                  "seconds": time.time() - began}
            finally:
                prepared = None
                gc.collect()
        print(f"[fabench] compiled ahead: {spec.variant} {spec.shape_id}: "
              + ", ".join(f"{name} {o['status']}" + (f" in {o['seconds']:.1f} s" if "seconds" in o else "")
                          for name, o in outcomes.items()), flush=True)
    return {"format": FORMAT, "variant": spec.variant, "shape_id": spec.shape_id, "platform": str(platform),
            "backends": outcomes, "timeline": clock.record()}


def main(argv: list[str] | None = None) -> None:
    parser = job_arguments("python -m fabench.measure.precompile_child")
    args = parser.parse_args(argv)
    try:
        record = compile_job(args.spec)
    except Exception as err:  # recorded: the jobs compile for themselves
        kind, why = classify_failure(err)
        record = {"format": FORMAT, "variant": args.spec.variant, "shape_id": args.spec.shape_id,
                  "failed": f"{kind}: {why}", "timeline": timeline.current().record()}
        print(f"[fabench] compile ahead of {args.spec.variant} {args.spec.shape_id} failed: {why}", flush=True)
    write_json(args.out, record)
    end_now(0)


if __name__ == "__main__":
    sys.exit(main())
