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
into this process's own folder): the compile ahead runs before that rule's jobs. A job of several
compiled backends builds each in a process forked from this one after its imports (compile_apart),
side by side; a fork dies with this process (die_with_parent).

What fails is recorded with its reason, never raised: the job meets the same failure and reports it
as its cell. The record (format FORMAT) holds this process's phases and each backend's outcome.
"""

from __future__ import annotations

import time

IMPORTS_BEGAN = time.time()

import ctypes
import gc
import json
import os
import signal
import sys
import threading
from pathlib import Path

import torch

from fabench import aiter_config
from fabench.files import write_json
from fabench.measure import timeline
from fabench.measure.backends.failures import classify_failure
from fabench.measure.backends.registry import BACKENDS, Backend, Problem, process_configs_dir
from fabench.measure.device import accelerator as plat
from fabench.measure.invocation import job_arguments
from fabench.measure.inputs import kernel_config_record, make_inputs
from fabench.measure.job import backend_here, end_now, shared_here, use_cpu_threads
from fabench.measure.spec import JobSpec

IMPORTS_ENDED = time.time()
FORMAT = "fabench-compile-ahead/1"


def compiling_names(spec: JobSpec) -> list[str]:
    """The job's backends whose registration says their first call compiles, but those it leaves to
    the first variant's job (shared): read from the registrations alone, before any device is
    touched. Whether each can run here is compiled_backends' to say."""
    shared = shared_here(spec)
    return [name for name in spec.settings.backends
            if name not in shared and name in BACKENDS and BACKENDS[name].compiled]


def compiled_backends(spec: JobSpec, platform, names: list[str]) -> tuple[dict[str, Backend], dict[str, dict]]:
    """Of `names` (compiling_names), the backends that can run here, and the outcome of those that
    cannot (the job's own choice: the CPU's leave_out)."""
    runnable, outcomes = {}, {}
    for name in names:
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
    """Build the job's compiled kernels: the record of what each backend did. Each backend in a
    forked process of its own where the job has several (compile_apart), else here."""
    clock = timeline.restart()
    clock.add("imports", IMPORTS_BEGAN, IMPORTS_ENDED)
    names = compiling_names(spec)
    if len(names) > 1 and can_fork():
        outcomes, platform = compile_apart(spec, names, clock)
    else:
        outcomes, platform = compile_here(spec, names, clock)
    if any(o["status"] != "unavailable" for o in outcomes.values()):
        print(f"[fabench] compiled ahead: {spec.variant} {spec.shape_id}: "
              + ", ".join(f"{name} {o['status']}" + (f" in {o['seconds']:.1f} s" if "seconds" in o else "")
                          for name, o in outcomes.items()), flush=True)
    return {"format": FORMAT, "variant": spec.variant, "shape_id": spec.shape_id, "platform": platform,
            "backends": outcomes, "timeline": clock.record()}


def compile_here(spec: JobSpec, names: list[str], clock) -> tuple[dict[str, dict], str]:
    """The first calls of the backends `names` that can run here, in this process: each one's
    outcome (by name), and the platform's name."""
    settings = spec.settings
    with clock.phase("device set-up"):
        platform = plat.detect()
        if not platform.is_gpu:
            use_cpu_threads(settings.cpu.threads)
    runnable, outcomes = compiled_backends(spec, platform, names)
    if not runnable:
        return outcomes, str(platform)
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
    return outcomes, str(platform)


def can_fork() -> bool:
    """Whether this process may fork its backends' compiling processes: on Linux (a fork dies with
    this process: die_with_parent), with no thread but this one (a fork copies no other thread, and
    a lock one of them held stays held) and no device touched yet (CUDA and HIP refuse a context
    inherited across fork; each fork makes its own)."""
    return (sys.platform.startswith("linux") and threading.active_count() == 1
            and not torch.cuda.is_initialized())


def compile_apart(spec: JobSpec, names: list[str], clock) -> tuple[dict[str, dict], str]:
    """compile_here of each backend of `names` in a process forked from this one, all at once: the
    imports are this process's (paid once), and a job's kernels compile side by side (on an H200
    with cold caches, each job's aiter Triton kernel took 3-8 s and then FlexAttention's 14-18 s,
    one after the other: the compile ahead's 34.7 s, examples/h200-x2-acceptance-2026-11-28, run
    c1). Each fork's outcome and phases come back through a pipe; a fork that sent none (it
    crashed, or was killed) is a failed outcome with why."""
    forks = {name: fork_compiling(spec, name) for name in names}
    outcomes, platforms = {}, []
    for name, (pid, read) in forks.items():
        with os.fdopen(read, "rb") as pipe:
            sent = pipe.read()
        _, status = os.waitpid(pid, 0)
        try:
            found = json.loads(sent)
        except ValueError:
            found = {"outcomes": {name: {"status": "failed", "reason": "its compiling process ended without a "
                                         f"record (exit status {os.waitstatus_to_exitcode(status)})"}}, "phases": []}
        outcomes.update(found["outcomes"])
        platforms += [found["platform"]] if found.get("platform") else []
        clock.phases.extend(found["phases"])
    return outcomes, platforms[0] if platforms else str(plat.detect())


def fork_compiling(spec: JobSpec, name: str) -> tuple[int, int]:
    """A forked process that compiles backend `name` (compile_here) and sends what it did as JSON
    through a pipe, then ends: (its pid, the pipe's reading end)."""
    read, write = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid:
        os.close(write)
        return pid, read
    os.close(read)
    die_with_parent(parent)
    try:
        fork_clock = timeline.restart()
        outcomes, platform = compile_here(spec, [name], fork_clock)
        found = {"outcomes": outcomes, "platform": platform, "phases": fork_clock.record()["phases"]}
    except Exception as err:  # recorded: the job compiles for itself
        kind, why = classify_failure(err)
        found = {"outcomes": {name: {"status": "failed", "failure_kind": kind, "reason": why}}, "phases": []}
    except BaseException:  # interrupted: nothing sent, the parent records that this fork sent nothing
        end_now(1)
    with os.fdopen(write, "wb") as pipe:
        pipe.write(json.dumps(found).encode())
    end_now(0)  # no atexit hook of the parent's runs here; this fork's aiter configs folder removed


# prctl(2): the signal a process gets when the thread that forked it ends.
PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """This forked process is killed when its parent ends (Linux's PR_SET_PDEATHSIG): the compile
    ahead kills a compiling process that runs past its bound, and a fork of it must not go on
    compiling on the GPU while the run's jobs measure there. Ends at once where that cannot be
    set, or where the parent ended before it was."""
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0 or os.getppid() != parent:
        os._exit(1)


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
