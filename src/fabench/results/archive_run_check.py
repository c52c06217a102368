"""Whether a run directory is a finished run, ready to archive: its collected results.json passes
the collector's checks, its report.md exists, and no job it should have run is missing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import jsonschema

from fabench.results.archive_layout import ArchiveError
from fabench.results.collect import contract_problems, result_schema, run_problems, schema_problems
from fabench.shapes import shape_id


class IncompleteRun(ArchiveError):
    def __init__(self, run_dir: Path, reasons: list[str]):
        self.run_dir, self.reasons = run_dir, reasons
        super().__init__(f"{run_dir} is not a finished run: " + "; ".join(reasons))


def read_json(path: Path) -> tuple[object, str | None]:
    try:
        return json.loads(path.read_text()), None
    except FileNotFoundError:
        return None, f"{path.name} missing"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return None, f"{path.name}: not readable JSON ({err})"


def collected_problems(collected: object, schema: dict | None = None) -> list[str]:
    """The collector's checks (result schema, shape ids, one run, one result per job) on a
    collected results.json, each problem naming the result by its index."""
    if not isinstance(collected, dict) or not isinstance(collected.get("results"), list):
        return ['results.json: not {"run": ..., "results": [...]}']
    if not collected["results"]:
        return ["results.json: no results"]
    schema = schema or result_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    problems, valid = [], []
    for i, result in enumerate(collected["results"]):
        where = f"results.json $.results[{i}]"
        found = schema_problems(result, validator) or contract_problems(result)
        problems += [f"{where}{p[1:]}" if p.startswith("$") else f"{where}: {p}" for p in found]
        if not found:
            valid.append((where, result))
    if valid and not problems:
        problems = run_problems(valid)
        if not problems and collected.get("run") != valid[0][1]["run"]:
            problems.append(f"results.json $.run: {collected.get('run')!r} is not the results' run "
                            f"{valid[0][1]['run']!r}")
    return problems


def expected_jobs_from_config(config: dict) -> set[tuple[str, str]]:
    return {(variant, shape_id(shape)) for variant in config.get("variants", {}) for shape in config.get("shapes", [])}


def check_run(run_dir: Path, expected_jobs: Iterable[tuple[str, str]] | None = None, schema: dict | None = None,
              config: dict | None = None) -> dict:
    """The collected results of a finished run, or IncompleteRun naming every reason it is not.

    Jobs expected: `expected_jobs` when given, else every (variant, shape) of `config` (the run's
    config.json), else whatever results.json holds."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise IncompleteRun(run_dir, ["no such directory"])
    reasons = []
    collected, error = read_json(run_dir / "results.json")
    if error:
        reasons.append(error)
    else:
        reasons += collected_problems(collected, schema)
    if not (run_dir / "report.md").is_file():
        reasons.append("report.md missing")
    if not reasons:
        if expected_jobs is None and config is not None:
            expected_jobs = expected_jobs_from_config(config)
        have = {(r["variant"], r["shape_id"]) for r in collected["results"]}
        missing = sorted(set(expected_jobs or ()) - have)
        if missing:
            reasons.append(f"{len(missing)} job(s) missing from results.json: "
                           + ", ".join(f"{v}/{s}" for v, s in missing))
    if reasons:
        raise IncompleteRun(run_dir, reasons)
    return collected
