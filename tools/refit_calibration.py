"""Refit one calibration's pair types from the runs it names, and print its `pair_types` block
(calibrations.yaml), or write it in place with --write:

    python tools/refit_calibration.py h200-h100-trimmed-mean-2026-11-28 [--write]

The values are fabench.analysis.components.fit over the fit's `runs` with the default rule's
equivalence alpha and the fit's `answered_target`; tests/test_detector.py checks that the file
holds what this computes."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

from fabench.analysis import calibration, components
from fabench.analysis.policy import Rule
from fabench.files import write_atomic
from fabench.results.named_runs import named_runs

REPO = Path(__file__).resolve().parents[1]


def pair_types(name: str) -> dict:
    fit = calibration.fit_named(name)
    with tempfile.TemporaryDirectory() as scratch:
        runs = named_runs(fit["runs"], REPO, Path(scratch))
        return components.fit(runs, Rule().equivalence_alpha, fit["answered_target"])


def block(values: dict) -> str:
    lines = ["    pair_types:"]
    for kind, entry in values.items():
        lines.append(f"      {kind}:")
        for klass in components.CLASSES:
            if klass in entry:
                v = entry[klass]
                df = "null" if v["df"] is None else v["df"]
                lines.append(f"        {klass}: {{margin: {v['margin']}, noise: {round(v['noise'], 4)}, df: {df}, "
                             f"scale: {v['scale']}, pairs: {v['pairs']}, runs: {v['runs']}, cells: {v['cells']}}}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fit")
    parser.add_argument("--write", action="store_true", help="replace the fit's pair_types block in the file")
    args = parser.parse_args(argv)
    text = block(pair_types(args.fit))
    if not args.write:
        sys.stdout.write(text)
        return 0
    path = Path(str(calibration.CALIBRATIONS))
    lines = path.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.rstrip() == f"  {args.fit}:")
    first = next(i for i in range(start, len(lines)) if lines[i].startswith("    pair_types:"))
    last = next(i for i in range(first + 1, len(lines)) if not lines[i].startswith("      "))
    updated = "".join(lines[:first]) + text + "".join(lines[last:])
    yaml.safe_load(updated)
    write_atomic(path, updated)
    calibration.calibrations.cache_clear()
    calibration.check(yaml.safe_load(updated))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
