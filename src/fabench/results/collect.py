"""Collect one run's per-job result files into one validated, ordered results.json.

Every file is checked against workflow/schemas/result.schema.json and a few rules a schema
cannot express (the current schema version, shape_id spelled from shape, each trial once, one run,
one result per variant and shape). All problems of all files are reported together, each naming
the file and the JSON path, so one broken job does not hide another. The collected run's figures
are then derived again from the raw trials by the analysis stage (fabench.analysis.analyse_run):
its intervals pool the noise of every cell of the run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Sequence

import jsonschema

from fabench.analysis import analyse_run
from fabench.analysis.result_types import BackendEntry, backend_dicts, method_of, provenance_of
from fabench.files import JsonReadError, json_problem, loads_json, read_json, read_regular
from fabench.platforms import PlatformName
from fabench.results.bounds import bounds_problem
from fabench.results.contract import SCHEMA_PATH, SCHEMA_VERSION
from fabench.results.shared import shared_problems
from fabench.shapes import shape_id, shape_key

# Schema 2 recorded every trial too; its observations are read back by fabench.analysis.legacy.
COLLECTABLE = (2, SCHEMA_VERSION)


class ResultError(ValueError):
    """One or more result files do not meet the result contract."""


# The result schema is ~32 kB; one given by --schema is read whole, bounded (never a FIFO or a device).
MAX_SCHEMA_BYTES = 4 * 1024 * 1024


def result_schema(path: str | os.PathLike | None = None) -> dict:
    """The result JSON Schema: from `path`, else the checkout's workflow/schemas/ copy."""
    return loads_json(read_regular(Path(path or SCHEMA_PATH), MAX_SCHEMA_BYTES), str(path or SCHEMA_PATH))


def json_path(parts: Iterable) -> str:
    text = "$"
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def result_validator(schema: dict) -> jsonschema.Validator:
    """The schema's validator, an array of plain numbers checked in one pass: jsonschema checks
    each item on its own (~1 us each), and a GPU result holds ~40,000 samples per cell, 2 of a
    default run's 3 s of collecting on a CPU host. Items that fail get jsonschema's own error."""
    base = jsonschema.validators.validator_for(schema)
    each_item = base.VALIDATORS["items"]

    def items(validator, item_schema, instance, parent):
        if (isinstance(item_schema, dict) and item_schema.get("type") == "number"
                and set(item_schema) <= {"type", "minimum"} and validator.is_type(instance, "array")):
            low = item_schema.get("minimum", float("-inf"))
            for index, item in enumerate(instance):
                if isinstance(item, bool) or not isinstance(item, (int, float)) or not item >= low:
                    yield from validator.descend(item, item_schema, path=index)
            return
        yield from each_item(validator, item_schema, instance, parent)

    return jsonschema.validators.extend(base, {"items": items})(schema)


