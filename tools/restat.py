"""Recompute the statistics of job results from the trials they recorded, after the statistics
method changed (the trials themselves, every figure measured, stay as they are).

    python tools/restat.py results/RUN [results/RUN2 ...]

Every per-job result under each folder (results/<run>/<variant>/<shape>.json) gets its backends'
`stats` (median, CI, spread, verdict), figures and host overhead recomputed by the current
fabench.measure.summary, its do_bench verdict re-judged where the recorded values allow
(recheck), and `method.ci_method` / `method.restated` saying so. The verdict's notes
(warm-up that did not settle, kernels that differed between processes, ...) are not in a result on
their own; they are taken back from the recorded verdict, and a recomputed verdict that differs
from the recorded one stops the tool. Files are rewritten atomically. Then re-collect and re-render
(snakemake ... report), which measures nothing again when the job results are newer than their
inputs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fabench.files import write_json
from fabench.gitinfo import git_commit
from fabench.measure import stats, summary


def notes_of(entry: dict) -> list[str]:
    """The recorded verdict's notes: its reasons without the spread reason stats.verdict adds."""
    reason = (entry.get("stats") or {}).get("unstable_reason") or ""
    return [part for part in reason.split("; ") if part and not part.startswith("trials spread ")]


def restat_entry(entry: dict, flops: float, stable_spread: float) -> None:
    before = (entry["stats"]["stable"], entry["stats"]["unstable_reason"])
    summary.complete_entry(entry, flops, stable_spread, notes_of(entry))
    after = (entry["stats"]["stable"], entry["stats"]["unstable_reason"])
    if after != before:
        raise SystemExit(f"verdict changed on recomputing: {before} -> {after}")


def recheck(entry: dict, tolerance: float) -> None:
    """The do_bench verdict with the current rules where the recorded values allow: a judged
    verdict becomes not judged when the GPU was power-capped (summary.power_capped)."""
    check = entry.get("cross_check")
    capped = summary.power_capped(entry["trials"], tolerance)
    if check and check["agrees"] is not None and capped:
        check.update(agrees=None, reason=f"GPU power-capped: {capped}")


def restat_file(path: Path, commit: str | None) -> None:
    result = json.loads(path.read_text())
    method = result["method"]
    for entry in result["backends"].values():
        if entry["trials"]:
            restat_entry(entry, result["flops"], method["stable_spread"])
            recheck(entry, method["cross_check"]["tolerance"])
    method["ci_method"] = stats.CI_METHOD
    method["restated"] = {"by": "tools/restat.py", "project_commit": commit,
                          "what": "stats recomputed from the recorded trials; trials unchanged"}
    write_json(path, result)


def main(argv: list[str]) -> int:
    commit = git_commit(Path(__file__).resolve().parents[1])
    for folder in map(Path, argv):
        files = [p for p in sorted(folder.glob("*/*.json")) if not p.name.endswith(".meta.json")]
        for path in files:
            data = json.loads(path.read_text())
            if isinstance(data, dict) and "backends" in data and "schema_version" in data:
                restat_file(path, commit)
                print(f"restated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
