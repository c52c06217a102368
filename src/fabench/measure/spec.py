"""The measure stage's typed boundary: what a benchmark job measures (JobSpec) and what a sweep job
measures (SweepSpec, in fabench.measure.sweep_spec), built by the plan from the validated config,
written as JSON (the job's params and the --spec of `python -m fabench.measure` or
`python -m fabench.tune`) and read back by `from_json` in the runner, the worker, the measuring
process and the sweep job alike.

The JSON is the config's own spelling (the keys of JOB_SETTINGS_KEYS, canonical), so the
job's params change exactly when what it measures changes; on a CPU the cpu block's counts stand
in for the timing block's (Settings.timing_on, the one place that applies them). Reading it checks
every key against the types below, then every value against the config schema's rule for the same
key (values_error): a missing, unknown or mistyped key, or a value the config would refuse, is one
line naming it (SpecError), never a KeyError or a crash inside a GPU process. The types are dataclasses
read by the small reader at the bottom (no library: the benchmark image has only the measuring
process's dependencies); a test keeps Timing's fields equal to the schema's timing keys
(tests/test_spec.py).

Torch-free: the plan and the runner import it.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Literal

from fabench.config import SpecError, canonical, config_schema, quote, schema_error, variant_triton
from fabench.platforms import PlatformName
from fabench.shapes import shape_id


@dataclass(frozen=True)
class Timing:
    """How each backend is timed (config `timing`, with the run's published counts warmup and
    iters, which the config keeps at its top level). Field for field the schema's timing keys."""

    warmup: int
    iters: int
    trials: int
    repeats: int
    min_trial_ms: float
    min_samples: int
    max_noise: float
    max_trial_ms: float
    device_method: Literal["queued", "graph"]
    warmup_window_ms: float
    warmup_tolerance: float
    warmup_clock_tolerance: float
    min_warmup_ms: float
    max_warmup_ms: float
    stable_spread: float
    clear_l2: bool
    local_memory: Literal["per_trial", "per_process"]
    do_bench: bool
    cross_check_tolerance: float


COUNTS = ("warmup", "iters")  # Timing's fields the config keeps at its top level

# The config keys every benchmark job of a run depends on (a change re-runs all of them).
# Anything else (title, label, published, runtime, image, ...) is read by the workflow or the
# report only, so changing it re-runs no benchmark.
JOB_SETTINGS_KEYS = ("dtype", "causal", "seed", "warmup", "iters", "cpu", "backends", "roles", "tolerance",
                     "timing")


def job_settings(config: dict) -> dict:
    """What every job of the run shares, as the config states it (canonical): a change here re-runs
    every benchmark job. Settings.of gives them as they reach the measurement on a platform."""
    return canonical({key: config[key] for key in JOB_SETTINGS_KEYS if key in config})


@dataclass(frozen=True)
class Tolerance:
    max_abs_err: float
    min_cosine: float


@dataclass(frozen=True)
class Cpu:
    """The counts on a CPU host; a count left None is the timing block's."""

    warmup: int
    iters: int
    trials: int | None = None
    repeats: int | None = None
    min_trial_ms: float | None = None
    max_warmup_ms: float | None = None
    threads: int | None = None
    leave_out: tuple[str, ...] = ()


# The cpu block's counts that replace timing's of the same name on a CPU (Settings.timing_on).
CPU_OVERRIDES = tuple(f.name for f in dataclasses.fields(Cpu)
                      if f.name in {t.name for t in dataclasses.fields(Timing)})


@dataclass(frozen=True)
class Shape:
    batch: int
    seq: int
    heads: int
    head_dim: int


@dataclass(frozen=True)
class Measurement:
    """What one measuring process measures with, on the platform it found: its timing (a CPU's
    counts applied), the correctness tolerance and the FLOP count of one call."""

    platform: PlatformName
    timing: Timing
    tolerance: Tolerance
    reduced: bool  # the published counts replaced by the CPU's smaller ones
    flops: float | None  # None where not known (a record of a process that measured nothing)


