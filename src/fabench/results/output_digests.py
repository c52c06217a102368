"""What rule write_report wrote, by digest, so that the workflow notices a file changed since.

Snakemake decides what to make again from what is missing and from modification times: a
results.json or a job's result edited, cut or corrupted after the report was written is newer than
its inputs, and the next `snakemake report` said "Nothing to be done". write_report records the
SHA-256 of every file it wrote (`record_digests`, written last); when the workflow plans, each file
that is no longer those bytes (`changed_outputs`) is given a modification time older than any input
(`make_stale`), so Snakemake writes the report again from the measurements, and says why. A record
that fails its check (fabench.side_files) marks every file it should have named.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from fabench.files import write_json
from fabench.side_files import OUTPUT_DIGESTS, SideFileError, read_side_file

FORMAT = "fabench-output-digests/1"


def digest(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def record_digests(outputs: list[str], record: str | os.PathLike) -> None:
    """The digest of each of `outputs` (as the rule names them), in `record`."""
    write_json(record, {"format": FORMAT, "files": {str(path): digest(Path(path)) for path in outputs}})


def changed_outputs(outputs: list[str], record: str | os.PathLike) -> list[tuple[str, str]]:
    """(path, why) of each of `outputs` present that is not what write_report wrote: its digest
    differs from the record's, or the record is missing or fails its check while outputs exist
    (then the record itself is named too). A missing output is Snakemake's to notice."""
    present = [path for path in outputs if os.path.lexists(path)]
    if not present:
        return []
    try:
        files = read_side_file(record, OUTPUT_DIGESTS)["files"]
    except SideFileError as err:
        if not os.path.lexists(record):
            return []  # written before fabench recorded digests: nothing to check against
        return [(path, f"{err}") for path in [*present, str(record)]]
    changed = []
    for path in present:
        if Path(path).is_symlink() or not Path(path).is_file():
            changed.append((path, "not the regular file write_report wrote"))
        elif files.get(str(path)) != digest(Path(path)):
            changed.append((path, "its bytes are not those write_report wrote (edited, cut or corrupted since)"))
    return changed


def make_stale(paths: list[str]) -> None:
    """Each path's modification time set to the epoch (never through a link): older than its
    inputs, so Snakemake makes it again."""
    for path in paths:
        os.utime(path, (0, 0), follow_symlinks=False)


def unreadable_process_files(paths: list[str], record: str | os.PathLike) -> list[tuple[str, str]]:
    """(path, why) of each measuring process file present that the merge would refuse
    (fabench.results.merge.read_process_file), of those changed since write_report last wrote the
    record (all present, where there is none): a file corrupted after its process wrote it. Moved
    aside (set_aside), its process is measured again instead of the report failing on it."""
    from fabench.results.merge import ProcessFileError, read_process_file

    since = os.lstat(record).st_mtime if os.path.lexists(record) else None
    found = []
    for path in paths:
        if not os.path.lexists(path) or (since is not None and os.lstat(path).st_mtime <= since):
            continue
        try:
            read_process_file(Path(path))
        except ProcessFileError as err:
            found.append((path, str(err).split("; delete it")[0]))
    return found


def set_aside(paths: list[str]) -> list[str]:
    """Each path renamed to <path>.unreadable-<epoch s> beside it (kept, never deleted), so that
    Snakemake sees its file missing and makes it again; the new names."""
    moved = []
    for path in paths:
        aside = f"{path}.unreadable-{int(time.time())}"
        os.rename(path, aside)
        moved.append(aside)
    return moved
