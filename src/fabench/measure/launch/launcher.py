"""What the two ways of running a measuring process share (isolate: a process of its own,
fabench.measure.launch.runner; worker: a measuring worker, fabench.measure.launch.worker_client): the timeout,
SIGTERM passed on, how the end is told, and the record of a process that wrote no result.

Both fail the same way: a measuring process (or the worker measuring it) that ends without a
result, killed, crashed or timed out, leaves a record in which every backend failed with that
reason (`no_result`); the merge keeps the job's other processes' figures beside it. Torch-free:
the runner never imports the measuring code.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from typing import Callable, TypeVar

from fabench.aiter_config import file_sha256
from fabench.config import roles_error, sha256_json
from fabench.measure.invocation import JobError
from fabench.measure.spec import JobSpec
from fabench.measure.record import (FLOP_CONVENTION, PROCESS_FAILED_KEY, SCHEMA_VERSION, backend_entry,
                                    method_settings)

STOP_AFTER_TERM_S = 30.0  # a cancelled measuring process gets this long to end before it is killed
TIMEOUT_KEY = "measure.job_timeout_s"
T = TypeVar("T")


def supervise(pid: int, wait: Callable[[], T], timeout_s: float | None) -> tuple[T, bool]:
    """wait()'s value while process `pid` measures, and whether it was killed for running past
    `timeout_s`. SIGTERM to this launcher (the job cancelled, the workflow gone) is passed on,
    SIGKILL following after STOP_AFTER_TERM_S, and this launcher then ends with 128 + SIGTERM.
    The handlers only signal: they interrupt wait(), which may hold a lock they would need."""
    stopped: list[int] = []
    timed_out: list[bool] = []

    def cancel(signum, frame):
        stopped.append(signum)
        kill(pid, signal.SIGTERM)
        later(STOP_AFTER_TERM_S, lambda: kill(pid, signal.SIGKILL))

    def expire():
        timed_out.append(True)
        kill(pid, signal.SIGKILL)

    previous = signal.signal(signal.SIGTERM, cancel)
    timer = later(timeout_s, expire) if timeout_s else None
    try:
        value = wait()
    finally:
        if timer is not None:
            timer.cancel()
        signal.signal(signal.SIGTERM, previous)
    if stopped:
        raise SystemExit(128 + stopped[0])
    return value, bool(timed_out)


def later(seconds: float, action: Callable[[], None]) -> threading.Timer:
    timer = threading.Timer(seconds, action)
    timer.daemon = True  # never keeps the launcher alive
    timer.start()
    return timer


def kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def timeout_reason(timeout_s: float, what: str) -> str:
    return f"timed out after {timeout_s:g} s ({TIMEOUT_KEY}): {what} was killed"


def exit_text(code: int | None) -> str:
    """How a measuring process ended, in words."""
    if code is None:
        return "ended without an exit code"
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        hint = " (on Linux usually the out-of-memory killer)" if -code == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {code}"


def no_result(spec: JobSpec, platform: str | None, kernel_config: str | None, commit: str | None,
              processes: list[dict]) -> dict:
    """The record of a job process that wrote no result: every backend failed with why. `platform`:
    the one the job measures on (the plan's, else None: a host without a GPU lease is a CPU)."""
    if platform is None:
        raise JobError("no process of the job wrote a result, and the spec names no platform for its record: "
                       + describe(processes))
    problem = roles_error(spec.settings.roles, platform)
    if problem:
        raise JobError(problem)
    reason = f"no process of the job wrote a result: {describe(processes)}"
    settings = spec.settings
    measured_with = settings.measurement(platform, flops=None)
    return {
        "schema_version": SCHEMA_VERSION, "run": spec.run, "variant": spec.variant,
        "shape": spec.shape_dict, "shape_id": spec.shape_id, "dtype": settings.dtype, "causal": settings.causal,
        "platform": platform, "roles": settings.roles[platform],
        "method": {**method_settings(measured_with), "device_timer": None, "device_time": None,
                   "gpu_state": {"source": None, "reason": "no process measured"}, "process_exits": processes},
        "flops": None, "flop_convention": FLOP_CONVENTION,
        "tolerance": {"max_abs_err": settings.tolerance.max_abs_err, "min_cosine": settings.tolerance.min_cosine},
        "kernel_config": {"path": kernel_config, "sha256": file_sha256(kernel_config) if kernel_config else None,
                          "values": dict(spec.triton)},
        "reference": {"status": "failed", "failure_kind": "error", "reason": reason},
        # The registry's labels need torch: a record of nothing measured names each backend as configured.
        "backends": {name: backend_entry(name, status="failed", failure_kind="error", reason=reason)
                     for name in settings.backends},
        "provenance": {**_provenance(processes[0]["index"], commit),
                       "config_sha256": sha256_json(settings.to_dict())},
        PROCESS_FAILED_KEY: True,
    }


def describe(processes: list[dict]) -> str:
    return "; ".join(f"process {p['index']} {p.get('reason') or exit_text(p['exit_code'])}" for p in processes)


def _provenance(process: int, commit: str | None) -> dict:
    """What the launcher knows of where it ran; the device's facts are the measuring process's."""
    unknown = ("device", "arch", "driver", "cuda", "hip", "torch", "triton", "aiter", "aiter_commit")
    now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    return {"started": now, "finished": now, "process": process, "host": socket.gethostname(),
            **dict.fromkeys(unknown), "runtime": os.environ.get("FABENCH_RUNTIME", "local"),
            "image": os.environ.get("FABENCH_IMAGE"), "image_id": os.environ.get("FABENCH_IMAGE_ID"),
            "project_commit": commit,
            "command": [sys.executable, "-m", "fabench.measure", *sys.argv[1:]], "cwd": os.getcwd()}
