"""Storing a finished run as a new archive entry (the layout, identity and integrity: archive_layout).

The label is the platform version the results were measured with: rocm-<hip version> on ROCm,
cuda-<CUDA version> on CUDA, cpu-torch<version> on a CPU; a caller may choose another. The run id
is <number>-<hash>: the number counts up per label from 0001 (as pytest-benchmark numbers its
saved runs) and is never given twice, even after an entry is deleted, because each number is
claimed by creating label/.ids/<number> exclusively; the hash is the first 8 hex digits of the
entry's identity, the digest of its measurements.

A store holds the archive's writer lock (archive_lock) from the identity check to the rename: the
archive holds each measurement once. An entry is written into a staging directory beside it
(every file through write_atomic) and renamed into place when complete, so a reader sees a whole
entry or none; the rename fails if the entry exists, and no code here opens a file of an existing
entry for writing. A store that fails (a full disk) takes back its number and leaves nothing.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path, PurePosixPath
from typing import Iterable, Mapping

from fabench.analysis.result_types import provenance_of
from fabench.files import DataPathError, FileReadError, confined_path, read_regular, write_atomic, write_json
from fabench.platforms import PlatformName
from fabench.results.archive_layout import (IDS_DIR, LABEL_MAX, LABEL_PATTERN, RECORD, RECORD_FORMAT,
                                            RUN_ID_PATTERN, STAGING_PREFIX, SUMS, ArchiveError, content_sha256,
                                            measurements_sha256, sha256_hex, sums_text)
from fabench.results.archive_lock import Notify, archive_lock, remove_stale_staging
from fabench.results.archive_read import entry_dirs, load_entry
from fabench.results.archive_run_check import IncompleteRun, check_run  # noqa: F401 (IncompleteRun: re-exported)

# What of a run directory is kept: the per-job files are left out, results.json holds them all.
RUN_FILES = ("results.json", "report.md", "config.json")
# The resolved config is kept as config.json: the run's own, else the one frozen for the report.
CONFIG_SOURCES = ("config.json", "report-config.json")
RUN_GLOBS = ("aiter-config/*.json", "*.png", "plots/*.png")
# An --extra file (an image manifest, a log) is read whole into the entry: a regular file of at
# most this size, never a FIFO or a device, which would be read without end.
MAX_EXTRA_BYTES = 64 * 1024 * 1024
PAUSE_ENV = "FABENCH_TEST_PAUSE_AT"
VERSION_KEYS = ("driver", "cuda", "hip", "rocm", "cudnn", "torch", "triton", "aiter", "aiter_commit",
                "runtime", "image", "image_id")


# ---------------------------------------------------------------- naming

def _common(values: Iterable):
    """One value when every result agrees, else the distinct values in order of appearance."""
    distinct = list(dict.fromkeys(json.dumps(v, sort_keys=True) for v in values))
    decoded = [json.loads(v) for v in distinct]
    return decoded[0] if len(decoded) == 1 else decoded


def platform_version(results: list[dict]) -> str:
    """rocm-<hip>, cuda-<cuda> or cpu-torch<torch>, from the results' provenance."""
    platforms = {r["platform"] for r in results}
    if len(platforms) != 1:
        raise ArchiveError(f"results from several platforms ({', '.join(sorted(platforms))}): name a label")
    platform = PlatformName.parse(platforms.pop())
    key, prefix = {PlatformName.ROCM: ("hip", "rocm-"), PlatformName.CUDA: ("cuda", "cuda-"),
                   PlatformName.CPU: ("torch", "cpu-torch")}[platform]
    versions = {provenance_of(r).get("rocm") or provenance_of(r).get(key) if platform == PlatformName.ROCM
                else provenance_of(r).get(key) for r in results}
    if None in versions or "" in versions:
        raise ArchiveError(f"provenance.{key} is not recorded: cannot name the {platform} version; name a label")
    if len(versions) != 1:
        raise ArchiveError(f"the results disagree on provenance.{key} ({', '.join(sorted(versions))}): name a label")
    return check_label(prefix + versions.pop())


