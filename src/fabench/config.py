"""config.yaml after validation: the one-line error for a schema violation, and what each job reads.

Defaults and every rule a JSON schema can state live in workflow/schemas/config.schema.yaml;
this module holds only what the schema cannot say.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from fabench.shapes import shape_id


class ConfigError(ValueError):
    """The config cannot run: the message names the key and what was expected, on one line."""

# The config keys every benchmark job of a run depends on (a change re-runs all of them).
# Anything else (title, label, published, runtime, image, ...) is read by the workflow or the
# report only, so changing it re-runs no benchmark.
JOB_SETTINGS_KEYS = ("dtype", "causal", "seed", "warmup", "iters", "cpu", "backends", "roles", "tolerance",
                     "timing")


def _strict_validator(schema: dict):
    """Draft 2020-12, except that 2.0 is not an integer: JSON Schema counts an integral float as
    one, but a shape of batch 2.0 or 2.0 iterations would only fail later, inside a job."""
    import jsonschema

    def is_integer(checker, instance) -> bool:
        return isinstance(instance, int) and not isinstance(instance, bool)

    base = jsonschema.Draft202012Validator
    strict = jsonschema.validators.extend(base, type_checker=base.TYPE_CHECKER.redefine("integer", is_integer))
    return strict(schema)


def schema_error(config: dict, schema: dict) -> str | None:
    """The most relevant schema violation as one line: where it is and what was expected."""
    import jsonschema

    error = jsonschema.exceptions.best_match(_strict_validator(schema).iter_errors(config))
    if error is None:
        return None
    where = ".".join(str(part) for part in error.absolute_path) or "(top level)"
    if error.validator == "uniqueItems":  # the default message repeats the whole list
        return f"{where}: lists {_first_duplicate(error.instance)} twice (expected each item once)"
    expected = _expected(error.validator, error.schema)
    return f"{where}: {error.message}" + (f" (expected {expected})" if expected else "")


def _first_duplicate(items: list):
    seen = []
    for item in items:
        if item in seen:
            return shape_id(item) if isinstance(item, dict) and set(item) == {"batch", "seq", "heads", "head_dim"} \
                else json.dumps(item)
        seen.append(item)
    return None


def _expected(validator: str, schema: dict) -> str | None:
    if validator == "additionalProperties":
        return "only the keys " + ", ".join(sorted(schema.get("properties", {})))
    if validator == "enum":
        return "one of " + ", ".join(map(str, schema["enum"]))
    if validator in ("type", "minimum", "exclusiveMinimum", "maximum", "pattern", "multipleOf", "minItems"):
        return " and ".join(f"{key} {schema[key]}" for key in
                            ("type", "minimum", "exclusiveMinimum", "maximum", "pattern", "multipleOf", "minItems")
                            if key in schema)
    return None


def check(config: dict, schemas: Path, project: Path) -> None:
    """Raise ConfigError for the first thing that would stop the run, before any job starts: a
    schema violation, a rule across keys the schema cannot state, or a published-numbers file that
    is missing or not what the report reads. `schemas` holds config.schema.yaml and
    published.schema.yaml; relative paths in the config are relative to `project`."""
    import yaml  # here, not at the top: the runner in the image imports this module, without PyYAML

    schema = yaml.safe_load((schemas / "config.schema.yaml").read_text())
    problem = schema_error(config, schema) or _consistency_error(config) or sweep_error(config) or \
        _published_error(config.get("published"), schemas, project)
    if problem:
        raise ConfigError(problem)


def sweep_error(config: dict) -> str | None:
    """The sweep's rules across keys (fabench.tune.settings)."""
    from fabench.tune.settings import config_error

    return config_error(config)


def _published_error(published: str | None, schemas: Path, project: Path) -> str | None:
    import yaml

    if published is None:
        return None
    path = project / published
    if not path.is_file():
        return (f"published: no file at {path} (a path relative to the project; "
                "for no published numbers set published: null, or --config published=)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        return f"published: {path} is not YAML: {' '.join(str(err).split())}"
    problem = schema_error(data, yaml.safe_load((schemas / "published.schema.yaml").read_text()))
    return f"published: {path}: {problem}" if problem else None


def _consistency_error(config: dict) -> str | None:
    """Rules across keys: every role names a measured backend; platform images need containers."""
    if config.get("platforms") and config.get("runtime") == "local":
        return "platforms: each platform is an image, so runtime must be docker or auto (it is local)"
    for platform, roles in config["roles"].items():
        for role, backend in roles.items():
            if backend not in config["backends"]:
                return (f"roles.{platform}.{role}: {backend!r} is not in backends "
                        f"({', '.join(config['backends'])}); add it there or name a listed backend")
    return None


def job_settings(config: dict) -> dict:
    """What every job of the run shares: a change here re-runs every benchmark job."""
    return {key: config[key] for key in JOB_SETTINGS_KEYS if key in config}


def job_spec(config: dict, variant: str, shape: dict, run: str | None = None) -> dict:
    """Everything one benchmark job measures, and nothing else: its variant's Triton config, its
    shape and the run's shared settings. The workflow passes it to the runner and keeps it as the
    job's params, so a job re-runs exactly when its own spec changes. `run` names the run when the
    config makes several (one per platform image)."""
    return {
        "run": run or config["run"],
        "variant": variant,
        "shape": dict(shape),
        "shape_id": shape_id(shape),
        "triton": dict(config["variants"][variant]["triton"]),
        "settings": job_settings(config),
    }


def sha256_json(value) -> str:
    """Hash of a JSON value, independent of key order and spacing."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
