"""Where a measuring process's time goes: its phases, each with wall-clock start and end.

A process records what it did and when (imports, device set-up, the fp32 reference, each
backend's compile, check and trials, writing its result), as raw observations beside its
measurements; the analysis stage sums them into the report's time line (fabench.report.wall_clock).
Timestamps are seconds since the epoch (time.time()), so the phases of processes that ran one after
another, or side by side on two GPUs, lie on one axis.

One timeline per process: the module holds it, as the process is the unit that is timed.
`FABENCH_SPAWNED_AT`, set by the runner just before it starts the process, gives the interpreter's
own start-up its place on the line.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Iterator

SPAWNED_AT_ENV = "FABENCH_SPAWNED_AT"
FORMAT = "fabench-timeline/1"


class Timeline:
    def __init__(self) -> None:
        self.spawned_at = _spawned_at()
        self.phases: list[dict] = []

    @contextmanager
    def phase(self, name: str, backend: str | None = None, trial: int | None = None) -> Iterator[None]:
        """Time the block as phase `name` (of `backend`, in `trial` where they apply)."""
        began = time.time()
        try:
            yield
        finally:
            self.add(name, began, time.time(), backend, trial)

    def add(self, name: str, start: float, end: float, backend: str | None = None, trial: int | None = None) -> None:
        phase = {"phase": name, "start": start, "end": end}
        if backend is not None:
            phase["backend"] = backend
        if trial is not None:
            phase["trial"] = trial
        self.phases.append(phase)

    def record(self) -> dict:
        return {"format": FORMAT, "spawned_at": self.spawned_at, "phases": list(self.phases)}


def _spawned_at() -> float | None:
    try:
        return float(os.environ[SPAWNED_AT_ENV])
    except (KeyError, ValueError):
        return None


_current = Timeline()


def current() -> Timeline:
    return _current


def restart() -> Timeline:
    """A new timeline (a process that measures more than one job, as tests do, starts each anew)."""
    global _current
    spawned = _current.spawned_at
    _current = Timeline()
    _current.spawned_at = spawned
    return _current


def phase(name: str, backend: str | None = None, trial: int | None = None):
    return _current.phase(name, backend, trial)