def label_problem(label: object) -> str | None:
    """Why `label` cannot name an archive folder, or None."""
    if not isinstance(label, str) or not re.fullmatch(LABEL_PATTERN, label):
        return f"label {label!r}: use letters, digits and . _ + - (starting with a letter or digit)"
    if len(label) > LABEL_MAX:
        return f"label {label[:20]!r}... is {len(label)} characters: at most {LABEL_MAX}"
    return None


def check_label(label: str) -> str:
    problem = label_problem(label)
    if problem:
        raise ArchiveError(problem)
    return label


# ---------------------------------------------------------------- files of an entry

def _safe_name(name: str) -> str:
    path = PurePosixPath(name)
    if (path.is_absolute() or not path.parts or any(p in ("", ".", "..") for p in path.parts)
            or not re.fullmatch(r"[A-Za-z0-9._+/-]+", name) or name in (RECORD, SUMS)):
        raise ArchiveError(f"file name {name!r} cannot be stored in an archive entry")
    return path.as_posix()


def run_files(run_dir: Path) -> dict[str, Path]:
    """The run's files an entry keeps, by their names in the entry. ArchiveError for any of them
    that is a symbolic link or lies behind one (plots/ a link, say): an entry holds the run's own
    files, never what a link in the run folder points at (fabench.files.confined_path)."""
    found = [name for name in RUN_FILES if os.path.lexists(run_dir / name)]
    for pattern in RUN_GLOBS:
        found += [path.relative_to(run_dir).as_posix() for path in sorted(run_dir.glob(pattern))]
    return {name: path for name, path in own_files(run_dir, found).items() if path.is_file()}


def own_files(run_dir: Path, names: Iterable[str]) -> dict[str, Path]:
    """Each name's path in the run folder; ArchiveError when one is, or lies behind, a symbolic link."""
    try:
        return {name: confined_path(run_dir, name, f"the run's file {name}") for name in dict.fromkeys(names)}
    except DataPathError as err:
        raise ArchiveError(f"{err}; not archived") from None


def _read_files(run_dir: Path, extra_files: Mapping[str, os.PathLike | str]) -> dict[str, bytes]:
    contents = {name: path.read_bytes() for name, path in run_files(run_dir).items()}
    for name, path in extra_files.items():
        name = _safe_name(name)
        try:
            data = read_regular(path, MAX_EXTRA_BYTES)
        except FileReadError as err:
            raise ArchiveError(f"extra file {name}: {err}") from None
        except OSError as err:
            raise ArchiveError(f"extra file {name}: cannot read {path}: {err.strerror}") from None
        if name in contents and contents[name] != data:
            raise ArchiveError(f"extra file {name} ({path}) differs from the run's {run_dir / name}")
        contents[name] = data
    return contents


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def make_record(collected: dict, label: str, run_id: str, content_digest: str, identity: str,
                files: Mapping[str, bytes], archived_at: str | None = None) -> dict:
    results = collected["results"]
    return {
        "format": RECORD_FORMAT,
        "label": label,
        "run_id": run_id,
        "number": int(run_id.split("-")[0]),
        "measurements_sha256": identity,
        "content_sha256": content_digest,
        "run": collected["run"],
        "archived_at": archived_at or _utc_now(),
        "archived_on": socket.gethostname(),
        **_measured_where(results),
        "schema_versions": sorted({r["schema_version"] for r in results}),
        "variants": list(dict.fromkeys(r["variant"] for r in results)),
        "shapes": list(dict.fromkeys(r["shape_id"] for r in results)),
        "jobs": len(results),
        "files": {name: {"bytes": len(files[name]), "sha256": sha256_hex(files[name])} for name in sorted(files)},
    }


def _measured_where(results: list[dict]) -> dict:
    """The record's fields from the results' provenance: the span of the run, and the platform,
    host, device, card, arch, versions, config and commit every job shares (_common)."""
    prov = [provenance_of(r) for r in results]
    times = lambda key: sorted(p[key] for p in prov if p.get(key))  # noqa: E731
    return {
        "started": (times("started") or [None])[0],
        "finished": (times("finished") or [None])[-1],
        "platform": _common(r["platform"] for r in results),
        "host": _common(p.get("host") for p in prov),
        "device": _common(p.get("device") for p in prov),
        # Which card (provenance.gpu, since it was recorded): two runs of one model on two cards
        # differ by more than two runs on one card.
        "gpu": _common((p.get("gpu") or {}).get("uuid") for p in prov),
        "arch": _common(p.get("arch") for p in prov),
        "versions": {key: _common(p.get(key) for p in prov) for key in VERSION_KEYS if any(key in p for p in prov)},
        "config_sha256": _common(p.get("config_sha256") for p in prov),
        "project_commit": _common(p.get("project_commit") for p in prov),
    }


