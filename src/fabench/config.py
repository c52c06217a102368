"""Checks on config.yaml that a JSON schema cannot express, and the jobs it asks for."""

from __future__ import annotations

from fabench.measure.backends import BACKENDS
from fabench.shapes import shape_id

# Keys only the report reads: changing them must not re-run any benchmark.
REPORT_ONLY_KEYS = ("published", "runtime", "image")
VARIANT_REPORT_KEYS = ("title", "label")


class ConfigError(ValueError):
    pass


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


def check(config: dict) -> None:
    """Raise ConfigError naming the key when the config is consistent with the schema but not itself."""
    unknown = [name for name in config["backends"] if name not in BACKENDS]
    if unknown:
        raise ConfigError(f"backends: unknown {unknown}; expected some of {sorted(BACKENDS)}")
    ids = [shape_id(shape) for shape in config["shapes"]]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ConfigError(f"shapes: listed twice: {', '.join(duplicates)}")
    for index, shape in enumerate(config["shapes"]):
        if shape["head_dim"] % 8:
            raise ConfigError(f"shapes[{index}].head_dim: {shape['head_dim']} is not a multiple of 8")


def job_config(config: dict) -> dict:
    """What a benchmark job depends on: the config less what only the report reads."""
    frozen = {key: value for key, value in config.items() if key not in REPORT_ONLY_KEYS}
    frozen["variants"] = {
        name: {k: v for k, v in variant.items() if k not in VARIANT_REPORT_KEYS}
        for name, variant in config["variants"].items()
    }
    return frozen
