"""How a user's config goes on top of config.yaml: --configfile files in order, then --config.

Snakemake merges every source into config.yaml key by key, at any depth. That is what a block
wants (`cpu: {leave_out: []}` or `timing: {trials: 5}` changes one key and keeps the others), but
not a collection a user lists in full: `variants: {mine: ...}` would run config.yaml's variants
beside the user's own. So the keys of WHOLE_VALUE_KEYS are taken whole from the last source that
sets them (lists are replaced whole anyway, as Snakemake does).

--config values are typed as a YAML file would type them. Snakemake reads `key=value` as a number
or a boolean where it can, and a mapping or list with every value a string: `run=123` would be the
number 123, and `timing={repeats: 3}` would hold the string '3'. A key the schema takes as text gets
the text written after `key=`, from Snakemake's own record of --config (its config_settings'
config_args), never from re-reading the command line. Structured values (a variants or shapes
block of your own) are best given in a file, --configfile, as docs/usage.md says.
"""

from __future__ import annotations

import copy

import yaml

# A user's value replaces config.yaml's whole: the variants and shapes measured, and the platform
# images (each one a run) are exactly those listed. Roles are merged: a user may change one role of
# one platform, and only the platform the jobs run on needs its roles (fabench.config.check_roles).
WHOLE_VALUE_KEYS = ("variants", "shapes", "platforms")


def replace_whole_values(config: dict, layers: list[dict]) -> None:
    """Set each key of WHOLE_VALUE_KEYS to its value in the last layer that sets it."""
    for layer in layers:
        for key in WHOLE_VALUE_KEYS:
            if key in layer:
                config[key] = copy.deepcopy(layer[key])


def command_line_values(values: dict, schema: dict, config_args: list[str] | None) -> dict:
    """--config's values as the same text in a YAML file would give them: a mapping's or a list's
    values typed (3 a number, true a boolean), and a key the schema takes as text given the text
    the command line wrote (`run=123` is the run '123', `run=007` not '7'), as Snakemake recorded it
    in `config_args` (None, as when Snakemake is driven through its API: the value as text)."""
    typed = {}
    for key, value in values.items():
        if isinstance(value, (dict, list)):
            typed[key] = _typed_leaves(value)
        elif value is not None and not isinstance(value, str) and _takes_text(schema, key):
            typed[key] = _written_text(key, config_args or []) or str(value)
        else:
            typed[key] = value
    return typed


def _typed_leaves(value):
    if isinstance(value, dict):
        return {key: _typed_leaves(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_typed_leaves(item) for item in value]
    if isinstance(value, str):
        try:
            typed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        # Only a scalar: text that reads as a mapping ("a: b") came quoted, so it is text.
        return typed if typed is None or isinstance(typed, (bool, int, float)) else value
    return value


def _takes_text(schema: dict, key: str) -> bool:
    """The schema's type for a top-level key is text (a string, or a string or null)."""
    rule = schema.get("properties", {}).get(key, {})
    if "$ref" in rule:  # "#/definitions/name"
        rule = schema.get("definitions", {}).get(rule["$ref"].rsplit("/", 1)[-1], {})
    kinds = rule.get("type")
    kinds = [kinds] if isinstance(kinds, str) else kinds or []
    return "string" in kinds and not {"integer", "number", "boolean"} & set(kinds)


def _written_text(key: str, config_args: list[str]) -> str | None:
    """The text after `key=` in the last --config argument that sets the key."""
    for arg in reversed(config_args):
        if arg.startswith(f"{key}="):
            return arg[len(key) + 1:]
    return None
