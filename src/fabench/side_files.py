"""The files the workflow writes beside a run's measurements and reads back later, checked as
strictly as the config before anything is taken from them: the compile ahead's record
(results/<run>/compile-ahead.json), the archive receipt (results/<run>/archived.json), the
workflow's start (.snakemake/fabench-workflow-started.json), the compile ahead's stamps and the
digests of what write_report wrote (fabench.results.output_digests).

Each has a JSON Schema in workflow/schemas/ (SCHEMAS) and, where a schema cannot say it, a check
of its own (times in order). `read_side_file` raises SideFileError, one line naming the file and
the key; `side_file_or_note` gives the value, or None with that line, for a reader that goes on
without it: a bad side file is left out with a note and never costs the run's good outputs.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from fabench.files import FileReadError, JsonReadError, json_problem, loads_json
from fabench.resources import SCHEMA_DIR

# Far above any such file fabench writes (a compile ahead's record of a few hundred jobs: ~1 MB).
MAX_SIDE_FILE_BYTES = 16 * 1024 * 1024
COMPILE_AHEAD, RECEIPT, WORKFLOW_STARTED, STAMP = "compile-ahead", "receipt", "workflow-started", "stamp"
OUTPUT_DIGESTS = "output-digests"
SCHEMAS = {COMPILE_AHEAD: "compile-ahead.schema.json", RECEIPT: "receipt.schema.json",
           WORKFLOW_STARTED: "workflow-started.schema.json", STAMP: "stamp.schema.json",
           OUTPUT_DIGESTS: "output-digests.schema.json"}


class SideFileError(ValueError):
    """A side file fabench will not use: one line naming the file, the key and what was expected."""


@functools.lru_cache(maxsize=None)
def side_schema(kind: str) -> dict:
    return json.loads((SCHEMA_DIR / SCHEMAS[kind]).read_text())


def read_side_file(path: str | os.PathLike, kind: str) -> dict:
    """The side file `path` of `kind` (a key of SCHEMAS), once it is a regular file (not a link,
    never a FIFO or a device) of JSON that its schema and its own checks accept."""
    from fabench.files import read_regular

    try:
        value = loads_json(read_regular(path, MAX_SIDE_FILE_BYTES, follow=False), str(path))
    except (FileReadError, JsonReadError) as err:
        raise SideFileError(str(err)) from None
    except OSError as err:
        raise SideFileError(f"{path}: cannot be read ({err.strerror})") from None
    problem = side_value_problem(value, kind)
    if problem:
        raise SideFileError(f"{path}: {problem}")
    return value


def side_value_problem(value: object, kind: str) -> str | None:
    """What is wrong with a side file's content (already decoded: one kept inside results.json,
    say), as "<key>: why", or None."""
    return _schema_problem(value, side_schema(kind)) or _order_problem(value, kind)


def _schema_problem(value: object, schema: dict) -> str | None:
    """The most relevant schema violation as "<key>: why" (NaN and infinities refused first). Not
    fabench.config's richer reader: the measure stage reads stamps, and config sits above it."""
    import jsonschema

    problem = json_problem(value)
    if problem:
        return problem.removeprefix("$.")
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(value))
    if error is None:
        return None
    where = ".".join(str(part) for part in error.absolute_path) or "(top level)"
    return f"{where}: {error.message}"


def side_file_or_note(path: str | os.PathLike, kind: str) -> tuple[dict | None, str | None]:
    """(the side file, None), (None, why it is left out), or (None, None) where there is none."""
    if not os.path.lexists(path):
        return None, None
    try:
        return read_side_file(path, kind), None
    except SideFileError as err:
        return None, f"{err}; left out"


def _order_problem(value: dict, kind: str) -> str | None:
    """What a schema cannot say: a compile ahead's times in the order they happened."""
    if kind != COMPILE_AHEAD:
        return None
    times = [(key, value[key]) for key in ("started_at", "leased_at", "ended_at") if key in value]
    for (early, a), (late, b) in zip(times, times[1:]):
        if b < a:
            return f"{late}: {b} is before {early} ({a}); expected the times in the order they happened"
    for index, process in enumerate(value.get("processes", [])):
        if process.get("exited_at") is not None and process["exited_at"] < process["spawned_at"]:
            return f"processes.{index}.exited_at: before its spawned_at; expected the times in order"
    return None


def stamp_path_problem(folder: Path) -> str | None:
    """Why the stamps' folder (or one above it, up to the working directory) may not be used: a
    symbolic link (dangling or not) or something other than a folder; None when it may (or does
    not exist yet)."""
    cwd = Path.cwd()
    path = folder if folder.is_absolute() else cwd / folder
    for part in [path, *path.parents]:
        if part == cwd or cwd not in part.parents:
            break
        if part.is_symlink():
            return f"{part} is a symbolic link, which fabench does not follow"
        if os.path.lexists(part) and not part.is_dir():
            return f"{part} is not a folder"
    return None
