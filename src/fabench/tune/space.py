"""The candidates a sweep stage times: combinations of the config's `sweep.space` values.

A candidate is the reference variant's full forward config with some keys replaced by the
candidate's values, so every key aiter's launch needs is always present. Keys the platform's
Triton backend refuses (waves_per_eu on CUDA) are taken out of the space: their values would only
make identical candidates.

Strategies:
- exhaustive: one stage, `sweep`, every combination of the space;
- coarse_refine (aiter's method, PR #3560): stage `coarse` times every BLOCK_M x BLOCK_N x
  num_warps with the other keys at their first listed value; the best `keep` by the objective
  go on to stage `refine`, each with every combination of the remaining keys.
"""

from __future__ import annotations

import itertools

# The keys a sweep may vary, in the order a candidate's name spells them.
SWEPT_KEYS = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages", "PRELOAD_V", "waves_per_eu")
COARSE_KEYS = ("BLOCK_M", "BLOCK_N", "num_warps")
STAGES = {"exhaustive": ("sweep",), "coarse_refine": ("coarse", "refine")}
_SHORT = {"BLOCK_M": "M", "BLOCK_N": "N", "num_warps": "w", "num_stages": "s", "PRELOAD_V": "pv",
          "waves_per_eu": "wpe"}


def stages(strategy: str) -> tuple[str, ...]:
    return STAGES[strategy]


def candidate_id(values: dict) -> str:
    """A short readable name, e.g. M64-N32-w4-s1-pv1 (pv: PRELOAD_V as 0/1)."""
    return "-".join(f"{_SHORT[key]}{int(values[key])}" for key in SWEPT_KEYS if key in values)


def platform_space(space: dict, refused: dict[str, str]) -> tuple[dict, dict]:
    """The space without the keys this platform's launch refuses, and those keys with the reason."""
    kept = {key: list(values) for key, values in space.items() if key not in refused}
    dropped = {key: refused[key] for key in space if key in refused}
    return kept, dropped


def grid(space: dict, keys: tuple[str, ...] | list[str]) -> list[dict]:
    """Every combination of the listed keys' values, in the order the space lists them."""
    keys = [key for key in SWEPT_KEYS if key in keys and key in space]
    return [dict(zip(keys, combo)) for combo in itertools.product(*(space[key] for key in keys))]


def stage_values(stage: str, space: dict, shortlist: list[dict] | None = None) -> list[dict]:
    """The swept values of every candidate of a stage (without the reference)."""
    if stage == "sweep":
        return grid(space, list(space))
    refine_keys = [key for key in space if key not in COARSE_KEYS]
    if stage == "coarse":
        firsts = {key: space[key][0] for key in refine_keys}
        return [{**values, **firsts} for values in grid(space, COARSE_KEYS)]
    if stage == "refine":
        if shortlist is None:
            raise ValueError("the refine stage needs the coarse stage's shortlist")
        coarse = [{key: values[key] for key in COARSE_KEYS if key in values} for values in shortlist]
        return [{**kept, **refined} for kept in coarse for refined in grid(space, refine_keys)]
    raise ValueError(f"unknown sweep stage {stage!r} (expected one of sweep, coarse, refine)")


def candidates(stage: str, space: dict, reference: dict, shortlist: list[dict] | None = None) -> list[dict]:
    """The stage's candidates, each {id, values, config, reference}; the reference variant's config
    is always one of them (marked), so every speedup is taken in the same process."""
    found, seen = [], {}
    for values in stage_values(stage, space, shortlist):
        config = {**reference, **values}
        key = _config_key(config)
        if key not in seen:
            seen[key] = len(found)
            found.append({"id": candidate_id(values), "values": values, "config": config, "reference": False})
    ref_key = _config_key(reference)
    if ref_key in seen:
        found[seen[ref_key]]["reference"] = True
    else:
        values = {key: reference[key] for key in SWEPT_KEYS if key in reference and key in space}
        found.append({"id": "reference", "values": values, "config": dict(reference), "reference": True})
    return found


def _config_key(config: dict) -> tuple:
    return tuple(sorted((key, repr(value)) for key, value in config.items()))
