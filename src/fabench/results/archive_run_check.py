"""Whether a run directory is a finished run, ready to archive: its resolved config is there, its
collected results.json passes the collector's checks, its report.md exists, and every job of its
config (and every job a caller names) has its result file and its result in results.json. Its
config is checked against the config schema as the workflow checks a config, and a preview
(config.preview: too few samples to compare versions by) is refused. Every way into the archive
(the archive rule, `fabench archive store`, archive_run) applies this check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import jsonschema

from fabench import files
from fabench.analysis.result_types import method_of
from fabench.config import config_schema, consistency_error, schema_error
from fabench.files import JsonReadError
from fabench.results.archive_layout import ArchiveError
from fabench.results.collect import contract_problems, result_schema, run_problems, schema_problems
from fabench.shapes import shape_id


class IncompleteRun(ArchiveError):
    def __init__(self, run_dir: Path, reasons: list[str]):
        self.run_dir, self.reasons = run_dir, reasons
        super().__init__(f"{run_dir} is not a finished run: " + "; ".join(reasons))


class PreviewRun(ArchiveError):
    """A preview (config.preview) is never archived: the message says why, on one line."""

    def __init__(self, run_dir: Path):
        super().__init__(f"{run_dir} is a preview (config.preview: true), too few samples to compare versions by: "
                         "not archived; measure a run without config/preview.yaml to keep it")


def read_json(path: Path) -> tuple[object, str | None]:
    try:
        return files.read_json(path), None
    except FileNotFoundError:
        return None, f"{path.name} missing"
    except JsonReadError as err:  # not JSON, a NaN or infinity, nested too deeply: says which field
        return None, f"{path.name}: {str(err).removeprefix(str(path) + ': ')}"
    except OSError as err:
        return None, f"{path.name}: not readable ({err.strerror})"


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


def read_config(path: Path | None) -> tuple[dict | None, str | None]:
    """The run's resolved config, or why it cannot be had."""
    if path is None or not Path(path).is_file():
        return None, "config.json missing (the run's resolved config: snakemake writes it, or give --extra config.json=PATH)"
    config, error = read_json(Path(path))
    if error is None and not (isinstance(config, dict) and isinstance(config.get("variants"), dict)
                              and isinstance(config.get("shapes"), list)):
        error = f"{Path(path).name}: not a resolved config (no variants and shapes)"
    if error is None:
        problem = config_problem(config)
        error = f"{Path(path).name}: {problem} (a config the workflow would refuse)" if problem else None
    return (config, None) if error is None else (None, error)


def config_problem(config: dict) -> str | None:
    """The first thing the config schema (or a rule across its keys) refuses in a resolved config."""
    return schema_error(config, config_schema()) or consistency_error(config)


def check_run(run_dir: Path, config_path: Path | None, expected_jobs: Iterable[tuple[str, str]] = (),
              schema: dict | None = None) -> dict:
    """The collected results of a finished run, or IncompleteRun naming every reason it is not.

    Jobs expected: every (variant, shape) of the resolved config at `config_path`, and every one
    of `expected_jobs`; each needs <variant>/<shape_id>.json in the run and its result in
    results.json."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise IncompleteRun(run_dir, ["no such directory"])
    reasons = []
    config, error = read_config(config_path)
    if error:
        reasons.append(error)
    elif config.get("preview"):
        raise PreviewRun(run_dir)
    collected, error = read_json(run_dir / "results.json")
    if error:
        reasons.append(error)
    else:
        reasons += collected_problems(collected, schema)
    if not (run_dir / "report.md").is_file():
        reasons.append("report.md missing")
    if not reasons:
        reasons += missing_jobs(run_dir, collected, expected_jobs_from_config(config) | set(expected_jobs))
        reasons += lost_processes(collected)
    if reasons:
        raise IncompleteRun(run_dir, reasons)
    return collected


def lost_processes(collected: dict) -> list[str]:
    """A job one of whose measuring processes wrote no result (killed, crashed, timed out) is not
    finished: the workflow's next run measures that process again (fabench.results.merge.times_lost)."""
    lost = [f"{r['variant']}/{r['shape_id']} process {e.get('index')}" for r in collected["results"]
            for e in (method_of(r).get("process_exits") or []) if isinstance(e, dict) and e.get("wrote_result") is False]
    if not lost:
        return []
    return [f"{len(lost)} measuring process(es) lost, their cells failed: {', '.join(lost)} (the next snakemake "
            "run measures them again)"]


def missing_jobs(run_dir: Path, collected: dict, expected: set[tuple[str, str]]) -> list[str]:
    reasons = []
    unfiled = sorted(f"{v}/{s}.json" for v, s in expected if not (run_dir / v / f"{s}.json").is_file())
    if unfiled:
        reasons.append(f"{len(unfiled)} job result file(s) missing: {', '.join(unfiled)} "
                       "(the run is not finished: snakemake measures them again)")
    have = {(r["variant"], r["shape_id"]) for r in collected["results"]}
    missing = sorted(expected - have)
    if missing:
        reasons.append(f"{len(missing)} job(s) missing from results.json: "
                       + ", ".join(f"{v}/{s}" for v, s in missing))
    return reasons
