"""The comparison rule's fitted values as data (calibrations.yaml), the one place they live: per
hardware identity (fabench.analysis.identity.hardware_key) the fit that holds its margin, the
noise model's floor and the two noise components a run cannot see by itself (between runs of one
hardware key, between cards of one model; fabench.analysis.components), with the archived runs
the fit was made on and, apart, the runs held out of it (where `fabench detector-check` measures
the acceptance). policy.Rule.of reads the margin and the components from here, the noise model its
floor; on hardware with no fit the `fallback` fit's values apply, and every verdict made there
says `calibrated: false`, as does a verdict whose rule is not the fit's (a margin set by hand).

The file is checked strictly when first read (every key, its type and its bounds): a malformed
file is a CalibrationError of one line naming the key, never a traceback.
"""

from __future__ import annotations

import datetime
from functools import lru_cache
from importlib.resources import files

import jsonschema
import yaml

from fabench.analysis.identity import hardware_key, hardware_text

CALIBRATIONS = files("fabench").joinpath("analysis", "calibrations.yaml")
HARDWARE_KEYS = ("platform", "device", "arch")
# The fitted values the rule and the noise model take from a fit: the rule's are overridable by a
# config's `comparison` key (then the verdicts are no longer the fit's), the floor is not.
RULE_VALUES = ("margin", "between_run", "between_card")
FITTED_VALUES = (*RULE_VALUES, "floor")

_FRACTION = {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.5}
_COMPONENT = {"type": "number", "minimum": 0, "exclusiveMaximum": 0.5}
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
            "required": ["margin", "floor", "between_run", "between_card", "pooled", "fitted", "runs", "held_out"],
            "properties": {"margin": _FRACTION, "floor": _COMPONENT, "between_run": _COMPONENT,
                           "between_card": _COMPONENT, "pooled": {"type": "string", "minLength": 1},
                           "fitted": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
                           "runs": {"type": "array", "minItems": 1, "items": _RUN},
                           "held_out": {"type": "array", "items": _RUN}}}},
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
        both = {run["entry"] for run in fit["runs"]} & {run["entry"] for run in fit["held_out"]}
        if both:
            raise CalibrationError(f"calibrations.yaml: fits.{name}.held_out: {sorted(both)[0]} is also a run "
                                   f"the fit was made on")
    return data


@lru_cache(maxsize=None)
def _data() -> dict:
    try:
        raw = yaml.safe_load(CALIBRATIONS.read_text())
    except yaml.YAMLError as err:
        raise CalibrationError(f"calibrations.yaml: not YAML ({str(err).splitlines()[0]})") from None
    except OSError as err:  # missing from an install, or unreadable: one line, as for a bad key
        raise CalibrationError(f"calibrations.yaml: cannot be read at {CALIBRATIONS} ({err.strerror}); "
                               "reinstall fabench or restore the file") from None
    except UnicodeDecodeError as err:
        raise CalibrationError(f"calibrations.yaml: not UTF-8 text ({err.reason} at byte {err.start})") from None
    return check(raw)


def calibrations() -> dict[tuple, dict]:
    """hardware_key -> its fit ({margin, floor, between_run, between_card, pooled, fitted, runs,
    held_out, name})."""
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


def values_for(identity: dict | None) -> dict:
    """The fitted values (FITTED_VALUES, and the fit's name) that apply to this hardware: its own
    fit's, else the fallback's."""
    fit = calibration_for(identity) or fallback()
    return {key: fit[key] for key in (*FITTED_VALUES, "name")}


def held_out_runs() -> dict[str, str]:
    """run id (<number>-<hash>) -> the fit that named it: every run any fit was made on is
    "fitted", every run a fit lists as held out and no fit was made on is "held out"."""
    fits = _data()["fits"].values()
    fitted = {run["entry"].split("/")[-1] for fit in fits for run in fit["runs"]}
    held = {run["entry"].split("/")[-1] for fit in fits for run in fit["held_out"]} - fitted
    return {**dict.fromkeys(fitted, "fitted"), **dict.fromkeys(held, "held out")}


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
    line = (f"Uncalibrated: the margin, the noise floor and the between-run and between-card noise were never "
            f"fitted on {', '.join(uncalibrated)}; verdicts there apply the values fitted on other hardware "
            f"(src/fabench/analysis/calibrations.yaml, fit {fallback()['name']})"
            if uncalibrated else None)
    return {"calibrated": sorted(text for text, known in texts.items() if known), "uncalibrated": uncalibrated,
            "line": line}