# ---------------------------------------------------------------- writing

class AlreadyArchived(ArchiveError):
    """The same measurements are already an entry of the archive (`entry`, its folder)."""

    def __init__(self, message: str, entry: Path):
        super().__init__(message)
        self.entry = entry


class StoreInterrupted(KeyboardInterrupt):
    """SIGINT during a store; the message says whether the entry was stored whole or not at all."""


def _refuse_archived_measurements(archive_root: Path, identity: str) -> None:
    """The archive holds each measurement once, whatever its label, run name, titles or report:
    an entry anywhere in the archive with the same identity refuses the run (called under the lock)."""
    for entry_dir in entry_dirs(archive_root):
        entry = load_entry(entry_dir)
        if entry.identity == identity:
            state = "" if entry.ok else f"; that entry is broken ({'; '.join(entry.problems)}): delete it to archive again"
            raise AlreadyArchived(f"these measurements are already archived as {entry.id}{state}", entry_dir)


def _claim_number(label_dir: Path, run_hash: str) -> Path:
    """The next number of this label, claimed by an exclusive create of .ids/<number>: its path."""
    ids = label_dir / IDS_DIR
    ids.mkdir(parents=True, exist_ok=True)
    used = [int(m.group(1)) for p in ids.iterdir() if (m := re.fullmatch(r"(\d{4,})", p.name))]
    used += [int(m.group(1)) for p in label_dir.iterdir() if (m := re.fullmatch(RUN_ID_PATTERN, p.name))]
    number = max(used, default=0) + 1
    while True:
        claim = ids / f"{number:04d}"
        try:
            fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            number += 1
            continue
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(f"{number:04d}-{run_hash} {_utc_now()}\n")
        except BaseException:
            claim.unlink()
            raise
        return claim


def store_entry(entry_dir: Path, files: Mapping[str, bytes]) -> Path:
    """Write a new entry: `files` plus SHA256SUMS, staged beside it, then renamed into place.

    Refuses an entry that exists (nothing is changed); a failure leaves no entry and no staging."""
    entry_dir = Path(entry_dir)
    if entry_dir.exists() or entry_dir.is_symlink():
        raise ArchiveError(f"archive entry {entry_dir} exists: an entry is written once and never changed")
    names = {_safe_name(n) if n != RECORD else n: data for n, data in files.items()}
    entry_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX + entry_dir.name + "-", dir=entry_dir.parent))
    try:
        for name, data in names.items():
            write_atomic(staging / name, data)
        write_atomic(staging / SUMS, sums_text(names))
        for path in staging.rglob("*"):
            os.chmod(path, 0o755 if path.is_dir() else 0o444)
        os.chmod(staging, 0o755)
        _fsync_dir(staging)
        pause_for_tests("staged")
        # rename() replaces an empty directory: check first, then let it fail on a non-empty one.
        if entry_dir.exists():
            raise ArchiveError(f"archive entry {entry_dir} appeared while writing: not overwritten")
        try:
            os.rename(staging, entry_dir)
        except OSError as err:
            raise ArchiveError(f"archive entry {entry_dir} exists ({err.strerror}): not overwritten") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _fsync_dir(entry_dir.parent)
    return entry_dir


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pause_for_tests(step: str) -> None:
    """FABENCH_TEST_PAUSE_AT=<step> (locked, staged, stored) stops a store there for a minute,
    after saying so on stderr, so that a test's signal lands at that step."""
    if os.environ.get(PAUSE_ENV) == step:
        print(f"fabench: paused at {step} ({PAUSE_ENV})", file=sys.stderr, flush=True)
        time.sleep(60)


