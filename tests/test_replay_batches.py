"""tools/replay_batches.py on a committed H200 run (examples/h200-x2-house-2026-11-28, the final
code's second run): the replay's model reproduces the record, the current batch sizing never takes
more host time than the one before it, the rebuilt run holds only samples that were measured, and
the store accepts it (how docs/timing.md's figures for the sizing were made).

Blind side: the model charges every profiled batch the same fixed cost; it is checked by the
sample counts it reproduces, not by the host time of batches the record does not itemize.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fabench.results.archive_read import list_entries
from fabench.results.named_runs import archive_root

REPO = Path(__file__).resolve().parents[1]
ARCHIVE = "examples/h200-x2-house-2026-11-28/archive-final-code.tar.xz"


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def test_the_replayed_sizing_cuts_host_time_keeps_measured_samples_only_and_stores(tmp_path):
    entry = list_entries(archive_root(ARCHIVE, REPO, tmp_path))[1]
    recorded = {(r["variant"], r["shape_id"], name, t["process"], t["index"]): t["kernel_samples_ms"]
                for r in json.loads((entry.path / "results.json").read_text())["results"]
                for name, e in r["backends"].items() for t in e.get("trials") or []}
    tallies = {}
    for sizing in ("before", "current"):
        done = cli(tmp_path, str(REPO / "tools" / "replay_batches.py"), str(entry.path), str(tmp_path / sizing),
                   "--sizing", sizing)
        assert done.returncode == 0, done.stderr
        tallies[sizing] = json.loads(done.stdout)
    before, current = tallies["before"], tallies["current"]
    assert before["trials"] == current["trials"] == 240
    assert before["reproduced"] >= 0.75 * before["trials"]  # the model: 191 of 240 on this run
    assert before["chosen_ms"] == before["before_ms"] == current["before_ms"]
    assert current["chosen_ms"] < 0.95 * current["before_ms"]  # 22.4 s against 25.6 s on this run

    rebuilt = json.loads((tmp_path / "current" / "results.json").read_text())["results"]
    for r in rebuilt:
        for name, e in r["backends"].items():
            for t in e.get("trials") or []:
                kept = t["kernel_samples_ms"]
                whole = recorded[(r["variant"], r["shape_id"], name, t["process"], t["index"])]
                assert kept == whole[:len(kept)] and t["stop"]["samples"] == len(kept)
                if t.get("chunk_calls"):
                    assert sum(t["chunk_calls"]) == len(kept)

    stored = cli(tmp_path, "-m", "fabench.cli", "archive", "store", str(tmp_path / "current"),
                 "--root", str(tmp_path / "replayed"))
    assert stored.returncode == 0, stored.stderr
    assert len(list_entries(tmp_path / "replayed")) == 1


def test_a_run_folder_inside_the_archive_is_refused(tmp_path):
    entry = list_entries(archive_root(ARCHIVE, REPO, tmp_path))[0]
    done = cli(tmp_path, str(REPO / "tools" / "replay_batches.py"), str(entry.path), str(entry.path.parent / "x"))
    assert done.returncode == 2 and "lies in the archive" in done.stderr
    assert not (entry.path.parent / "x").exists()
