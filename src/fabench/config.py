"""Checks on config.yaml that a JSON schema cannot express, and the jobs it asks for."""

from __future__ import annotations

from fabench.backends import BACKENDS
from fabench.shapes import shape_id

# Keys only the report reads: changing them must not re-run any benchmark.
REPORT_ONLY_KEYS = ("published", "runtime", "image")
VARIANT_REPORT_KEYS = ("title", "label")


class ConfigError(ValueError):
    pass


def check(config: dict) -> None:
    """Raise ConfigError naming the key when the config is consistent with the schema but not itself."""
    for platform, roles in config["roles"].items():
        for role, backend in roles.items():
            if backend not in config["backends"]:
                raise ConfigError(
                    f"roles.{platform}.{role}: backend {backend!r} is not in 'backends' "
                    f"(have: {', '.join(config['backends'])})"
                )
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
