"""One backend alone through the whole measurement, as a job's cell measures it: the tests' way in."""

from __future__ import annotations

import torch

from fabench.measure.backends.registry import Problem
from fabench.measure.cell import Cell
from fabench.measure.device.gpu_state import GpuState
from fabench.measure.spec import Measurement


def measure_backend(backend, problem: Problem, reference: torch.Tensor, job: Measurement, process: int = 0) -> dict:
    """One backend alone through the whole measurement (its trials, cross-checks): its raw entry."""
    cell = Cell(backend, problem, reference, job, process)
    if cell.setup():
        for index in range(job.timing.trials):
            if cell.live:
                cell.trial(index, GpuState(problem.platform))
    cell.release()
    return cell.finish()