def archive_run(run_dir: Path, archive_root: Path, label: str | None = None,
                extra_files: Mapping[str, os.PathLike | str] | None = None, *,
                expected_jobs: Iterable[tuple[str, str]] = (), schema: dict | None = None,
                notify: Notify | None = None) -> Path:
    """Store the finished run in `run_dir` as a new entry archive_root/<label>/<run-id>/; its path.

    Refuses, with nothing written: (IncompleteRun) a run that is not finished (archive_run_check:
    the resolved config, results, report and every job of the config and of `expected_jobs`);
    (AlreadyArchived) measurements already in the archive; (ArchiveError) an entry that cannot be
    written, a full disk say. `notify` hears about waiting for the lock and about what an
    interrupted store left behind. SIGINT raises StoreInterrupted, saying what was stored."""
    run_dir, archive_root = Path(run_dir), Path(archive_root)
    if label is not None:
        check_label(label)
    extra_files = dict(extra_files or {})
    # A link among the run's files (or the run folder a link) refuses the run before any is read.
    if run_dir.is_symlink():
        raise ArchiveError(f"{run_dir}: a symbolic link, which fabench does not follow; give the run folder itself")
    own_files(run_dir, [name for name in CONFIG_SOURCES if os.path.lexists(run_dir / name)])
    run_files(run_dir)
    if "config.json" not in extra_files:
        found = [run_dir / name for name in CONFIG_SOURCES if (run_dir / name).is_file()]
        if found:
            extra_files["config.json"] = found[0]
    collected = check_run(run_dir, Path(extra_files["config.json"]) if "config.json" in extra_files else None,
                          expected_jobs, schema)
    label = label if label is not None else platform_version(collected["results"])
    contents = _read_files(run_dir, extra_files)
    identity = measurements_sha256(collected)
    try:
        with archive_lock(archive_root, notify):
            for line in remove_stale_staging(archive_root):
                if notify:
                    notify(line)
            pause_for_tests("locked")
            _refuse_archived_measurements(archive_root, identity)
            entry = _write_entry(archive_root / label, collected, identity, contents)
            pause_for_tests("stored")
    except KeyboardInterrupt:
        stored = [p for p in (archive_root / label).glob(f"*-{identity[:8]}") if load_entry(p).identity == identity]
        raise StoreInterrupted(f"interrupted; {stored[0]} was stored whole" if stored
                               else "interrupted; nothing was archived (no entry, no staging left)") from None
    return entry


def _write_entry(label_dir: Path, collected: dict, identity: str, contents: dict[str, bytes]) -> Path:
    """The entry written under label_dir, or ArchiveError with nothing left of it (full disk)."""
    made_label = not label_dir.exists()
    claim = entry_dir = None
    try:
        claim = _claim_number(label_dir, identity[:8])
        entry_dir = label_dir / f"{claim.name}-{identity[:8]}"
        digests = {name: sha256_hex(data) for name, data in contents.items()}
        record = make_record(collected, label_dir.name, entry_dir.name, content_sha256(digests), identity, contents)
        return store_entry(entry_dir, {**contents, RECORD: (json.dumps(record, indent=2) + "\n").encode()})
    except BaseException as err:
        if entry_dir is not None and entry_dir.exists():
            raise  # the entry is whole: it stays, with its number
        _release(claim, label_dir if made_label else None)
        if isinstance(err, OSError):
            raise ArchiveError(f"cannot write the entry under {label_dir}: {err.strerror or err}; "
                               "nothing was archived") from None
        raise


def _release(claim: Path | None, new_label_dir: Path | None) -> None:
    """Undo a store that wrote no entry: its number claim, and the label folder it created."""
    with contextlib.suppress(OSError):
        if claim is not None:
            claim.unlink()
        if new_label_dir is not None:
            (new_label_dir / IDS_DIR).rmdir()
            new_label_dir.rmdir()


def write_receipt(path: Path, entry_dir: Path) -> None:
    """A small file naming the entry a run was archived as (the archive rule's output)."""
    entry = load_entry(entry_dir)
    write_json(path, {"entry": entry.id, "path": str(entry_dir), "content_sha256": (entry.record or {}).get(
        "content_sha256"), "sha256sums": sha256_hex((Path(entry_dir) / SUMS).read_bytes())})
