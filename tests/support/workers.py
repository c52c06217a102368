"""Measuring workers in tests: a folder of their own, and the workers found live in it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest

from fabench.measure.launch.worker_client import stop_workers


@pytest.fixture
def worker_dir():
    """A folder of workers of its own, short (a unix socket's path holds at most 107 bytes); its
    workers are stopped afterwards, killed if they do not answer."""
    folder = Path(tempfile.mkdtemp(prefix="fw-", dir="/tmp"))
    yield folder
    stop_workers(env={"FABENCH_WORKER_DIR": str(folder)})
    for pid in live_workers(folder):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(folder, ignore_errors=True)


def live_workers(folder: Path, round_: int | None = None) -> list[int]:
    """The pids of the workers recorded in `folder` whose processes still run; of round `round_`
    alone when given (on a GPU a job starts its other rounds' workers ahead: worker_client.start_ahead)."""
    pids = []
    for record in folder.glob("w-*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            recorded = json.loads(record.read_text())
            if round_ is not None and recorded["identity"]["round"] != round_:
                continue
            pid = int(recorded["pid"])
            if "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text():  # a zombie has ended
                pids.append(pid)
    return pids


def first_measuring_log(logs: Path, workflow) -> Path:
    """The first process log under a run's `logs` folder whose job began measuring (native set up),
    waited for while the workflow runs (at most 300 s)."""
    deadline = time.monotonic() + 300
    while True:
        found = next((log for log in logs.glob("*/*/process-0.log") if "native: setting up" in log.read_text()), None)
        if found is not None:
            return found
        assert time.monotonic() < deadline and workflow.poll() is None, "no job started measuring"
        time.sleep(0.05)