@dataclass(frozen=True)
class Settings:
    """What every job of the run shares (job_settings), typed."""

    dtype: Literal["float16", "bfloat16"]
    causal: bool
    seed: int
    cpu: Cpu
    backends: tuple[str, ...]
    roles: dict[str, dict[str, str]]
    tolerance: Tolerance
    timing: Timing

    @classmethod
    def from_dict(cls, value, where: str = "settings") -> "Settings":
        """The config's spelling, the published counts at the top, read into the types."""
        if not isinstance(value, dict):
            raise SpecError(f"{where}: {quote(value)} is not an object")
        folded = dict(value)
        counts = {key: folded.pop(key) for key in COUNTS if key in folded}
        missing = [key for key in COUNTS if key not in counts]
        if missing:
            raise SpecError(f"{where}: missing {', '.join(missing)}")
        timing = folded.get("timing")
        if isinstance(timing, dict):
            doubled = [key for key in COUNTS if key in timing]
            if doubled:
                raise SpecError(f"{where}.timing.{doubled[0]}: unknown key (the count is {where}.{doubled[0]})")
            folded["timing"] = {**timing, **counts}
        return parse(cls, folded, where)

    def to_dict(self) -> dict:
        """The config's spelling again: Settings.from_dict(settings.to_dict()) is the same Settings."""
        value = to_plain(self)
        timing = value["timing"]
        value.update({key: timing.pop(key) for key in COUNTS})
        return value

    @classmethod
    def of(cls, config: dict, platform: str | None = None) -> "Settings":
        """The run's settings as they reach the measurement on `platform`: its timing is timing_on's
        there, so a count a CPU does not use changes no CPU job. None: as the config states them."""
        settings = cls.from_dict(job_settings(config))
        return settings if platform is None else dataclasses.replace(settings, timing=settings.timing_on(platform))

    def timing_on(self, platform: str) -> Timing:
        """The timing a job on `platform` measures with: on a CPU, the cpu block's counts (a count it
        leaves None is the timing block's). Every reader of a CPU's counts asks this."""
        if PlatformName.parse(platform).is_gpu:
            return self.timing
        overrides = {key: getattr(self.cpu, key) for key in CPU_OVERRIDES}
        return dataclasses.replace(self.timing, **{k: v for k, v in overrides.items() if v is not None})

    def measurement(self, platform: str, flops: float | None) -> Measurement:
        platform = PlatformName.parse(platform)
        timing = self.timing_on(platform)
        return Measurement(platform=platform, timing=timing, tolerance=self.tolerance,
                           reduced=not platform.is_gpu and timing != self.timing, flops=flops)


class SpecReader:
    """How both kinds of job spec are read: the settings block by Settings.from_dict (the published
    counts at the top), the rest by their types; from outside (from_json), the values too."""

    @classmethod
    def from_dict(cls, value):
        if not isinstance(value, dict) or "settings" not in value:
            return parse(cls, value, "")  # the line that names what is missing
        settings = Settings.from_dict(value["settings"])
        return parse(cls, {**value, "settings": to_plain(settings)}, "")

    @classmethod
    def from_json(cls, text: str):
        """A spec from outside (a command's --spec, a worker's request): its types, then its values."""
        try:
            value = json.loads(text)
        except json.JSONDecodeError as err:
            raise SpecError(f"not JSON ({err.msg} at column {err.colno})") from None
        spec = cls.from_dict(value)
        problem = values_error(cls, value)
        if problem:
            raise SpecError(problem)
        return spec


