"""Finished runs under results/ that the archive does not hold yet.

`snakemake archive` stores each of them (workflow/scripts/archive_finished.py), not only the runs
of the config it was given; `snakemake compare` names each one left, with the command that stores
it. A run folder is finished when `snakemake report` has written its report.md, results.json and
config.json; whether it is whole is archive_run_check's to say when it is stored. A run is
archived when an entry of the archive holds its measurements (their identity, which the store
itself checks), whatever the entry's label or run id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from fabench.analysis.result_types import provenance_of
from fabench.files import JsonReadError, read_json
from fabench.results.archive_layout import RECORD, ArchiveError
from fabench.results.archive_read import RESULTS, entry_dirs, measurements_of
from fabench.results.archive_run_check import IncompleteRun, check_run
from fabench.results.archive_store import CONFIG_SOURCES, AlreadyArchived, archive_run, label_problem, write_receipt
from fabench.results.archive_lock import Notify

FINISHED_FILES = ("report.md", RESULTS, "config.json")
# config.schema.yaml's pattern of a run's name: other folders under results/ are no runs.
RUN_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
STORE_COMMAND = "snakemake --cores 1 archive"
# Where the workflow writes its runs (results/<run>/), relative to its working directory.
WORKFLOW_RESULTS = Path("results")
RECEIPT = "archived.json"


@dataclass
class Stored:
    """What became of one finished run: the entry that holds it, or why it was not stored."""

    run_dir: Path
    entry: Path | None = None
    refused: str | None = None


def finished_runs(results_root: Path) -> list[Path]:
    root = Path(results_root)
    if not root.is_dir():
        return []
    return sorted(path for path in root.iterdir()
                  if path.is_dir() and re.fullmatch(RUN_NAME, path.name)
                  and all((path / name).is_file() for name in FINISHED_FILES))


def archived_identities(archive_root: Path) -> set[str]:
    """The identity of every entry's measurements, from its record (unverified: an entry whose files
    changed still holds those measurements, and the store refuses a second copy of them)."""
    held = set()
    for entry_dir in entry_dirs(Path(archive_root)):
        try:
            record = read_json(entry_dir / RECORD)
        except (OSError, JsonReadError):
            record = None
        identity = record.get("measurements_sha256") if isinstance(record, dict) else None
        identity = identity or measurements_of(entry_dir / RESULTS)
        if identity:
            held.add(identity)
    return held


def unarchived_runs(results_root: Path, archive_root: Path, skip: Iterable[str] = ()) -> list[Path]:
    """The finished runs whose measurements no entry of the archive holds, but those named in skip
    and previews (config.preview: too few samples to compare versions by)."""
    held, skip = archived_identities(archive_root), set(skip)
    return [run_dir for run_dir in finished_runs(results_root)
            if run_dir.name not in skip and not run_config(run_dir).get("preview")
            and measurements_of(run_dir / RESULTS) not in held]


def run_config(run_dir: Path) -> dict:
    """The run's own resolved config, {} when it cannot be read (the store then says why)."""
    try:
        config = read_json(run_dir / "config.json")
    except (OSError, JsonReadError):
        return {}
    return config if isinstance(config, dict) else {}


def run_label(run_dir: Path) -> str | None:
    """The archive label the run's own config asked for (archive.label), None for the default."""
    archive = run_config(run_dir).get("archive")
    label = archive.get("label") if isinstance(archive, dict) else None
    return label if label is not None and label_problem(label) is None else None


def docker_run(run_dir: Path) -> bool:
    """Measured in the docker runtime: its image's manifest is archived with it only by the config it
    ran with, which knows the image."""
    try:
        results = read_json(run_dir / RESULTS)["results"]
        return any(provenance_of(result).get("runtime") == "docker" for result in results)
    except (OSError, JsonReadError, KeyError, TypeError, AttributeError):
        return False


def store_unarchived(results_root: Path, archive_root: Path, skip: Iterable[str] = (), *,
                     schema: dict | None = None, notify: Notify | None = None) -> list[Stored]:
    """Each finished run the archive does not hold (but those in skip) stored as a new entry under its
    own config's label, its receipt (results/<run>/archived.json) written; one Stored per run."""
    outcome = []
    for run_dir in unarchived_runs(results_root, archive_root, skip):
        if docker_run(run_dir):
            outcome.append(Stored(run_dir, refused="measured in the docker runtime: store it with the config it "
                                  f"ran with, {STORE_COMMAND} --config run={run_dir.name}"))
            continue
        try:
            entry = archive_run(run_dir, archive_root, run_label(run_dir), schema=schema, notify=notify)
        except AlreadyArchived as err:  # stored by another process since the list was made
            entry = err.entry
        except ArchiveError as err:
            outcome.append(Stored(run_dir, refused=str(err)))
            continue
        write_receipt(run_dir / RECEIPT, entry)
        outcome.append(Stored(run_dir, entry=entry))
    return outcome


def unarchived_lines(results_root: Path, archive_root: Path) -> list[str]:
    """One line per finished run the archive does not hold: the command that stores it, or, where
    `snakemake archive` would refuse it (store_unarchived's own checks), why."""
    return [f"{run_dir} is a finished run not in {archive_root}: {how_to_store(run_dir)}"
            for run_dir in unarchived_runs(results_root, archive_root)]


def how_to_store(run_dir: Path) -> str:
    """What stores the run, by the checks store_unarchived makes before storing it."""
    if docker_run(run_dir):
        return (f"`{STORE_COMMAND}` does not store a run measured in the docker runtime; "
                f"`{STORE_COMMAND} --config run={run_dir.name}` with the config it ran with does")
    config = next((run_dir / name for name in CONFIG_SOURCES if (run_dir / name).is_file()), None)
    try:
        check_run(run_dir, config)
    except IncompleteRun as err:
        return f"it cannot be stored as it is ({err})"
    return f"`{STORE_COMMAND}` stores it"
