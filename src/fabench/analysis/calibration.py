"""The comparison rule's fitted values as data (calibrations.yaml), the one place they live: per
hardware identity (fabench.analysis.identity.hardware_key) the fit that holds the noise model's
floor and, per kind of pair (identity.PairType), the noise two runs of such a pair differ by beyond
their own (fabench.analysis.components.fit: per class of cell, steady or held at a power cap, with
its degrees of freedom) and the margin fitted from it: the smallest change the rule calls a change
between such runs. A fit names the archived runs it was made on (`runs`) and the runs a design
decision of the rule saw without being fitted on them (`validation`); every other archived run is a
test run of the fit (fabench.analysis.detector), until a refit names it.

policy.Rule.of reads the margins and the noise from here, the noise model its floor; on hardware
with no fit the `fallback` fit's values apply, and every verdict made there says `calibrated:
false`, as does a verdict whose rule is not the fit's (a margin set by hand). A pair type a fit has
too few runs for (PairType absent) is judged by the next wider type's values (FALLS_BACK), and the
verdict says so.

The file is checked strictly when first read (every key, its type and its bounds): a malformed
file is a CalibrationError of one line naming the key, never a traceback.
"""

from __future__ import annotations

import datetime
from functools import lru_cache
from importlib.resources import files

import jsonschema
import yaml

from fabench.analysis.identity import PairType, hardware_key, hardware_text
from fabench.config import shipped_yaml

CALIBRATIONS = files("fabench").joinpath("analysis", "calibrations.yaml")
HARDWARE_KEYS = ("platform", "device", "arch")
PAIR_TYPES = tuple(str(kind) for kind in PairType)
CLASSES = ("steady", "capped")
# A pair type with no values of its own is judged by a wider one's: another card of one host by
# another host's (which holds a card's effect and a host's), a run over several cards by another
# host's, over several cards of two hosts by several cards' (then another host's); the same card
# has no wider type and must be fitted.
FALLS_BACK = {str(PairType.OTHER_CARD): str(PairType.OTHER_HOST), str(PairType.SEVERAL_CARDS): str(PairType.OTHER_HOST),
              str(PairType.SEVERAL_CARDS_OTHER_HOST): str(PairType.SEVERAL_CARDS)}

_FRACTION = {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.5}
_COMPONENT = {"type": "number", "minimum": 0, "exclusiveMaximum": 0.5}
_COUNT = {"type": "integer", "minimum": 0}
_CLASS = {"type": "object", "additionalProperties": False,
          "required": ["margin", "noise", "df", "scale", "pairs", "runs", "cells"],
          "properties": {"margin": _FRACTION, "noise": _COMPONENT, "df": {"type": ["number", "null"], "minimum": 1},
                         "scale": {"type": "number", "minimum": 0.25, "maximum": 1}, "pairs": _COUNT, "runs": _COUNT,
                         "cells": _COUNT}}
_PAIR_TYPE = {"type": "object", "additionalProperties": False, "required": ["steady"],
              "properties": {"steady": _CLASS, "capped": _CLASS}}
_RUN = {"type": "object", "additionalProperties": False, "required": ["entry", "archive"],
        "properties": {"entry": {"type": "string", "pattern": r"^[^/\s]+/[0-9]{4}-[0-9a-f]{8}$"},
                       "archive": {"type": "string", "minLength": 1},
                       "measured": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"}}}
SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["fallback", "fits", "calibrations"],
    "properties": {
        "fallback": {"type": "string", "minLength": 1},
        "fits": {"type": "object", "minProperties": 1, "additionalProperties": {
            "type": "object", "additionalProperties": False,
            "required": ["floor", "answered_target", "pair_types", "pooled", "fitted", "runs", "validation"],
            "properties": {"floor": _COMPONENT, "answered_target": {
                               "type": "object", "required": list(PAIR_TYPES), "additionalProperties": False,
                               "properties": {kind: {"type": "number", "minimum": 0.5, "maximum": 0.999}
                                              for kind in PAIR_TYPES}},
                           "pair_types": {"type": "object", "required": [str(PairType.SAME_CARD)],
                                          "propertyNames": {"enum": list(PAIR_TYPES)},
                                          "additionalProperties": _PAIR_TYPE},
                           "pooled": {"type": "string", "minLength": 1},
                           "fitted": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
                           "runs": {"type": "array", "minItems": 1, "items": _RUN},
                           "validation": {"type": "array", "items": _RUN}}}},
        "calibrations": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["hardware", "fit"],
            "properties": {"fit": {"type": "string"}, "hardware": {
                "type": "object", "additionalProperties": False, "required": list(HARDWARE_KEYS),
                "properties": {key: {"type": "string", "minLength": 1} for key in HARDWARE_KEYS}}}}}}}


class CalibrationError(ValueError):
    """calibrations.yaml is not what this module reads: one line naming the key and what is expected."""


def _where(error: jsonschema.ValidationError) -> str:
    return ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in error.absolute_path).replace(".[", "[") or "(top)"


def _dates_as_text(value):
    # YAML reads 2026-11-25 as a date: the schema states dates as text, as the file is written.
    if isinstance(value, dict):
        return {k: _dates_as_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_dates_as_text(v) for v in value]
    return value.isoformat() if isinstance(value, datetime.date) else value


