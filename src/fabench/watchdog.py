"""Stop a job whose workflow is gone.

A Snakemake killed with SIGKILL leaves its running jobs behind; on a GPU host such an orphan would
go on timing kernels beside the restarted job. The workflow exports "<host>:<pid>" of itself as
FABENCH_WORKFLOW; a job started on the same host checks every few seconds that the process still
exists, and sends itself SIGTERM when it does not, so the job's own clean-up runs (the container
job removes its container, the runner writes no result). A job on another host (a cluster node)
cannot see the workflow's process and watches nothing.
"""

from __future__ import annotations

import os
import signal
import socket
import threading

WORKFLOW_ENV = "FABENCH_WORKFLOW"


def workflow_marker() -> str:
    """What the workflow exports about itself: "<host>:<pid>"."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def watch_workflow(interval_s: float = 2.0) -> threading.Thread | None:
    """Start a daemon thread that ends this process when the workflow named in the environment
    exits. Without FABENCH_WORKFLOW (a job started by hand), or from another host, nothing is
    watched."""
    host, _, told = os.environ.get(WORKFLOW_ENV, "").strip().rpartition(":")
    if not told.isdigit() or host != socket.gethostname():
        return None
    pid = int(told)

    def watch() -> None:
        stop = threading.Event()
        while not stop.wait(interval_s):
            if not _alive(pid):
                print(f"[fabench] the workflow (pid {pid}) is gone: stopping this job", flush=True)
                os.kill(os.getpid(), signal.SIGTERM)
                return

    thread = threading.Thread(target=watch, name="fabench-watchdog", daemon=True)
    thread.start()
    return thread
