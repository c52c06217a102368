"""tools/nvbench_table.py on the committed lease of issue 37 (examples/h200-x2-speed-2026-11-27): an
archived run's device medians beside nvbench's cold GPU medians, read from nvbench's own JSON.
Blind side: whether nvbench_peer.py times the same kernels as a run is checked on a GPU (the lease),
not here; this checks the pairing and the numbers read."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile

from workflow_util import REPO

EXAMPLE = REPO / "examples" / "h200-x2-speed-2026-11-27"
W7 = "archive/cuda-13.0/0002-c95e09ff/results.json"


def test_each_peer_state_is_paired_with_our_cell_of_the_same_backend_and_shape(tmp_path):
    with tarfile.open(EXAMPLE / "archive.tgz") as archive:
        archive.extract(W7, tmp_path, filter="data")
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "nvbench_table.py"), str(tmp_path / W7),
                           str(EXAMPLE / "nvbench.json")], capture_output=True, text=True, check=True)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in proc.stdout.splitlines()[2:]}
    assert len(rows) == 11  # 5 shapes x (cuDNN, flash) + native fp32 at seq 4096
    cudnn = rows["sdpa_cudnn (4, 4096, 8, 256)"]
    # Ours: w7's median and CI from its results; nvbench's: its cold GPU median (s) in its JSON.
    stats = next(r for r in json.loads((tmp_path / W7).read_text())["results"]
                 if r["variant"] == "default" and r["shape"]["seq"] == 4096)["backends"]["sdpa_cudnn"]["stats"]
    assert f"{stats['device_ms']['median'] * 1e3:.2f}" in cudnn and "478.50" in cudnn and cudnn.endswith("| 1.006 |")
    assert rows["native (4, 4096, 8, 256)"].endswith("| 1.010 |")


def test_without_both_files_it_says_how_it_is_used():
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "nvbench_table.py")], capture_output=True, text=True)
    assert proc.returncode == 2 and "Usage: python tools/nvbench_table.py RESULTS_JSON NVBENCH_JSON" in proc.stderr


def test_a_file_that_is_not_the_json_asked_for_is_one_line_of_error(tmp_path):
    not_json = tmp_path / "results.json"
    not_json.write_bytes(b"\x1f\x8b not json")
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "nvbench_table.py"), str(not_json),
                           str(EXAMPLE / "nvbench.json")], capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "are not a run's results.json and nvbench's JSON" in proc.stderr
