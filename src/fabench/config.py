"""config.yaml after validation: the one-line error for a schema violation, and what each job reads.

Defaults and every rule a JSON schema can state live in workflow/schemas/config.schema.yaml;
this module holds only what the schema cannot say about the config itself. The checks that need
other stages are fabench.workflow_config's (the sweep, the published numbers) and fabench.plan's
(the image).
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import math
import re
from pathlib import Path

from fabench.files import json_problem
from fabench.shapes import shape_id


class ConfigError(ValueError):
    """The config cannot run: the message names the key and what was expected, on one line."""


class SpecError(ValueError):
    """A job spec cannot run (here): the message names the block or key, on one line
    (fabench.measure.spec reads and checks job specs)."""


def _strict_validator(schema: dict):
    """Draft 2020-12, with two corrections:

    - 2.0 is not an integer: JSON Schema counts an integral float as one, but a shape of batch 2.0
      or 2.0 iterations would only fail later, inside a job;
    - a pattern's $ is the end of the text, as in JSON Schema's regexes (ECMA 262): Python's $ also
      matches before a final newline, which let `run: "x\\n"` through to make a folder results/x\\n/.
    """
    import jsonschema

    def is_integer(checker, instance) -> bool:
        return isinstance(instance, int) and not isinstance(instance, bool)

    def pattern(validator, regex, instance, schema):
        if validator.is_type(instance, "string") and not re.search(_ecma_regex(regex), instance):
            yield jsonschema.ValidationError(f"{instance!r} does not match {regex!r}")

    base = jsonschema.Draft202012Validator
    strict = jsonschema.validators.extend(base, validators={"pattern": pattern},
                                          type_checker=base.TYPE_CHECKER.redefine("integer", is_integer))
    return strict(schema)


def _ecma_regex(regex: str) -> str:
    """The Python regex for a JSON Schema pattern: every unescaped $ anchors at the very end."""
    return re.sub(r"(?<!\\)\$", lambda _: r"\Z", regex)


def schema_error(config, schema: dict, place=None) -> str | None:
    """The most relevant schema violation as one line: where it is and what was expected. A long
    value (a whole file read as one string, say) is quoted by its start only. `place`, given, names
    the place of a config key in another document checked by the config's rules (a job spec)."""
    import jsonschema

    place = place or (lambda where: where)
    problem = json_problem(config)  # NaN passes any minimum and maximum: refused first
    if problem:
        where, _, why = problem.removeprefix("$.").replace("]", "").replace("[", ".").partition(": ")
        return f"{place(where)}: {why}"
    error = jsonschema.exceptions.best_match(_strict_validator(schema).iter_errors(config))
    if error is None:
        return None
    where = place(".".join(str(part) for part in error.absolute_path) or "(top level)")
    if error.validator == "uniqueItems":  # the default message repeats the whole list
        return f"{where}: lists {_first_duplicate(error.instance)} twice (expected each item once)"
    message = error.message.replace(repr(error.instance), quote(error.instance))
    if "propertyNames" in error.relative_schema_path:  # the key itself is wrong, not its value
        message = "the name " + message
    expected = _expected(error.validator, error.schema)
    hint = _hint(error, where)
    return f"{where}: {message}" + (f" (expected {expected})" if expected else "") + (f"; {hint}" if hint else "")


QUOTE_CHARS = 60


def quote(value) -> str:
    """A value as it appears in an error line: its repr, or, when long, the start of it and its size."""
    text = repr(value)
    if len(text) <= QUOTE_CHARS + 20:
        return text
    size = f"{len(value)} characters" if isinstance(value, str) else f"a {type(value).__name__} of {len(text)} characters"
    return f"{text[:QUOTE_CHARS]}... ({size})"


def _hint(error, where: str) -> str | None:
    """What the user probably meant: a name without its stray newline, the key of a typo, a build
    argument under build_args rather than beside it."""
    if isinstance(error.instance, str) and error.instance != error.instance.strip():
        return "it begins or ends with white space (a newline?)"
    if error.validator != "additionalProperties" or not isinstance(error.instance, dict):
        return None
    known = list(error.schema.get("properties", {}))
    hints = []
    for key in (k for k in error.instance if k not in known):
        if "." in str(key) and str(key).split(".")[0] in known:
            block, _, inner = str(key).partition(".")
            hints.append(f"a key of a block is written nested, not dotted: {block}: {{{inner}: ...}} in a config "
                         f"file, or --config '{block}={{{inner}: ...}}'")
        elif "build_args" in known and re.fullmatch(r"[A-Z_][A-Z0-9_]*", str(key)):
            hints.append(f"build arguments such as {key} go under {where}.build_args")
        elif close := difflib.get_close_matches(str(key), known, n=1):
            hints.append(f"did you mean {close[0]!r} instead of {key!r}?")
    return "; ".join(hints) or None


def _first_duplicate(items: list):
    seen = []
    for item in items:
        if item in seen:
            return shape_id(item) if isinstance(item, dict) and set(item) == {"batch", "seq", "heads", "head_dim"} \
                else json.dumps(item)
        seen.append(item)
    return None


SCALAR_RULES = ("type", "minimum", "exclusiveMinimum", "maximum", "pattern", "maxLength", "multipleOf", "minItems")


