"""What a sweep job measures (SweepSpec): the sweep's keys beside the shape, the settings and the
reference variant's config, read as a benchmark job's spec is (fabench.measure.spec: the types, then
the values by the config schema's rules).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fabench.measure.spec import Settings, Shape, SpecReader


@dataclass(frozen=True)
class SweepTiming:
    """The sweep's own counts per candidate (config sweep.timing); a count left out is the benchmark's."""

    warmup: int | None = None
    iters: int | None = None
    trials: int | None = None
    min_trial_ms: float | None = None
    min_warmup_ms: float | None = None
    max_warmup_ms: float | None = None


@dataclass(frozen=True)
class Sweep:
    """The sweep's keys a sweep job measures with (fabench.tune.settings.JOB_KEYS)."""

    strategy: Literal["exhaustive", "coarse_refine"]
    keep: int
    space: dict[str, tuple[int | bool, ...]]
    reference: str
    memory_limit: int | None
    check_pruned: bool
    timing: SweepTiming
    kernel_module: str | None


@dataclass(frozen=True)
class SweepSpec(SpecReader):
    """Everything one sweep job measures (fabench.tune.settings.sweep_job_spec), and nothing else."""

    stage: Literal["sweep", "coarse", "refine"]
    shape: Shape
    sweep: Sweep
    settings: Settings
    reference_triton: dict[str, int | bool]

    @staticmethod
    def as_config(value: dict) -> list[tuple[dict, dict[str, str]]]:
        reference = value["sweep"]["reference"]
        config = {**value["settings"], "shapes": [value["shape"]], "sweep": value["sweep"],
                  "variants": {reference: {"triton": value["reference_triton"]}}}
        return [(config, {"shapes.0": "shape", f"variants.{reference}.triton": "reference_triton",
                          "variants": "sweep.reference", "sweep": "sweep"})]
