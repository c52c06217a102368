"""A GPU lease folder of a test's own, for the tests whose jobs measure on a GPU where one is seen.

On a GPU host the GPU tests run side by side on one card (tools/gpu-lease.sh). With the card's one
lease folder every test's job queued for the card behind every other test's: the step lasted as
long as all their jobs together, and a test that measures for seconds waited minutes. These tests
check what a job records and how its processes and workers behave, not its figures, so each takes
a lease folder of its own and measures beside the others. Blind side: their figures are timed with
other tests' jobs on the card. That a job measures alone on its GPU is the lease's rule, tested in
tests/test_lease.py; the timing-sensitive backend tests (tests/test_gpu_backends.py) run alone on
the card. On a CPU no lease is taken, and the folder stays unmade.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fabench.places import LEASE_DIR_ENV


def lease_of_its_own(folder: Path) -> dict[str, str]:
    """The environment that gives a test's jobs the lease folder `folder`/lease."""
    return {LEASE_DIR_ENV: str(folder / "lease")}


@pytest.fixture
def own_lease(tmp_path, monkeypatch) -> Path:
    """This test's lease folder, set in its environment (FABENCH_LEASE_DIR) for the jobs it starts."""
    [(key, value)] = lease_of_its_own(tmp_path).items()
    monkeypatch.setenv(key, value)
    return Path(value)
