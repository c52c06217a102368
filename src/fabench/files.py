"""Files fabench writes and the JSON it reads back.

Writing: a reader never sees half of a file, and no path given as an output (a config value, a
command-line option) replaces what is not a regular file: every file fabench writes goes through
write_atomic. Reading: a JSON file holds only finite numbers and is nested no deeper than any file
fabench writes; anything else is one line naming the file and the field (read_json, loads_json).
Paths named by data (a variant's name in a results file, a path in a stored config, a file found
in a run folder) are confined to their folder and never followed through a link (confined_path);
nothing but the archive's store writes inside an archive entry (output_target refuses it).
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import secrets
import stat
from pathlib import Path, PurePosixPath

# Deeper than any file fabench writes (a results.json is about 10 levels), far below where
# Python's parser or the schema validator would run out of stack.
MAX_JSON_DEPTH = 100


class OutputPathError(ValueError):
    """A path an output may not be written to; the message is one line naming it."""


class JsonReadError(ValueError):
    """A JSON text fabench refuses to read; the message is one line naming the source and field."""


class DataPathError(ValueError):
    """A path named by data that fabench will not follow; the message is one line naming where it came from."""


# An archive entry (fabench.results.archive_layout) is a folder holding both of these files; only the
# archive's store (which writes SHA256SUMS last, in a staging folder) writes in one.
ENTRY_RECORD, ENTRY_SUMS = "record.json", "SHA256SUMS"


# ---------------------------------------------------------------- paths named by data

def confined_path(root: str | os.PathLike, name: str, what: str) -> Path:
    """`root`/`name`, where `name` comes from data rather than from the user's command line: refused
    (DataPathError, one line naming `what`) when it is empty, absolute, climbs with '..', or passes
    through a symbolic link anywhere below `root` (the last part included). `root` itself is the
    caller's (a folder the user named, the project): it is taken as it is."""
    text = str(name)
    pure = PurePosixPath(text)
    if not text or "\0" in text or pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise DataPathError(f"{what}: {text[:80]!r} is not a relative path inside {root} (no '..', not absolute)")
    path = Path(root)
    for part in pure.parts:
        path = path / part
        if path.is_symlink():
            raise DataPathError(f"{what}: {path} is a symbolic link, which fabench does not follow; "
                                "give the file itself")
    return path


def archive_entry_of(path: str | os.PathLike) -> Path | None:
    """The archive entry folder that `path` lies in (or is), else None."""
    for folder in (Path(os.path.abspath(path)), *Path(os.path.abspath(path)).parents):
        if (folder / ENTRY_RECORD).is_file() and (folder / ENTRY_SUMS).is_file():
            return folder
    return None


# ---------------------------------------------------------------- writing

def _kind(mode: int) -> str | None:
    """What a file that is not a regular one is, in words (None for a regular file)."""
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))
    return next((word for test, word in kinds if test(mode)), None if stat.S_ISREG(mode) else "not a regular file")


def output_target(path: str | os.PathLike, folder_must_exist: bool = True) -> Path:
    """Where writing `path` puts the file: `path`, or the regular file a symbolic link names.

    Raises OutputPathError when `path` (or what a link leads to) exists and is not a regular file,
    is a link to nothing, or (`folder_must_exist`) its folder does not exist: what a user names as
    an output is checked so (output_file_arg), and no folder is made for it."""
    path = Path(path)
    target = path
    try:
        if path.is_symlink():
            target = Path(os.path.realpath(path))
            if not target.exists():
                raise OutputPathError(f"{path}: a symbolic link to nothing ({target}); give a file path")
        mode = target.stat().st_mode
    except FileNotFoundError:
        pass
    except OSError as err:
        raise OutputPathError(f"{path}: cannot be written ({err.strerror})") from None
    else:
        kind = _kind(mode)
        if kind:
            via = f" (through the link to {target})" if target != path else ""
            raise OutputPathError(f"{path}: is {kind}{via}; give the path of a regular file")
    entry = archive_entry_of(target)
    if entry is not None:
        raise OutputPathError(f"{path}: lies in the archive entry {entry}, which only `fabench archive store` "
                              "writes, once; give a path outside the archive")
    if folder_must_exist and not target.parent.is_dir():
        raise OutputPathError(f"{path}: the folder {target.parent} does not exist (create it first)")
    return target


def output_folder(path: str | os.PathLike, create: bool = True) -> Path:
    """A folder for outputs (--plots DIR): `path` when it is a folder, else made (with `create`),
    one level only, in a folder that exists; OutputPathError when `path` is anything else or its
    parent is missing."""
    path = Path(path)
    if path.is_dir():
        return path
    if path.exists() or path.is_symlink():
        raise OutputPathError(f"{path}: is not a folder; give a folder for the outputs")
    if not path.parent.is_dir():
        raise OutputPathError(f"{path}: the folder {path.parent} does not exist (create it first)")
    if create:
        path.mkdir()
    return path