def schema_problems(result: object, validator: jsonschema.Validator) -> list[str]:
    # JSON Schema cannot say "finite": NaN passes any minimum. Nor what a measurement can be (a
    # trial of 1e308 ms passes "minimum: 0"): fabench.results.bounds. Checked first, also for a
    # result that was never read from a file.
    problem = json_problem(result) or bounds_problem(result)
    if problem:
        return [problem]
    errors = sorted(validator.iter_errors(result), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{json_path(e.absolute_path)}: {e.message}" for e in errors]


def version_problems(result: dict) -> list[str]:
    """A run is collected from results that recorded their trials (schema 2 or the current one),
    since the analysis derives every figure from them; schema 1 is only read from archives."""
    if result["schema_version"] not in COLLECTABLE:
        return [f"$.schema_version: {result['schema_version']} has no trials to analyse (collected: "
                f"{', '.join(map(str, COLLECTABLE))}; current {SCHEMA_VERSION}): measure again with this version of fabench"]
    return []


def contract_problems(result: dict) -> list[str]:
    """Rules the schema cannot state; only called on schema-valid results."""
    expected = shape_id(result["shape"])
    if result["shape_id"] != expected:
        return [f"$.shape_id: {result['shape_id']!r} does not match $.shape (expected {expected!r})"]
    problems = [f"$.backends.{name}: status ok although its correctness check failed"
                for name, backend in backend_dicts(result).items()
                if backend["status"] == "ok" and (backend.get("correctness") or {}).get("passed") is False]
    for name, entry in backend_dicts(result).items():
        if BackendEntry.of(entry).trials:  # schema 1 results (archived) have none
            problems += [f"$.backends.{name}.{problem}" for problem in trial_problems(entry)]
    return problems


def trial_problems(entry: dict) -> list[str]:
    """Each trial once: a (process, index) recorded twice means files were merged twice."""
    seen = [(t["process"], t["index"]) for t in BackendEntry.of(entry).trials]
    return ["trials: a (process, index) appears twice"] if len(set(seen)) != len(seen) else []


def expectation_problems(result: dict, expected: dict) -> list[str]:
    """A result must be the job the config asks for, run with the config's settings: a result left
    from another config (other iterations, another Triton config) is named, never reported."""
    job = f"{result['variant']}/{result['shape_id']}"
    if job not in expected["jobs"]:
        return [f"$.variant/$.shape_id: {job} is not a job of this config"]
    problems = []
    if result["run"] != expected["run"]:
        problems.append(f"$.run: {result['run']!r}, the config's run is {expected['run']!r}")
    iterations = expected["iterations"]["gpu" if PlatformName.parse(result["platform"]).is_gpu else "cpu"]
    ran = {key: method_of(result)[key] for key in ("warmup", "iters")}
    if ran != {key: iterations[key] for key in ("warmup", "iters")}:
        problems.append(f"$.method: ran {ran}, the config asks for {iterations}")
    if provenance_of(result).get("config_sha256") != expected["settings_sha256"]:
        problems.append("$.provenance.config_sha256: the job ran with other settings than the config's "
                        f"({provenance_of(result).get('config_sha256')} != {expected['settings_sha256']})")
    values = (result.get("kernel_config") or {}).get("values") or {}
    wrong = {k: v for k, v in expected["jobs"][job].items() if values.get(k) != v}
    if wrong:
        problems.append(f"$.kernel_config.values: measured {({k: values.get(k) for k in wrong})}, "
                        f"the variant sets {wrong}")
    return problems


def load_result(path: Path, validator: jsonschema.Validator,
                expected: dict | None = None) -> tuple[dict | None, list[str]]:
    try:
        result = read_json(path)
    except JsonReadError as err:  # already names the file
        return None, [str(err)]
    except OSError as err:
        return None, [f"{path}: cannot read JSON: {err}"]
    problems = schema_problems(result, validator)
    if not problems:
        problems = version_problems(result) or contract_problems(result)
    if not problems and expected is not None:
        problems = expectation_problems(result, expected)
    if problems:
        return None, [f"{path}: {problem}" for problem in problems]
    return result, []


def run_problems(loaded: list[tuple[Path, dict]]) -> list[str]:
    """The files must describe one run with at most one result per (variant, shape)."""
    problems, seen = [], {}
    first_path, first = loaded[0]
    for path, result in loaded:
        if result["run"] != first["run"]:
            problems.append(f"{path}: $.run: {result['run']!r} differs from {first['run']!r} in {first_path}")
        key = (result["variant"], result["shape_id"])
        if key in seen:
            problems.append(f"{path}: $.variant/$.shape_id: {key} already collected from {seen[key]}")
        seen.setdefault(key, path)
    return problems


def ordered(results: list[dict], variant_order: Sequence[str] | None) -> list[dict]:
    """Variants in the given order (then in order of first appearance), shapes by (B,S,H,D)."""
    order = list(variant_order or [])
    for result in results:
        if result["variant"] not in order:
            order.append(result["variant"])
    return sorted(results, key=lambda r: (order.index(r["variant"]), shape_key(r["shape"])))


def collect(
    paths: Iterable[str | os.PathLike],
    variant_order: Sequence[str] | None = None,
    schema: dict | None = None,
    expected: dict | None = None,
) -> dict:
    """Validate result files and return {"run": name, "results": [...]} in report order.

    `expected` (from the workflow) names the run, its jobs with their Triton overrides, the
    iterations and the hash of the shared settings; each result is checked against it.
    Raises ResultError listing every problem, each as "<file>: <JSON path>: <message>".
    """
    schema = schema or result_schema()
    validator = result_validator(schema)
    loaded, problems = [], []
    for path in map(Path, paths):
        result, file_problems = load_result(path, validator, expected)
        problems += file_problems
        if result is not None:
            loaded.append((path, result))
    if not problems and not loaded:
        problems.append("no result files given")
    if not problems:
        problems = run_problems(loaded) or shared_problems([result for _, result in loaded])
    if problems:
        raise ResultError("invalid results:\n  " + "\n  ".join(problems))
    results = [result for _, result in loaded]
    return analyse_run({"run": results[0]["run"], "results": ordered(results, variant_order)})
