"""config.yaml after validation: the one-line error for a schema violation, and what each job reads.

Defaults and every rule a JSON schema can state live in workflow/schemas/config.schema.yaml;
this module holds only what the schema cannot say about the config itself. The checks that need
other stages (the sweep, the published numbers, the image) are fabench.plan's.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re

from fabench.files import json_problem
from fabench.shapes import shape_id


class ConfigError(ValueError):
    """The config cannot run: the message names the key and what was expected, on one line."""


class SpecError(ValueError):
    """A job spec cannot run (here): the message names the block or key, on one line."""

# The config keys every benchmark job of a run depends on (a change re-runs all of them).
# Anything else (title, label, published, runtime, image, ...) is read by the workflow or the
# report only, so changing it re-runs no benchmark.
JOB_SETTINGS_KEYS = ("dtype", "causal", "seed", "warmup", "iters", "cpu", "backends", "roles", "tolerance",
                     "timing")


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


def schema_error(config, schema: dict) -> str | None:
    """The most relevant schema violation as one line: where it is and what was expected. A long
    value (a whole file read as one string, say) is quoted by its start only."""
    import jsonschema

    problem = json_problem(config)  # NaN passes any minimum and maximum: refused first
    if problem:
        return problem.removeprefix("$.").replace("]", "").replace("[", ".")
    error = jsonschema.exceptions.best_match(_strict_validator(schema).iter_errors(config))
    if error is None:
        return None
    where = ".".join(str(part) for part in error.absolute_path) or "(top level)"
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
        if "build_args" in known and re.fullmatch(r"[A-Z_][A-Z0-9_]*", str(key)):
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
    (fabench.run_platform), each naming a measured backend. Other platforms' roles are not needed."""
    problem = roles_error(config, platform)
    if problem:
        raise ConfigError(problem)
    for role, backend in config["roles"][platform].items():
        if backend not in config["backends"]:
            raise ConfigError(f"roles.{platform}.{role}: {backend!r} is not in backends "
                              f"({', '.join(config['backends'])}); add it there or name a listed backend")


# What a job spec holds (job_spec), block by block, as the runner reads it: a spec written by hand
# (python -m fabench.measure --spec ...) is checked against this before any process starts. The
# timing keys are the schema's (tests/test_config.py keeps the two lists equal); the workflow
# fills their defaults, a hand-written spec gives them all.
SPEC_BLOCKS = {
    "": {"run": str, "variant": str, "shape": dict, "triton": dict, "settings": dict},
    "shape": {"batch": int, "seq": int, "heads": int, "head_dim": int},
    "settings": {"dtype": str, "causal": bool, "seed": int, "warmup": int, "iters": int, "cpu": dict,
                 "backends": list, "roles": dict, "tolerance": dict, "timing": dict},
    "settings.cpu": {"warmup": int, "iters": int},
    "settings.tolerance": {"max_abs_err": (int, float), "min_cosine": (int, float)},
    "settings.timing": {"trials": int, "repeats": int, "min_trial_ms": (int, float), "min_samples": int,
                        "max_noise": (int, float), "max_trial_ms": (int, float),
                        "device_method": str,
                        "warmup_window_ms": (int, float), "warmup_tolerance": (int, float),
                        "warmup_clock_tolerance": (int, float), "min_warmup_ms": (int, float),
                        "max_warmup_ms": (int, float), "stable_spread": (int, float), "clear_l2": bool,
                        "do_bench": bool, "cross_check_tolerance": (int, float)},
}
ROLE_NAMES = ("baseline", "vendor", "triton")


def spec_error(spec) -> str | None:
    """The first block or key a job spec lacks (or holds as the wrong type), as one line."""
    for block, keys in SPEC_BLOCKS.items():
        value = spec
        for part in filter(None, block.split(".")):
            value = value[part]
        where = f"{block}." if block else ""
        if not isinstance(value, dict):
            return f"{block or 'the spec'}: expected a JSON object, got {type(value).__name__}"
        missing = [key for key in keys if key not in value]
        if missing:
            return f"{block or 'the spec'}: missing {', '.join(missing)} (expected the keys {', '.join(keys)})"
        for key, kind in keys.items():
            if not isinstance(value[key], kind) or (kind is int and isinstance(value[key], bool)):
                return f"{where}{key}: {quote(value[key])} is not {_type_name(kind)}"
    return None


def roles_error(settings: dict, platform: str) -> str | None:
    """Roles are needed for the platform a job runs on only: the one line when they are missing."""
    roles = settings["roles"].get(platform)
    if not isinstance(roles, dict) or any(role not in roles for role in ROLE_NAMES):
        return (f"roles.{platform}: the jobs run on {platform}, and the config gives no "
                f"{'/'.join(ROLE_NAMES)} roles for it (expected roles.{platform}: "
                "{baseline: ..., vendor: ..., triton: ...})")
    return None


def _type_name(kind) -> str:
    names = {str: "a string", int: "an integer", bool: "true or false", dict: "an object", list: "a list"}
    return names.get(kind, "a number")


# On a CPU the `cpu:` block may override these (config.schema.yaml gives the defaults of both).
CPU_OVERRIDES = ("warmup", "iters", "trials", "repeats", "min_trial_ms", "max_warmup_ms")


def timing_settings(config: dict, platform: str) -> dict:
    """The timing block with the run's warm-up and iteration counts, CPU overrides applied: what a
    job on `platform` measures with (rocm, cuda: "gpu" will do; cpu)."""
    timing = {**config["timing"], "warmup": config["warmup"], "iters": config["iters"]}
    if platform == "cpu":
        cpu = config.get("cpu") or {}
        timing.update({key: cpu[key] for key in CPU_OVERRIDES if key in cpu})
    return timing


def processes(config: dict, platform: str) -> int:
    """How many measuring processes a job on `platform` has."""
    return timing_settings(config, platform)["repeats"]


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


def job_settings(config: dict, platform: str | None = None) -> dict:
    """What every job of the run shares: a change here re-runs every benchmark job. With the
    `platform` the jobs measure on, only the values that reach the measurement there: on a CPU
    the counts the cpu block overrides are its own (the top-level warmup and iters, and the
    timing keys it sets, are not used there)."""
    settings = {key: config[key] for key in JOB_SETTINGS_KEYS if key in config}
    if platform == "cpu" and "timing" in settings:
        timing = timing_settings(settings, "cpu")
        settings.update(warmup=timing.pop("warmup"), iters=timing.pop("iters"), timing=timing)
    return canonical(settings)


def job_spec(config: dict, variant: str, shape: dict, run: str | None = None, platform: str | None = None) -> dict:
    """Everything one benchmark job measures, and nothing else: its variant's Triton config, its
    shape and the run's shared settings as they reach the measurement on `platform` (see
    job_settings), all canonical. The workflow passes it to the runner and keeps it as the job's
    params, so a job re-runs exactly when what it measures changes. `run` names the run when the
    config makes several (one per platform image)."""
    return {
        "run": run or config["run"],
        "variant": variant,
        "shape": canonical(shape),
        "shape_id": shape_id(shape),
        "triton": variant_triton(config, variant),
        "settings": job_settings(config, platform),
    }


def sha256_json(value) -> str:
    """Hash of a JSON value, independent of key order and spacing."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