def check(data) -> dict:
    """The file's data, checked against SCHEMA and its cross references; CalibrationError otherwise."""
    data = _dates_as_text(data)
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(SCHEMA).iter_errors(data))
    if error is not None:
        raise CalibrationError(f"calibrations.yaml: {_where(error)}: {error.message}")
    if data["fallback"] not in data["fits"]:
        raise CalibrationError(f"calibrations.yaml: fallback: {data['fallback']!r} is not a fit named under fits")
    for i, item in enumerate(data["calibrations"]):
        if item["fit"] not in data["fits"]:
            raise CalibrationError(f"calibrations.yaml: calibrations[{i}].fit: {item['fit']!r} is not a fit "
                                   f"named under fits")
    for name, fit in data["fits"].items():
        both = {run["entry"] for run in fit["runs"]} & {run["entry"] for run in fit["validation"]}
        if both:
            raise CalibrationError(f"calibrations.yaml: fits.{name}.validation: {sorted(both)[0]} is also a run "
                                   f"the fit was made on")
    return data


@lru_cache(maxsize=None)
def _data() -> dict:
    try:
        raw = shipped_yaml(CALIBRATIONS)
    except yaml.YAMLError as err:
        raise CalibrationError(f"calibrations.yaml: not YAML ({str(err).splitlines()[0]})") from None
    except OSError as err:  # missing from an install, or unreadable: one line, as for a bad key
        raise CalibrationError(f"calibrations.yaml: cannot be read at {CALIBRATIONS} ({err.strerror}); "
                               "reinstall fabench or restore the file") from None
    except UnicodeDecodeError as err:
        raise CalibrationError(f"calibrations.yaml: not UTF-8 text ({err.reason} at byte {err.start})") from None
    return check(raw)


def calibrations() -> dict[tuple, dict]:
    """hardware_key -> its fit ({floor, answered_target, pair_types, pooled, fitted, runs, validation,
    name})."""
    data = _data()
    return {hardware_key(item["hardware"]): {**data["fits"][item["fit"]], "name": item["fit"]}
            for item in data["calibrations"]}


calibrations.cache_clear = _data.cache_clear  # tests that point CALIBRATIONS elsewhere read it again


def calibration_for(identity: dict | None) -> dict | None:
    """The fit that calibrates this hardware identity's model; None where there is none."""
    return calibrations().get(hardware_key(identity)) if identity else None


def fallback() -> dict:
    """The fit whose values apply on hardware that has none of its own."""
    data = _data()
    return {**data["fits"][data["fallback"]], "name": data["fallback"]}


def fit_named(name: str) -> dict:
    """The fit of that name (CalibrationError where the file has none)."""
    fits = _data()["fits"]
    if name not in fits:
        raise CalibrationError(f"calibrations.yaml: no fit named {name!r} (fits: {', '.join(sorted(fits))})")
    return {**fits[name], "name": name}


def fit_for(identity: dict | None) -> dict:
    """The fit that applies to this hardware: its own, else the fallback."""
    return calibration_for(identity) or fallback()


def pair_values(fit: dict, kind: str) -> dict:
    """The values a fit gives a pair type: {steady, capped (each {margin, noise, df, scale}; capped
    the steady's where the fit saw no capped cell), fitted_as (the type whose values they are: the
    pair's own, or the wider one it falls back to)}."""
    fitted_as = kind
    while fitted_as not in fit["pair_types"] and fitted_as in FALLS_BACK:
        fitted_as = FALLS_BACK[fitted_as]
    values = fit["pair_types"].get(fitted_as)
    if values is None:  # unreachable for a checked file: the same card is required, and others fall back
        raise CalibrationError(f"calibrations.yaml: fits.{fit['name']}.pair_types has no {kind!r} nor a wider type")
    return {"steady": values["steady"], "capped": values.get("capped") or values["steady"], "fitted_as": fitted_as}


def run_scopes() -> dict[str, str]:
    """run id (<number>-<hash>) -> "fitted" (a fit was made on it) or "validation" (a design decision
    saw it, no fit was made on it); every run not here is a test run."""
    fits = _data()["fits"].values()
    fitted = {run["entry"].split("/")[-1] for fit in fits for run in fit["runs"]}
    seen = {run["entry"].split("/")[-1] for fit in fits for run in fit["validation"]} - fitted
    return {**dict.fromkeys(fitted, "fitted"), **dict.fromkeys(seen, "validation")}


def mark(verdict: dict, hardware: tuple[dict, dict] | None, calibrated: bool | None) -> dict:
    """The verdict (in place; returned) with whether the rule that made it is the fit of the
    hardware it was made on (`calibrated`: None when the caller named no hardware) and the
    `hardware_key`. Two GPU models are never judged against each other, so the old run's hardware
    is the one."""
    verdict.update(calibrated=None if hardware is None else calibrated,
                   hardware_key=None if hardware is None else list(hardware_key(hardware[0])))
    return verdict


def coverage(identities: list[dict]) -> dict:
    """Which of the compared hardware the rule is calibrated on, and the one line that names the
    rest (None when all are): {calibrated, uncalibrated (hardware texts), line}."""
    texts = {hardware_text(i) or "unknown hardware": calibration_for(i) is not None for i in identities}
    uncalibrated = sorted(text for text, known in texts.items() if not known)
    line = (f"Uncalibrated: the margins, the noise floor and the noise between runs of each kind of pair were never "
            f"fitted on {', '.join(uncalibrated)}; verdicts there apply the values fitted on other hardware "
            f"(src/fabench/analysis/calibrations.yaml, fit {fallback()['name']})"
            if uncalibrated else None)
    return {"calibrated": sorted(text for text, known in texts.items() if known), "uncalibrated": uncalibrated,
            "line": line}
