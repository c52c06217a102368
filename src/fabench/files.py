"""Writing files so that a reader never sees half of one: every file fabench writes goes through here."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write `data` to `path` all at once: a temporary file in the same directory, flushed to disk,
    then renamed over `path`. On any failure (a full disk, say) the temporary file is removed and
    `path` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide results from other users of a shared folder
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_json(path: str | os.PathLike, value, sort_keys: bool = False) -> None:
    """JSON, indented, one trailing newline, written atomically."""
    write_atomic(path, json.dumps(value, indent=2, sort_keys=sort_keys) + "\n")
