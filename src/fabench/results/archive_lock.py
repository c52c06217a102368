"""The archive's writer lock, and recovering from a store that was interrupted.

One store at a time per archive: `archive_lock` holds an exclusive flock on <root>/.lock for the
whole store (the identity check, the number, the staging, the rename), so two stores of the same
measurements started at the same moment cannot both pass the identity check. The kernel releases
a flock when its process ends, however it ends (SIGKILL included): a lock is never left stuck,
and the .lock file itself holds nothing.

A store killed before its rename leaves <label>/.staging-* (never an entry: an entry appears only
by the rename of a complete staging folder). Whoever next holds the lock (store, list, or the
archive rule) knows no store is writing, so any staging folder is stale: it is named and removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from pathlib import Path
from typing import Callable, Iterator

from fabench.places import lock_at_once
from fabench.results.archive_layout import LOCK, STAGING_PREFIX, ArchiveError

Notify = Callable[[str], None]


@contextlib.contextmanager
def archive_lock(root: Path, notify: Notify | None = None) -> Iterator[None]:
    """Hold the archive's writer lock (waiting, and saying so, while another store holds it)."""
    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise ArchiveError(f"cannot take the archive's lock {root / LOCK}: {err.strerror or err}") from None
    try:
        if not lock_at_once(fd):
            if notify:
                notify(f"waiting for another store into {root} to finish (it holds {root / LOCK})")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def lock_if_free(root: Path) -> Iterator[str | None]:
    """The writer lock when it can be had at once: None, else why not (a store is writing, or the
    archive cannot be written at all)."""
    try:
        fd = os.open(Path(root) / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        yield f"cannot take {Path(root) / LOCK}: {err.strerror}"
        return
    try:
        try:
            free = lock_at_once(fd)
        except OSError as err:
            yield f"cannot lock {Path(root) / LOCK}: {err.strerror}"
            return
        yield None if free else "a store is writing it now"
    finally:
        os.close(fd)


def staging_folders(root: Path) -> list[Path]:
    return sorted(p for p in Path(root).glob(f"*/{STAGING_PREFIX}*") if p.is_dir() and not p.is_symlink())


def remove_stale_staging(root: Path) -> list[str]:
    """Call with the writer lock held: every staging folder is then left by an interrupted store.
    Each is removed; one line per folder says so."""
    said = []
    for folder in staging_folders(root):
        shutil.rmtree(folder)
        said.append(f"removed {folder}: left by an interrupted store (nothing of it was archived)")
    return said


def recover(root: Path) -> list[str]:
    """What interrupted stores left under root, cleared when no store is writing; one line each."""
    if not staging_folders(root):
        return []
    with lock_if_free(root) as busy:
        if busy is None:
            return remove_stale_staging(root)
        return [f"{folder}: staging folder left in place ({busy})" for folder in staging_folders(root)]