def output_file_arg(text: str) -> Path:
    """argparse type of an option naming a file to write (--out, --out-md): refused at parsing,
    before anything runs, when output_target refuses it; the parser prints the one line."""
    try:
        output_target(text)
    except OutputPathError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return Path(text)


def output_folder_arg(text: str) -> Path:
    """argparse type of an option naming a folder to write into (--plots, --out-dir), checked as
    output_folder checks it; the folder itself is made only when written to."""
    try:
        output_folder(text, create=False)
    except OutputPathError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return Path(text)


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write `data` to `path` all at once: a temporary file in the same folder, flushed to disk,
    then renamed over `path` (or over the regular file a link at `path` names). Refuses, with
    OutputPathError, what output_target refuses, whatever the caller. The folder is made when
    missing: the workflow's own paths (results/<run>/...) need it, and a path a user gives as an
    output option was refused at parsing when its folder is missing (output_file_arg). On any
    failure (a full disk, say) the temporary file is removed and `path` is left as it was.

    The file keeps the mode of the file it replaces (a private 0600 output stays private); a new
    file gets the mode the umask gives any new file (0644 under the usual 022)."""
    target = output_target(path, folder_must_exist=False)
    target.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    mode = replaced_mode(target)
    fd, tmp = _create_temporary(target)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def replaced_mode(target: Path) -> int | None:
    """The permission bits of the regular file at `target`, None when there is none yet."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        return None


def _create_temporary(target: Path) -> tuple[int, str]:
    """A new file beside `target`, opened for writing, created with 0666 so that the umask sets its
    mode as for any new file (mkstemp's fixed 0600 would hide results from the other users of a
    shared folder, and a fixed 0644 would ignore a private umask)."""
    while True:
        tmp = str(target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), tmp
        except FileExistsError:
            continue


def write_json(path: str | os.PathLike, value, sort_keys: bool = False) -> None:
    """JSON, indented, one trailing newline, written atomically."""
    write_atomic(path, json.dumps(value, indent=2, sort_keys=sort_keys) + "\n")


# ---------------------------------------------------------------- reading

def json_problem(value: object) -> str | None:
    """The first field of a decoded JSON value that is not a finite number (NaN, an infinity) or
    is nested deeper than MAX_JSON_DEPTH, as "<JSON path>: why"; None when there is none.
    Walked without recursion, so that no depth can exhaust the stack."""
    pending = [(value, "$", 0)]
    while pending:
        item, where, depth = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return f"{where}: {item} is not a finite number"
        if isinstance(item, (dict, list)):
            if depth >= MAX_JSON_DEPTH:
                return f"{where}: nested deeper than {MAX_JSON_DEPTH} levels"
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            pending += [(v, f"{where}[{k}]" if isinstance(k, int) else f"{where}.{k}", depth + 1)
                        for k, v in reversed(list(pairs))]
    return None


def loads_json(text: str | bytes, source: str = "JSON") -> object:
    """Decode JSON, refusing (JsonReadError, one line naming `source` and the field) what is not
    JSON, NaN and infinities (which Python's json accepts) and nesting too deep to handle."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise JsonReadError(f"{source}: nested too deeply to read (at most {MAX_JSON_DEPTH} levels)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise JsonReadError(f"{source}: not readable JSON ({err})") from None
    problem = json_problem(value)
    if problem:
        raise JsonReadError(f"{source}: {problem}")
    return value


def read_json(path: str | os.PathLike) -> object:
    """A JSON file, as loads_json reads it (OSError when it cannot be read)."""
    return loads_json(Path(path).read_bytes(), str(path))


class FileReadError(ValueError):
    """A file fabench refuses to read: not a regular file, or larger than the caller allows; the
    message is one line naming the file."""


def read_regular(path: str | os.PathLike, limit: int, follow: bool = True) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them. FileReadError (one line) when
    it is not a regular file (a FIFO, a device, a folder: none is read, none is waited on), when
    it is larger than `limit`, or (not `follow`) when it is a symbolic link; OSError as open raises
    it (a missing file). A FIFO opened without O_NONBLOCK would wait for a writer, and /dev/zero
    never ends: both are refused before any byte is read."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        if not follow and err.errno == errno.ELOOP:
            raise FileReadError(f"{path}: is a symbolic link, which fabench does not follow here") from None
        raise
    info = os.fstat(fd)
    kind, size = _kind(info.st_mode), info.st_size
    if kind or size > limit:
        os.close(fd)
        raise FileReadError(f"{path}: is {kind}, not a regular file" if kind else
                            f"{path}: {size} bytes, more than the {limit} read here")
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:  # grew while read
        raise FileReadError(f"{path}: more than the {limit} bytes read here")
    return data