@dataclass(frozen=True)
class JobSpec(SpecReader):
    """Everything one benchmark job measures, and nothing else."""

    run: str
    variant: str
    shape: Shape
    triton: dict[str, int | bool]
    settings: Settings
    # The platform the plan planned the job for (fabench.planned_platform; None: a spec written by hand).
    # The job measures on the one it finds; this names the job's result when no process wrote one.
    platform: Literal[tuple(PlatformName)] | None = None
    # The variant whose job of this shape measures the backends that read no variant config (a
    # backend's reads_variant_config); None: this job measures them itself (fabench.results.shared).
    shared_from: str | None = None
    shape_id: str = field(default="", compare=False)  # derived; written for the logs' sake

    def __post_init__(self) -> None:
        derived = shape_id(dataclasses.asdict(self.shape))
        if self.shape_id and self.shape_id != derived:
            raise SpecError(f"shape_id: {quote(self.shape_id)} is not the shape's ({derived})")
        object.__setattr__(self, "shape_id", derived)

    @property
    def shape_dict(self) -> dict:
        return dataclasses.asdict(self.shape)

    def to_dict(self) -> dict:
        return {**to_plain(self), "settings": self.settings.to_dict()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @staticmethod
    def as_config(value: dict) -> list[tuple[dict, dict[str, str]]]:
        """The config this spec's values come from (the keys the job reads), and where each of its
        keys stands in the spec; the variant it shares from, a variant's name too."""
        variant = value["variant"]
        config = {**value["settings"], "run": value["run"], "shapes": [value["shape"]],
                  "variants": {variant: {"triton": value["triton"]}}}
        configs = [(config, {"run": "run", "shapes.0": "shape", f"variants.{variant}.triton": "triton",
                             "variants": "variant"})]
        if value.get("shared_from") is not None:
            configs.append(({"variants": {value["shared_from"]: {"triton": {}}}}, {"variants": "shared_from"}))
        return configs


def job_spec(config: dict, variant: str, shape: dict, run: str | None = None, platform: str | None = None,
             shared_from: str | None = None) -> JobSpec:
    """The job of (variant, shape): its variant's Triton config, its shape and the run's shared
    settings as they reach the measurement on `platform` (Settings.of), all canonical.
    The workflow passes it to the runner and keeps it as the job's params, so a job re-runs exactly
    when what it measures changes. `run` names the run when the config makes several;
    `shared_from` the variant whose job measures this shape's config-independent backends."""
    return JobSpec.from_dict({"run": run or config["run"], "variant": variant, "shape": canonical(shape),
                              "triton": variant_triton(config, variant),
                              "settings": Settings.of(config, platform).to_dict(),
                              "platform": platform, "shared_from": shared_from})


# --- the values, checked by the config's rules ---------------------------------------------------

# "docker" in a job's container (fabench.container.job sets it): its launcher read the same spec
# and options on the host, values and all, before the container started; the image itself has
# neither PyYAML nor jsonschema (the host's dependencies), so there the types alone are read.
RUNTIME_ENV = "FABENCH_RUNTIME"


def in_image() -> bool:
    return os.environ.get(RUNTIME_ENV) == "docker"


def values_error(cls, value: dict) -> str | None:
    """The first value of a spec (parsed JSON whose types were read) that the config schema refuses
    for the same key, as one line naming the spec's key: a spec is refused exactly where the config
    it would come from is. None in the image (see RUNTIME_ENV)."""
    if in_image():
        return None
    for config, places in cls.as_config(value):

        def place(where: str, places=places) -> str:
            for key, spec_key in places.items():
                if where == key or where.startswith(key + "."):
                    return spec_key + where[len(key):]
            return "settings" if where == "(top level)" else f"settings.{where}"

        problem = schema_error(config, _spec_schema(), place)
        if problem:
            return problem
    return None


@functools.cache
def _spec_schema() -> dict:
    """The config schema without its required keys: a spec holds only the keys its job reads (the
    types above name a missing one)."""
    schema = copy.deepcopy(config_schema())
    schema.pop("required")
    schema["properties"]["sweep"].pop("required")
    return schema


# --- reading JSON into the types ----------------------------------------------------------------


def parse(cls, value, where: str):
    """`value` (parsed JSON) as dataclass `cls`, every field checked: SpecError names the first key
    missing, unknown or of the wrong type."""
    label = where or "the spec"
    if not isinstance(value, dict):
        raise SpecError(f"{label}: {quote(value)} is not an object")
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [key for key in value if key not in known]
    if unknown:
        raise SpecError(f"{_at(where, unknown[0])}: unknown key (expected the keys {', '.join(known)})")
    required = [name for name, f in known.items()
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [name for name in required if name not in value]
    if missing:
        raise SpecError(f"{label}: missing {', '.join(missing)} (expected the keys {', '.join(known)})")
    hints = typing.get_type_hints(cls)
    return cls(**{key: read(hints[key], item, _at(where, key)) for key, item in value.items()})


def read(kind, value, where: str):
    """One value of type `kind` (int, float, bool, str, a Literal, X | None, tuple[X, ...],
    dict[str, X] or a dataclass), or SpecError naming `where`."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if dataclasses.is_dataclass(kind):
        return parse(kind, value, where)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for option in (a for a in args if a is not type(None)):
            try:
                return read(option, value, where)
            except SpecError:
                continue
        raise SpecError(f"{where}: {quote(value)} is not {' or '.join(_name(a) for a in args)}")
    if origin is Literal:
        if value not in args:
            raise SpecError(f"{where}: {quote(value)} is not {_name(kind)}")
        return value
    if origin is tuple:
        if not isinstance(value, list):
            raise SpecError(f"{where}: {quote(value)} is not a list")
        return tuple(read(args[0], item, f"{where}.{i}") for i, item in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise SpecError(f"{where}: {quote(value)} is not an object")
        return {key: read(args[1], item, f"{where}.{key}") for key, item in value.items()}
    if not _is(kind, value):
        raise SpecError(f"{where}: {quote(value)} is not {_name(kind)}")
    return value


def _is(kind, value) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _name(kind) -> str:
    if typing.get_origin(kind) is Literal:
        return "one of " + ", ".join(map(str, typing.get_args(kind)))
    names = {str: "a string", int: "an integer", bool: "true or false", float: "a finite number",
             type(None): "null"}
    return names.get(kind, getattr(kind, "__name__", str(kind)))


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def to_plain(value):
    """A dataclass as JSON values: tuples as lists, nested dataclasses as objects."""
    if dataclasses.is_dataclass(value):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [to_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: to_plain(item) for key, item in value.items()}
    return value
