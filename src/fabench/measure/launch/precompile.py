"""Compile ahead: before a run's first measuring process, the kernels of every job that is to be
measured built at once, in processes side by side on one leased GPU, while no job is timed.

    python -m fabench.measure.launch.precompile --spec JSON [--spec JSON ...] --out RECORD.json
        [--timeout-s S] [--mode worker --worker-idle-s S]
    python -m fabench.measure.launch.precompile --skip WHY --out RECORD.json

Why: the jobs of a round run one after another on a GPU, and each compiled its backends' kernels
in its first call while holding the GPU. With cold caches that was 45.5 s of a default run on an
H200 (FlexAttention ~4 s a shape at d=256, aiter's Triton kernel, FlashAttention-4;
examples/h200-x2-speed-2026-11-27), spent one after another on the run's critical path. Compiling
is mostly host work (Inductor, Triton's and the CuTe DSL's compilers), so one process per job
(fabench.measure.precompile_child) builds them side by side here, and the jobs find them cached. No
timed job runs meanwhile: it is checkpoint compile_ahead (workflow/rules/benchmark.smk), whose record every
measure job waits for, and it holds the GPU's lease (fabench.measure.launch.lease) so that no other
workflow's job measures there either. With --skip it compiles nothing, touches no device and
records why (measure.compile_ahead, the runtime, the executor: Plan.not_compiling_ahead).

In worker mode the measuring workers of the leased GPU are started here too
(worker_client.start_ahead): they import while the kernels compile, and touch no device.

A job whose kernels were compiled ahead before, into the same compile cache, is not compiled again:
each compile ahead that succeeded leaves a stamp (STAMPS, beside the caches) named by what its
kernels depend on (stamp_facts: the job's spec, the host and GPU, the compilers' and kernels'
versions, this fabench's code by content, the cache folders), so that a warm run starts no
compiling process, whose imports alone cost seconds before the run's first job.
A stamp outliving what it stands for (a cache folder emptied by hand) costs only speed: the job
compiles for itself. Deleting build/compile-cache/ deletes both.

Torch-free, as the runner is. --timeout-s bounds the whole compile ahead (compile_all). Nothing
here fails the workflow: a process that fails, times out or cannot start is recorded with why, and
its job compiles for itself as before; a GPU that cannot be leased is a record that skipped, and
why. The record (results/<run>/compile-ahead.json, an input of rule write_report, which puts one
that compiled into results.json) gives the report's time line its span.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fabench.files import write_json
from fabench.gitinfo import code_fingerprint, package_version
from fabench.measure.invocation import (CACHE_ENV, COMPILE_CACHE, Parser, config_bounded, job_spec_arg,
                                        measuring_environment)
from fabench.measure.launch import lease as device_lease
from fabench.measure.launch.devices import DeviceError
from fabench.measure.launch.launcher import TIMEOUT_KEY, exit_text, kill, timeout_reason
from fabench.measure.launch.runner import MODES, process_started_at, rounds_ahead
from fabench.measure.launch.worker_client import inputs_of, start_ahead
from fabench.measure.timeline import SPAWNED_AT_ENV
from fabench.side_files import STAMP, SideFileError, read_side_file, stamp_path_problem
from fabench.watchdog import watch_workflow

FORMAT = "fabench-compile-ahead-run/1"
CHILD_MODULE = "fabench.measure.precompile_child"
# Where a successful compile ahead of a job leaves its stamp (under the working directory's caches).
STAMPS = COMPILE_CACHE / "compiled-ahead"
# The distributions whose versions the compiled kernels depend on (absent ones: None).
COMPILERS = ("torch", "triton", "amd-aiter", "flash-attn-4", "nvidia-cutlass-dsl", "quack-kernels",
             "apache-tvm-ffi")
# Cores left to the measuring workers started alongside and to the host itself.
CORES_KEPT = 2
# The job settings a compiling process reads: which backends, the inputs' type, draw and mask, and on a
# CPU the backends left out and the threads (fabench.measure.precompile_child).
KERNEL_SETTINGS = ("backends", "causal", "dtype", "seed")
KERNEL_CPU_SETTINGS = ("leave_out", "threads")
POLL_S = 0.05


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog="python -m fabench.measure.launch.precompile", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=job_spec_arg, action="append", default=[],
                        help="a job spec (JSON) whose kernels to build; one per job")
    parser.add_argument("--skip", metavar="WHY", help="compile nothing, touch no device: a record saying why")
    parser.add_argument("--out", type=Path, required=True, help="the record of what was compiled, JSON")
    parser.add_argument("--timeout-s", type=config_bounded("measure", "job_timeout_s"), default=None, metavar="S",
                        help="the whole compile ahead's bound: after S seconds what still compiles is killed and what "
                             "waits is not started (their jobs compile themselves)")
    parser.add_argument("--mode", choices=MODES, default="isolate",
                        help="worker: the leased GPU's measuring workers are started here as well")
    parser.add_argument("--worker-idle-s", type=config_bounded("measure", "worker_idle_s"), default=None, metavar="S")
    args = parser.parse_args(argv)
    if bool(args.spec) == bool(args.skip):
        parser.error("give either --spec (one or more) or --skip")
    return args


def parallel_processes(jobs: int, cores: int) -> int:
    """How many compiling processes run at once: one per job, on the host's cores less CORES_KEPT,
    at least one. Each compiles with one thread (TORCHINDUCTOR_COMPILE_THREADS, MEASURING_ENV)."""
    return max(1, min(jobs, cores - CORES_KEPT))


def stamp_facts(spec, lease, env: dict, code: str) -> dict:
    """What a job's compiled kernels depend on: its spec's kernel facts (kernel_facts), the host and
    the GPU (its visibility: a card's UUID), the compilers' versions, this fabench's code (`code`:
    gitinfo.code_fingerprint, the workers' notion of the code too), and the cache folders they
    were written to."""
    return {"job": kernel_facts(spec), "host": socket.gethostname(), "gpu": lease.gpu,
            "visible_devices": lease.visible_devices, "python": sys.executable,
            "versions": {name: package_version(name) for name in COMPILERS},
            "code": code, "caches": {key: env.get(key) for key in CACHE_ENV}}


def kernel_facts(spec) -> dict:
    """The part of a job's spec its compiling process reads (fabench.measure.precompile_child):
    the spec but the run's name and the settings that only say how the job is timed and judged
    (timing, the counts, the tolerance, the roles), which build no kernel. So the preview
    (config/preview.yaml: other timing, the same shapes and variants) finds the kernels a default
    run compiled ahead, and the other way round; a run's name is no part of its kernels either."""
    job = {key: value for key, value in spec.to_dict().items() if key != "run"}
    settings = job["settings"]
    job["settings"] = {**{key: settings[key] for key in KERNEL_SETTINGS},
                       "cpu": {key: settings["cpu"][key] for key in KERNEL_CPU_SETTINGS}}
    return job


def stamp_path(facts: dict) -> Path:
    return Path.cwd() / STAMPS / f"{hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:32]}.json"


def stamped(stamp: Path | None, spec) -> bool:
    """Whether `stamp` says the job of `spec` was compiled ahead: a regular file (not a link) that
    its schema accepts (fabench.side_files), of this job. Any other stamp is no stamp:
    the job compiles ahead again and its stamp is written anew."""
    if stamp is None or not os.path.lexists(stamp):
        return False
    try:
        found = read_side_file(stamp, STAMP)
    except SideFileError as err:
        print(f"[fabench] compile ahead: {err}; not a stamp, compiled again", flush=True)
        return False
    return (found["variant"], found["shape_id"]) == (spec.variant, spec.shape_id)


def compiled_whole(process: dict) -> bool:
    """Whether a compiling process built every kernel its job compiles here (nothing failed)."""
    return not process.get("reason") and all(o.get("status") in ("compiled", "unavailable")
                                             for o in (process.get("backends") or {}).values())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    watch_workflow()
    started_at = process_started_at() or time.time()
    if args.skip:
        return skipped(args.out, started_at, args.skip)
    try:
        lease = device_lease.acquire()
    except DeviceError as err:  # the jobs lease for themselves and say why: nothing compiled, the run goes on
        return skipped(args.out, started_at, f"no device leased: {err}")
    leased_at = time.time()
    with lease:
        workers = start_workers(args, lease)
        stamps = job_stamps(args.spec, lease)
        todo = [index for index in range(len(args.spec)) if not stamped(stamps.get(index), args.spec[index])]
        cached = [{"variant": args.spec[i].variant, "shape_id": args.spec[i].shape_id}
                  for i in stamps if i not in todo]
        parallel = parallel_processes(len(todo), len(os.sched_getaffinity(0)))
        print(f"[fabench] compiling ahead: the kernels of {len(todo)} job(s), {parallel} process(es) at a time, on "
              f"{'GPU ' + lease.gpu if lease.gpu else 'this host'}; no job is timed meanwhile"
              + (f" ({len(cached)} job(s) compiled ahead before, into this compile cache)" if cached else ""),
              flush=True)
        processes = compile_all([args.spec[i] for i in todo], lease, parallel, args.timeout_s) if todo else []
        write_stamps({index: stamps.get(index) for index in todo}, processes)
    ended_at = time.time()
    record = {"format": FORMAT, "started_at": started_at, "leased_at": leased_at, "ended_at": ended_at,
              "host": socket.gethostname(), "gpu": lease.gpu, "gpu_uuid": (lease.visible_devices or {}).get("CUDA_VISIBLE_DEVICES"),
              "parallel": parallel, "workers_started": len(workers), "processes": processes, "cached": cached}
    write_json(args.out, record)
    print(f"[fabench] compiled ahead in {ended_at - leased_at:.1f} s: {compiled_count(processes)} compiled "
          f"backend(s)' first calls in {len(processes)} process(es), "
          f"{sum(1 for p in processes if p.get('reason'))} of them failed", flush=True)
    return 0


def skipped(out: Path, started_at: float, why: str) -> int:
    """The record of a compile ahead that compiled nothing, and why; it exits 0 (nothing here fails
    the workflow): the report's input exists, and the report says no kernel was compiled ahead."""
    write_json(out, {"format": FORMAT, "started_at": started_at, "ended_at": max(started_at, time.time()),
                     "skipped": why})
    print(f"[fabench] compiling ahead: nothing ({why})", flush=True)
    return 0


def start_workers(args: argparse.Namespace, lease) -> list[str]:
    """In worker mode, the leased GPU's measuring workers started (worker_client.start_ahead): they
    import while the kernels compile; each draws the inputs of every job of the run, in the jobs'
    order (as many as it keeps). Their names."""
    if args.mode != "worker" or args.worker_idle_s is None:
        return []
    return start_ahead(lease, list(rounds_ahead(args.spec[0], lease)), args.worker_idle_s,
                       args.spec[0].settings.backends, inputs_of(args.spec))


def job_stamps(specs: list, lease) -> dict[int, Path]:
    """Each job's stamp path (by its index), or none at all where the stamps' folder cannot be
    used (said on one line; every job then compiles ahead, and no stamp is written)."""
    unusable = stamp_path_problem(STAMPS)
    if unusable:
        print(f"[fabench] compile ahead: the stamps' folder is not used: {unusable}", flush=True)
        return {}
    env, code = measuring_environment(lease), code_fingerprint()
    return {index: stamp_path(stamp_facts(spec, lease, env, code)) for index, spec in enumerate(specs)}


def write_stamps(stamps: dict[int, Path | None], processes: list[dict]) -> None:
    """A stamp for each job (`stamps`: its path by the job's index, in the order `processes` ran)
    whose process built every kernel; a stamp that cannot be written costs only speed (the next
    run compiles that job ahead again)."""
    for (index, stamp), process in zip(stamps.items(), processes):
        if stamp is None or stamp.is_symlink() or not compiled_whole(process):
            continue
        try:
            write_json(stamp, {"variant": process["variant"], "shape_id": process["shape_id"],
                               "compiled_at": process["exited_at"], "backends": process["backends"]})
        except (OSError, ValueError) as err:
            print(f"[fabench] compile ahead: no stamp written ({err})", flush=True)


def compiled_count(processes: list[dict]) -> int:
    """How many backends' first calls the compiling processes made."""
    return sum(1 for p in processes for o in (p.get("backends") or {}).values() if o.get("status") == "compiled")


def compile_all(specs: list, lease, parallel: int, timeout_s: float | None) -> list[dict]:
    """Each spec's compiling process, `parallel` at a time: the record of each (its own, with how it
    ended), in the specs' order. SIGTERM (the workflow cancelled) ends them all.

    `timeout_s` bounds the whole compile ahead, not each process: the workflow's first job waits
    for it, holding nothing but this lease. What still runs then is killed, and what has not started
    is not (recorded with why): those jobs compile for themselves."""
    env = measuring_environment(lease)
    deadline = None if timeout_s is None else time.time() + timeout_s
    waiting = list(enumerate(specs))
    running: dict[int, tuple[subprocess.Popen, dict, Path]] = {}
    done: dict[int, dict] = {}

    def cancel(signum, frame):
        for child, _, _ in running.values():
            kill(child.pid, signal.SIGKILL)
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, cancel)
    try:
        with tempfile.TemporaryDirectory(prefix="fabench-compile-ahead-") as tmp:
            while waiting or running:
                while waiting and deadline is not None and time.time() > deadline:
                    index, spec = waiting.pop(0)
                    done[index] = {"variant": spec.variant, "shape_id": spec.shape_id,
                                   "reason": f"not started: the compile ahead's bound of {timeout_s:g} s "
                                             f"({TIMEOUT_KEY}) had passed"}
                while waiting and len(running) < parallel:
                    index, spec = waiting.pop(0)
                    out = Path(tmp) / f"{index}.json"
                    spawned_at = time.time()
                    child = subprocess.Popen(
                        [sys.executable, "-m", CHILD_MODULE, "--spec", spec.to_json(), "--out", str(out)],
                        env={**env, SPAWNED_AT_ENV: repr(spawned_at)}, stdin=subprocess.DEVNULL,
                        pass_fds=lease.inheritable_fds())
                    running[index] = (child, {"variant": spec.variant, "shape_id": spec.shape_id,
                                              "spawned_at": spawned_at}, out)
                for index, (child, ended, out) in list(running.items()):
                    code = child.poll()
                    late = deadline is not None and time.time() > deadline
                    if code is None and not late:
                        continue
                    if code is None:
                        kill(child.pid, signal.SIGKILL)
                        code = child.wait()
                        ended["reason"] = timeout_reason(timeout_s, "its compiling process")
                    del running[index]
                    done[index] = finished(ended, code, out)
                time.sleep(POLL_S)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return [done[i] for i in sorted(done)]


def finished(ended: dict, code: int, out: Path) -> dict:
    """A compiling process's record, with how it ended; why, when it wrote none."""
    ended = {**ended, "exit_code": code, "exited_at": time.time()}
    try:
        record = json.loads(out.read_text())
    except (OSError, ValueError):
        return {**ended, "reason": ended.get("reason") or f"it wrote no record: it {exit_text(code)}"}
    if record.get("failed"):
        ended["reason"] = record["failed"]
    return {**record, **ended}


if __name__ == "__main__":
    sys.exit(main())