def _expected(validator: str, schema: dict) -> str | None:
    if validator == "additionalProperties":
        return "only the keys " + ", ".join(sorted(schema.get("properties", {})))
    if validator == "enum":
        return "one of " + ", ".join(map(str, schema["enum"]))
    if validator in SCALAR_RULES:
        return " and ".join(f"{key} {schema[key]}" for key in SCALAR_RULES if key in schema)
    return None


def consistency_error(config: dict) -> str | None:
    """Rules across keys: platform images need containers."""
    if config.get("platforms") and config.get("runtime") == "local":
        return "platforms: each platform is an image, so runtime must be docker or auto (it is local)"
    return None


def check_roles(config: dict, platform: str) -> None:
    """ConfigError unless the config gives the roles of `platform`, the one its jobs measure on
    (fabench.planned_platform), each naming a measured backend. Other platforms' roles are not needed."""
    problem = roles_error(config["roles"], platform)
    if problem:
        raise ConfigError(problem)
    for role, backend in config["roles"][platform].items():
        if backend not in config["backends"]:
            raise ConfigError(f"roles.{platform}.{role}: {backend!r} is not in backends "
                              f"({', '.join(config['backends'])}); add it there or name a listed backend")


ROLE_NAMES = ("baseline", "vendor", "triton")


def roles_error(roles: dict, platform: str) -> str | None:
    """Roles are needed for the platform a job runs on only: the one line when they are missing.
    `roles`: the config's (or a job spec's) roles block."""
    given = roles.get(platform)
    if not isinstance(given, dict) or any(role not in given for role in ROLE_NAMES):
        return (f"roles.{platform}: the jobs run on {platform}, and the config gives no "
                f"{'/'.join(ROLE_NAMES)} roles for it (expected roles.{platform}: "
                "{baseline: ..., vendor: ..., triton: ...})")
    return None


def schema_default(*keys: str):
    """The default config.schema.yaml gives the key at `keys` (e.g. "measure", "worker_idle_s"):
    a launcher's default taken from the one place that states it."""
    node = config_schema()
    for key in keys:
        node = node["properties"][key]
    return node["default"]


@functools.cache
def config_schema() -> dict:
    """workflow/schemas/config.schema.yaml, read once (PyYAML: a host's dependency, not the image's)."""
    from fabench.resources import SCHEMA_DIR

    return shipped_yaml(SCHEMA_DIR / "config.schema.yaml")


def shipped_yaml(path):
    """A YAML file fabench ships (a schema, calibrations.yaml, peaks.yaml), by libyaml's loader where
    PyYAML has it: the config schema took 28 ms by the pure-Python loader against 3 ms on the CPU
    host, and Snakemake's start read four such files so (0.3 s). A user's files (a config, published
    numbers) keep PyYAML's own loader, whose messages their errors quote."""
    import yaml

    text = (path if hasattr(path, "read_text") else Path(path)).read_text()  # a package resource too
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def block_errors(config: dict, keys: tuple[str, ...]) -> str | None:
    """The first of `keys` present in `config` (a workflow config file read by a command outside
    the workflow, `fabench compare --configfile`) that its block of the config schema refuses, as
    one line naming the key; None when all that are present pass. Only the blocks the command
    reads are checked: a layer of a config may leave the others out or partial."""
    schema = config_schema()
    for key in keys:
        if key in config:
            problem = schema_error(config[key], schema["properties"][key], lambda where, key=key: (
                key if where == "(top level)" else f"{key}.{where}"))
            if problem:
                return problem
    return None


# A workflow config a command reads (fabench compare --configfile) is a few kB; read whole, it is
# bounded, and a FIFO or a device is refused rather than read without end.
MAX_CONFIG_BYTES = 16 * 1024 * 1024


def read_config_file(path) -> dict:
    """A workflow config file (YAML) read by a command outside the workflow: a mapping, or
    ConfigError of one line naming the file (cannot be read, not a regular file, too large, not
    YAML, not a mapping). Its keys are the caller's to check (block_errors)."""
    import yaml

    from fabench.files import FileReadError, read_regular

    try:
        config = yaml.safe_load(read_regular(path, MAX_CONFIG_BYTES).decode()) or {}
    except OSError as err:
        raise ConfigError(f"{path}: cannot be read ({err.strerror})") from None
    except FileReadError as err:
        raise ConfigError(str(err)) from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not text (UTF-8)") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: not a mapping of config keys")
    return config


def option_error(value: float, *keys: str) -> str | None:
    """Why the config schema's entry at `keys` (e.g. "measure", "job_timeout_s") refuses `value`, one
    line naming what was expected; None when it takes it. A command's option that stands for a
    config key is bounded as the key is."""
    node = config_schema()
    for key in keys:
        node = node["properties"][key]
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    problem = schema_error(value, {**node, "definitions": config_schema()["definitions"]})
    return problem.removeprefix("(top level): ") if problem else None


def canonical(value):
    """A JSON value spelled one way: every object's keys sorted (lists keep their order, which
    means something). Snakemake compares a job's params by their repr, in which key order shows."""
    if isinstance(value, dict):
        return {key: canonical(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [canonical(item) for item in value]
    return value


def variant_triton(config: dict, variant: str) -> dict:
    """A variant's Triton overrides, canonical: reordering them in config.yaml changes nothing."""
    return canonical(config["variants"][variant]["triton"])


def sha256_json(value) -> str:
    """Hash of a JSON value, independent of key order and spacing."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
