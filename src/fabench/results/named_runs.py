"""The archived runs a calibration names (calibrations.yaml `runs`, `validation`), read from the
archives they live in, each folder or tarball of examples/ unpacked once into a scratch folder:
what tools/refit_calibration.py fits on and tests/test_detector.py checks the fit against."""

from __future__ import annotations

import tarfile
from pathlib import Path

from fabench.analysis.noise import analyse_run
from fabench.results.archive_read import list_entries
from fabench.results.compare import usable_results


class NamedRunMissing(LookupError):
    """A run a calibration names is not in its archive (or the archive is not there)."""


def archive_root(archive: str, repo: Path, scratch: Path) -> Path:
    """The archive root of a named archive: a folder of the repository as it is, a tarball
    unpacked under `scratch` (its top folder `archive/`)."""
    path = (repo / archive).resolve()
    if path.is_dir():
        return path
    if not path.is_file() or not tarfile.is_tarfile(path):
        raise NamedRunMissing(f"{archive}: neither an archive folder nor a tarball under {repo}")
    target = scratch / archive.replace("/", "_")
    if not target.exists():
        with tarfile.open(path) as tar:
            tar.extractall(target, filter="data")
    return target / "archive"


def named_runs(named: list[dict], repo: Path, scratch: Path) -> list[tuple[str, list[dict]]]:
    """[(entry id, analysed results)] of the named runs ({entry, archive}), in the order named."""
    out = []
    for run in named:
        root = archive_root(run["archive"], repo, scratch)
        entry = next((e for e in list_entries(root) if e.id == run["entry"]), None)
        if entry is None:
            raise NamedRunMissing(f"{run['entry']}: not in {run['archive']}")
        results, problems = usable_results(entry)
        if results is None:
            raise NamedRunMissing(f"{run['entry']} in {run['archive']}: {'; '.join(problems)}")
        out.append((entry.id, analyse_run({"results": results})["results"]))
    return out
