"""The comparison rule's margin and the noise model's floor as data (calibrations.yaml): per
hardware identity (fabench.analysis.identity.hardware_key), each with the fit it came from and the
archived runs that fit was made on. The policy's defaults are those values; on hardware with no
calibration they are applied all the same, and every verdict the rule makes there says so
(`calibrated: false` and the hardware), as the comparison page does in one line.
"""

from __future__ import annotations

from functools import lru_cache
from importlib.resources import files

import yaml

from fabench.analysis.identity import hardware_key, hardware_text

CALIBRATIONS = files("fabench").joinpath("analysis", "calibrations.yaml")
HARDWARE_KEYS = ("platform", "device", "arch")
FIT_KEYS = ("margin", "floor", "fitted", "acceptance", "runs")


class CalibrationError(ValueError):
    """calibrations.yaml is not what this module reads: the message names the entry and the key."""


@lru_cache(maxsize=None)
def calibrations() -> dict[tuple, dict]:
    """hardware_key -> its fit ({margin, floor, fitted, acceptance, runs, name})."""
    data = yaml.safe_load(CALIBRATIONS.read_text()) or {}
    fits = data.get("fits") or {}
    for name, fit in fits.items():
        missing = [key for key in FIT_KEYS if key not in (fit or {})]
        if missing or not fit["runs"]:
            raise CalibrationError(f"calibrations.yaml: fits.{name}: {missing[0] if missing else 'runs'} "
                                   f"missing; expected {', '.join(FIT_KEYS)} and at least one run")
    found = {}
    for i, item in enumerate(data.get("calibrations") or []):
        hardware = item.get("hardware") or {}
        if sorted(hardware) != sorted(HARDWARE_KEYS) or item.get("fit") not in fits:
            raise CalibrationError(f"calibrations.yaml: calibrations[{i}]: expected hardware with "
                                   f"{', '.join(HARDWARE_KEYS)} and a fit named under fits")
        found[hardware_key(hardware)] = {**fits[item["fit"]], "name": item["fit"]}
    return found


def calibration_for(identity: dict) -> dict | None:
    """The fit that calibrates this hardware identity's model; None where there is none."""
    return calibrations().get(hardware_key(identity))


def mark(verdict: dict, hardware: tuple[dict, dict] | None) -> dict:
    """The verdict (in place; returned) with whether the rule that made it was calibrated on the
    hardware it was made on: `calibrated` (None when the caller named no hardware) and
    `hardware_key`. Two GPU models are never judged against each other by the rule, so the old
    run's hardware is the one."""
    if hardware is None:
        verdict.update(calibrated=None, hardware_key=None)
    else:
        verdict.update(calibrated=calibration_for(hardware[0]) is not None,
                       hardware_key=list(hardware_key(hardware[0])))
    return verdict


def coverage(identities: list[dict]) -> dict:
    """Which of the compared hardware the rule is calibrated on, and the one line that names the
    rest (None when all are): {calibrated, uncalibrated (hardware texts), line}."""
    texts = {hardware_text(i) or "unknown hardware": calibration_for(i) is not None for i in identities}
    uncalibrated = sorted(text for text, known in texts.items() if not known)
    line = (f"Uncalibrated: the margin and the noise floor were never fitted on {', '.join(uncalibrated)}; "
            f"verdicts there apply defaults fitted on other hardware (src/fabench/analysis/calibrations.yaml)"
            if uncalibrated else None)
    return {"calibrated": sorted(text for text, known in texts.items() if known), "uncalibrated": uncalibrated,
            "line": line}
