"""tools/placement_probe.py on a CPU host: what it refuses before it touches a device. Blind side:
the probe itself times GPU cells; what it found is committed in
examples/h200-local-memory-2026-11-28, and the driver call it shares with the pipeline is the GPU
test's (test_gpu_backends.py, local memory placed anew)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from workflow_util import REPO

PROBE = REPO / "tools" / "placement_probe.py"


@pytest.mark.parametrize("target, why", [("/dev/null", "is a device"), ("dangling", "a symbolic link to nothing")])
def test_the_probe_refuses_an_output_that_is_no_regular_file_before_it_starts(tmp_path, target, why):
    if target == "dangling":
        (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
        target = str(tmp_path / "dangling")
    proc = subprocess.run([sys.executable, str(PROBE), target], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and why in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "nowhere").exists()
