"""config.yaml after validation: the one-line error for a schema violation, and what each job reads.

Defaults and every rule a JSON schema can state live in workflow/schemas/config.schema.yaml;
this module holds only what the schema cannot say.
"""

from __future__ import annotations

import hashlib
import json

from fabench.shapes import shape_id

# The config keys every benchmark job of a run depends on (a change re-runs all of them).
# Anything else (title, label, published, runtime, image, ...) is read by the workflow or the
# report only, so changing it re-runs no benchmark.
JOB_SETTINGS_KEYS = ("dtype", "causal", "seed", "warmup", "iters", "cpu", "backends", "roles", "tolerance",
                     "timing")


def schema_error(config: dict, schema: dict) -> str | None:
    """The most relevant schema violation as one line: where it is and what was expected."""
    import jsonschema

    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(config))
    if error is None:
        return None
    where = ".".join(str(part) for part in error.absolute_path) or "(top level)"
    expected = _expected(error.validator, error.schema)
    return f"{where}: {error.message}" + (f" (expected {expected})" if expected else "")


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


def job_settings(config: dict) -> dict:
    """What every job of the run shares: a change here re-runs every benchmark job."""
    return {key: config[key] for key in JOB_SETTINGS_KEYS if key in config}


def job_spec(config: dict, variant: str, shape: dict) -> dict:
    """Everything one benchmark job measures, and nothing else: its variant's Triton config, its
    shape and the run's shared settings. The workflow passes it to the runner and keeps it as the
    job's params, so a job re-runs exactly when its own spec changes."""
    return {
        "run": config["run"],
        "variant": variant,
        "shape": dict(shape),
        "shape_id": shape_id(shape),
        "triton": dict(config["variants"][variant]["triton"]),
        "settings": job_settings(config),
    }


def sha256_json(value) -> str:
    """Hash of a JSON value, independent of key order and spacing."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
