"""The runner's command line: one process of one job.

    python -m fabench.measure --spec '<job spec JSON>' --out PROCESS.json --process N [--aiter-config F] [...]

Some figures differ from process to process (a compiled kernel, the host's launch path), which
no number of trials inside one process can show, so a job is measured in `repeats` processes.
This process, which never touches the GPU (and does not import torch), starts
`python -m fabench.measure.job` for the job's process N and writes that process's result for a
later merge (`python -m fabench.results.merge`): the workflow runs a job's processes as jobs of their
own, in rounds across the run, so that the processes of one cell lie minutes apart and a drift
of the machine over minutes shows in the spread between them (see workflow/rules/benchmark.smk).
The workflow plans the count of the platform its jobs run on (fabench.planned_platform); a process
beyond the count of the platform the job finds (a plan for a GPU the job cannot see) writes a
marker that the merge skips.

A process that writes no result (killed, crashed, timed out), in either mode, leaves a record in
which every backend failed with why (fabench.measure.launch.launcher.no_result); the merge keeps the job's
other processes' figures beside it and lists every process's exit in the result's method.

Before its first measuring process starts, the runner takes the job's GPU (fabench.measure.launch.lease):
its processes see that GPU alone and inherit the lease, which ends when the last of them does.

--mode isolate (the default here) starts each measuring process anew; --mode worker hands the
process to the measuring worker of its GPU and round (fabench.measure.launch.worker_client), which keeps
torch and the compile caches from job to job: the workflow's default on the local executor
(docs/worker.md). --timeout-s ends a measuring process (or worker) that runs longer; that job
fails alone with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fabench.config import schema_default
from fabench.files import write_json
from fabench.gitinfo import git_commit
from fabench.measure.launch import lease as device_lease
from fabench.measure.launch.devices import DeviceError
from fabench.measure.invocation import (USAGE, config_bounded, job_arguments, measuring_environment, process_index,
                                        report_failure)
from fabench.measure.launch.launcher import no_result, supervise, timeout_reason
from fabench.measure.timeline import SPAWNED_AT_ENV
from fabench.measure.launch.worker_client import inputs_of, run_in_worker, start_ahead
from fabench.measure.record import SKIPPED_KEY
from fabench.places import remove_orphaned_scratch
from fabench.platforms import PlatformName
from fabench.watchdog import watch_workflow

JOB_MODULE = "fabench.measure.job"
MODES = ("isolate", "worker")
MEASURED_AGAIN_MAX = 1000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = job_arguments("python -m fabench.measure", __doc__.splitlines()[0])
    parser.add_argument("--process", type=process_index, metavar="N", required=True,
                        help="the job's process N (0-based) to run; its result is written for the merge")
    parser.add_argument("--mode", choices=MODES, default="isolate",
                        help="isolate: a new process per measuring process; worker: the GPU's worker of the round")
    parser.add_argument("--worker-idle-s", type=config_bounded("measure", "worker_idle_s"), default=None, metavar="S",
                        help="a worker started here ends after S seconds without a job "
                             "(default: the config's measure.worker_idle_s default)")
    parser.add_argument("--timeout-s", type=config_bounded("measure", "job_timeout_s"), default=None, metavar="S",
                        help="a measuring process still running after S seconds is killed and its job failed")
    parser.add_argument("--measured-again", type=lost_count_arg, default=0,
                        metavar="N", help="this process of the job was lost N times before (the workflow says so: "
                        "fabench.results.merge.times_lost); recorded with how it ended")
    args = parser.parse_args(argv)
    # Read only where a worker is started: the schema is YAML, and a container's measuring process
    # (isolate mode, the image without PyYAML: the report's dependencies stay on the host) has none.
    if args.worker_idle_s is None and args.mode == "worker":
        args.worker_idle_s = float(schema_default("measure", "worker_idle_s"))
    return args


def lost_count_arg(text: str) -> int:
    """argparse type of --measured-again: a count, 0 to MEASURED_AGAIN_MAX."""
    if not text.isdigit() or int(text) > MEASURED_AGAIN_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count from 0 to {MEASURED_AGAIN_MAX}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    """Run the job; when it fails, its last line of output is the reason, so that the terminal
    and the job's log both end with it (the workflow tees this process's output to the log)."""
    args = parse_args(argv)
    try:
        return run(args)
    except Exception as err:
        report_failure(err, args.spec, args.process)
        return 1


def run(args: argparse.Namespace) -> int:
    watch_workflow()
    commit = args.project_commit or git_commit(Path(__file__).parent)
    args.workers_started = start_workers_before_lease(args)
    try:
        lease = device_lease.acquire()
    except DeviceError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    # When this launcher started and held its GPU: with the measurement's start, they split the time
    # between one job's measurement and the next into Snakemake's, this launcher's and the lease's
    # (fabench.report.wall_clock.between_jobs).
    args.launcher = {"started_at": process_started_at(), "leased_at": time.time()}
    if lease.source == "none":
        print(f"[fabench] no GPU to lease ({lease.found_by}): measuring without one", flush=True)
    else:
        print(f"[fabench] GPU {lease.gpu} ({lease.source}): {lease.visible_devices}", flush=True)
    with lease:
        args.lease = lease
        return one_process(args, commit)


def start_workers_before_lease(args: argparse.Namespace) -> list[str]:
    """In worker mode on a host whose pool is one GPU, start that GPU's measuring workers for the job's
    rounds (those not running) before waiting for its lease: a worker only imports until a job hands
    it the lease (~15 s on an H200), so it starts while another job measures, not while this one
    holds the GPU. On a GPU test step 8 jobs queued for one card's lease, each then holding it
    through its worker's start-up (examples/h200-x2-compile-ahead-2026-11-27). Where the pool is
    several GPUs, the lease picks one first (rounds_ahead); none on a CPU."""
    if args.mode != "worker":
        return []
    predicted = device_lease.sole_gpu()
    if predicted is None:
        return []
    rounds = list(rounds_ahead(args.spec, predicted))
    return start_ahead(predicted, rounds, args.worker_idle_s, args.spec.settings.backends,
                       inputs_of([args.spec])) if rounds else []


def process_started_at() -> float | None:
    """When this process started (epoch seconds, to the kernel's 10 ms ticks), its interpreter's
    start-up included, from /proc (Linux); None elsewhere. The boot clock is read the same way,
    not /proc/stat's boot time, which is whole seconds."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started_after_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - started_after_boot)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def one_process(args: argparse.Namespace, commit: str | None) -> int:
    """The job's process N alone: its result, with how it ended, for the merge; when it wrote
    none, in either mode, the record that says why for every backend."""
    result, ended = measured(args, commit, args.process)
    if refused(result, ended):
        return USAGE
    if result is None:
        platform = args.spec.platform or ("cpu" if args.lease.gpu is None else None)
        result = no_result(args.spec, platform, str(args.aiter_config) if args.aiter_config else None, commit,
                           [ended])
    if SKIPPED_KEY not in result:
        result["method"]["process_exits"] = [ended]
        result["provenance"]["command"] = runner_command()
    write_json(args.out, result)
    return 0


def measured(args: argparse.Namespace, commit: str | None, index: int) -> tuple[dict | None, dict]:
    """Run measuring process `index`: its result (None when it wrote none) and how it ended."""
    with tempfile.TemporaryDirectory(prefix="fabench-process-") as tmp:
        out = Path(tmp) / "process.json"
        if args.mode == "worker":
            ended = in_worker(args, commit, index, out)
        else:
            ended = run_process(args, commit, index, out)
        result = json.loads(out.read_text()) if out.is_file() else None
    if result is None:  # killed, crashed or timed out: what it could not remove itself
        # A worker that ended mid-job (no exit code) is not this launcher's child: wait for its end.
        lost_worker = (ended.get("worker") or {}).get("pid") if ended.get("exit_code") is None else None
        remove_orphaned_scratch(lost_worker)
    again = {"measured_again": args.measured_again} if args.measured_again else {}
    return result, {"index": index, **ended, "wrote_result": result is not None, **again, "launcher": args.launcher}


def in_worker(args: argparse.Namespace, commit: str | None, index: int, out: Path) -> dict:
    """Measuring process `index`, measured by the worker of the lease's GPU and round `index`."""
    request = {"spec": args.spec.to_json(), "aiter_config": str(args.aiter_config) if args.aiter_config else None,
               "project_commit": commit, "process": index, "out": str(out), "lease": args.lease.record()}
    print(f"[fabench] process {index}: measuring worker of round {index}", flush=True)
    ahead = rounds_ahead(args.spec, args.lease)
    return run_in_worker(request, args.lease, index, args.worker_idle_s, args.timeout_s, rounds_ahead=ahead,
                         start_up=args.spec.settings.backends if ahead else (),
                         started_here=tuple(args.workers_started), inputs=inputs_of([args.spec]) if ahead else [])


def rounds_ahead(spec, lease) -> range:
    """The rounds whose workers a job starts ahead (worker_client.start_ahead): every round of a
    job planned for a GPU and leased one; none on a CPU, where a worker's start-up would take the
    cores the job's figures are timed on. On a GPU the workers also make their backends' start-up
    imports (registry.Backend.start_up); on a CPU none, as no worker starts ahead there."""
    if lease.gpu is None or spec.platform is None or not PlatformName.parse(spec.platform).is_gpu:
        return range(0)
    return range(spec.settings.timing_on(spec.platform).repeats)


def refused(result: dict | None, ended: dict) -> bool:
    """The process refused the spec (its one line is on stderr already): no result to write."""
    return result is None and ended["exit_code"] == USAGE


def runner_command() -> list[str]:
    """How this runner was started, for the result's provenance (each process records its own)."""
    return [sys.executable, "-m", "fabench.measure", *sys.argv[1:]]


def run_process(args: argparse.Namespace, commit: str | None, index: int, out: Path) -> dict:
    """One measuring process: its exit code, when it was started and when it had ended (seconds
    since the epoch, for the run's time line), and why it ended when it was killed for running
    past --timeout-s (fabench.measure.launch.launcher.supervise: SIGTERM to this one ends it too)."""
    cmd = [sys.executable, "-m", JOB_MODULE, "--spec", args.spec.to_json(), "--out", str(out),
           "--process-index", str(index)]
    if args.aiter_config is not None:
        cmd += ["--aiter-config", str(args.aiter_config)]
    if commit:
        cmd += ["--project-commit", commit]
    print(f"[fabench] process {index}: {JOB_MODULE}", flush=True)
    env = measuring_environment(args.lease)
    spawned_at = time.time()
    env[SPAWNED_AT_ENV] = repr(spawned_at)
    child = subprocess.Popen(cmd, env=env, pass_fds=args.lease.inheritable_fds())
    code, timed_out = supervise(child.pid, child.wait, args.timeout_s)
    ended = {"exit_code": code, "spawned_at": spawned_at, "exited_at": time.time()}
    if timed_out:
        ended["reason"] = timeout_reason(args.timeout_s, "its measuring process")
    return ended
