"""Reading the archive: an entry verified (its files against SHA256SUMS, SHA256SUMS against its
record, its run id against its identity), loaded, listed with the others in version order, or
found from a path or an id (the layout, identity and integrity: archive_layout). Every entry this
module returns has been verified, and an entry's results are read only as the bytes verified.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from fabench.files import JsonReadError, loads_json, read_json
from fabench.results.archive_layout import (RECORD, RECORD_FORMAT, RECORD_FORMAT_V1, RUN_ID_PATTERN, SUMS,
                                            ArchiveError, content_sha256, measurements_sha256, parse_sums,
                                            sha256_hex)
from fabench.results.bounds import bounds_problem

RESULTS = "results.json"


class EntryChanged(ArchiveError):
    """An entry's file changed after it was verified."""


def natural_key(text: str) -> tuple:
    """rocm-6.4.3 < rocm-6.10 < rocm-7.0: digit runs compare as numbers."""
    return tuple((1, int(part), "") if part.isdigit() else (0, 0, part) for part in re.findall(r"\d+|\D+", text))


def verify_entry(entry_dir: Path) -> list[str]:
    """Every integrity problem of an entry, each naming the file: changed, missing,
    extra, or a disagreement between SHA256SUMS, record.json, the run id and the measurements."""
    entry_dir = Path(entry_dir)
    problems, sums = file_problems(entry_dir)
    if problems:
        return problems  # the files named: what the record says of them adds nothing
    return record_problems(entry_dir, sums)


def file_problems(entry_dir: Path) -> tuple[list[str], dict[str, str]]:
    """Each file against SHA256SUMS; and SHA256SUMS as {name: sha256}."""
    if not entry_dir.is_dir():
        return [f"{entry_dir}: not a directory"], {}
    try:
        sums, problems = parse_sums((entry_dir / SUMS).read_text())
    except FileNotFoundError:
        return [f"{SUMS}: missing (nothing in the entry can be checked)"], {}
    except (OSError, UnicodeDecodeError) as err:
        return [f"{SUMS}: unreadable ({err})"], {}
    sizes = {}
    try:
        record_sizes = read_json(entry_dir / RECORD).get("files", {})
        sizes = {name: info.get("bytes") for name, info in record_sizes.items() if isinstance(info, dict)}
    except (OSError, ValueError, AttributeError):
        pass  # record.json's own problem is reported below through its checksum
    present = set()
    for path in sorted(entry_dir.rglob("*")):
        name = path.relative_to(entry_dir).as_posix()
        if path.is_symlink():
            problems.append(f"{name}: a symbolic link, not a stored file")
        elif path.is_file() and name != SUMS:
            present.add(name)
            if name not in sums:
                problems.append(f"{name}: extra file, not in {SUMS}")
    for name, expected in sorted(sums.items()):
        path = entry_dir / name
        if name not in present:
            if not path.is_symlink():
                problems.append(f"{name}: missing")
            continue
        data = path.read_bytes()
        if sha256_hex(data) == expected:
            continue
        # Only the digest is known: a shorter file may as well be an edit as a cut, so the sizes
        # are given as facts, never read as "truncated".
        size = sizes.get(name)
        sizes_text = f"; {len(data)} bytes, {size} when archived" if isinstance(size, int) and size != len(data) else ""
        problems.append(f"{name}: changed (does not match its digest in {SUMS}{sizes_text})")
    if RECORD not in sums and not problems:
        problems.append(f"{RECORD}: missing")
    return problems, sums


def record_problems(entry_dir: Path, sums: dict[str, str]) -> list[str]:
    """SHA256SUMS, record.json, the entry's place, run id and measurements agree (the files
    already match SHA256SUMS)."""
    try:
        record = read_json(entry_dir / RECORD)
        recorded = {name: info["sha256"] for name, info in record["files"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return [f"{RECORD}: not an archive record (no files with their sha256)"]
    if record.get("format") not in (RECORD_FORMAT_V1, RECORD_FORMAT):
        return [f"{RECORD}: format {record.get('format')!r} is not one this fabench reads"]
    listed = {name: digest for name, digest in sums.items() if name != RECORD}
    problems = [f"{name}: {SUMS} and {RECORD} disagree (rewritten after archiving)"
                for name in sorted(set(listed) & set(recorded)) if listed[name] != recorded[name]]
    problems += [f"{name}: in {SUMS}, not in {RECORD} (added after archiving)" for name in sorted(set(listed) - set(recorded))]
    problems += [f"{name}: in {RECORD}, not in {SUMS}" for name in sorted(set(recorded) - set(listed))]
    if problems:
        return problems
    if record.get("content_sha256") != content_sha256(recorded):
        return [f"{RECORD}: content_sha256 is not the digest of the files it lists (rewritten after archiving)"]
    label, run_id = entry_dir.parent.name, entry_dir.name
    if (record.get("label"), record.get("run_id")) != (label, run_id):
        return [f"{RECORD}: records {record.get('label')}/{record.get('run_id')}, stored as {label}/{run_id} "
                "(moved or renamed)"]
    collected, problem = read_results(entry_dir) if RESULTS in recorded else (None, None)
    if problem:
        return [problem]
    if record["format"] == RECORD_FORMAT_V1:
        identity_key, identity = "content_sha256", record["content_sha256"]
    else:
        identity_key, identity = "measurements_sha256", record.get("measurements_sha256")
        try:
            measured = measurements_sha256(collected)
        except (ValueError, KeyError, TypeError, AttributeError):
            measured = None
        if measured != identity:
            return [f"{RESULTS}: its measurements do not match {RECORD}'s measurements_sha256"]
    if not run_id.endswith(f"-{str(identity)[:8]}"):
        return [f"{run_id}: the run id's hash is not the entry's {identity_key} ({str(identity)[:8]})"]
    return []


def read_results(entry_dir: Path) -> tuple[object, str | None]:
    """An entry's results.json, or why it holds no measurement: not JSON, a NaN or an infinity,
    nested too deep, a number no measurement can be (fabench.results.bounds): which field, never
    only "does not match" (an entry archived before these checks may hold any of them)."""
    try:
        collected = read_json(entry_dir / RESULTS)
    except JsonReadError as err:
        return None, f"{RESULTS}: {str(err).removeprefix(str(entry_dir / RESULTS) + ': ')}"
    except OSError:
        return None, None  # the file check names a missing or unreadable file
    problem = bounds_problem(collected) or results_schema_problem(collected)
    return collected, f"{RESULTS}: {problem}" if problem else None


@functools.cache
def _result_validator():
    from fabench.results.collect import result_schema, result_validator

    return result_validator(result_schema())


def results_schema_problem(collected: object) -> str | None:
    """The first result of a results.json that the result schema refuses, as "results[i]: <field>:
    why"; None when every one passes. An entry sealed by hand (its digests made to match) is read as
    strictly as a run's own results: a variant's name in it names files (fabench compare --plots)."""
    from fabench.results.collect import schema_problems

    if not isinstance(collected, dict) or not isinstance(collected.get("results"), list):
        return "$.results: expected a list of results"
    for index, result in enumerate(collected["results"]):
        problems = schema_problems(result, _result_validator())
        if problems:
            return f"results[{index}]: {problems[0]}"
    return None


def measurements_of(results_path: Path) -> str | None:
    """The identity of the measurements in a results.json, or None when it cannot be read."""
    try:
        return measurements_sha256(read_json(results_path))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


@dataclass
class Entry:
    """One archived run; `problems` empty when intact."""

    path: Path
    label: str
    run_id: str
    record: dict | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.label}/{self.run_id}"

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def number(self) -> int:
        match = re.match(r"\d+", self.run_id)
        return int(match.group()) if match else 0

    @property
    def sort_key(self) -> tuple:
        return natural_key(self.label), self.number, self.run_id

    def get(self, key: str, default=None):
        return (self.record or {}).get(key, default)

    @property
    def identity(self) -> str | None:
        """The digest of the entry's measurements: recorded (format 2), else derived from its results."""
        return self.get("measurements_sha256") or measurements_of(self.path / RESULTS)

    def results(self) -> dict:
        """The collected results, read only when they are the bytes that were verified."""
        if not self.ok:
            raise EntryChanged(f"{self.id}: not intact ({'; '.join(self.problems)})")
        data = (self.path / RESULTS).read_bytes()
        if sha256_hex(data) != self.get("files", {}).get(RESULTS, {}).get("sha256"):
            raise EntryChanged(f"{self.id}: {RESULTS} changed after it was verified")
        return loads_json(data, f"{self.id}: {RESULTS}")


def load_entry(entry_dir: Path) -> Entry:
    entry_dir = Path(entry_dir)
    entry = Entry(entry_dir, entry_dir.parent.name, entry_dir.name)
    if not re.fullmatch(RUN_ID_PATTERN, entry_dir.name):
        entry.problems.append(f"{entry_dir.name}: not an archive run id (<number>-<8 hex digits>)")
    entry.problems += verify_entry(entry_dir)
    try:
        entry.record = read_json(entry_dir / RECORD)
    except (OSError, ValueError):
        entry.record = None
    if not isinstance(entry.record, dict):
        entry.record = None
    return entry


def entry_dirs(archive_root: Path) -> list[Path]:
    """The folders of every entry under archive_root (not the hidden ones: .ids, staging, the lock)."""
    archive_root = Path(archive_root)
    if not archive_root.is_dir():
        return []
    return [entry_dir
            for label_dir in sorted(p for p in archive_root.iterdir() if p.is_dir() and not p.name.startswith("."))
            for entry_dir in sorted(p for p in label_dir.iterdir() if not p.name.startswith("."))
            if entry_dir.is_dir()]


def list_entries(archive_root: Path) -> list[Entry]:
    """Every entry under archive_root, verified, in version order (label naturally, then number)."""
    return sorted((load_entry(entry_dir) for entry_dir in entry_dirs(archive_root)), key=lambda e: e.sort_key)


def archive_fingerprint(archive_root: Path) -> dict[str, str]:
    """Each entry's <label>/<run-id> and the sha256 of its files' names and bytes as they are now:
    any byte changed, added or removed anywhere in an entry changes it (the compare rule's params,
    so that Snakemake compares again, whatever the files' times say)."""
    fingerprint = {}
    for entry_dir in entry_dirs(archive_root):
        digest = hashlib.sha256()
        for path in sorted(entry_dir.rglob("*")):
            digest.update(path.relative_to(entry_dir).as_posix().encode() + b"\0")
            if path.is_file() and not path.is_symlink():
                digest.update(sha256_hex(path.read_bytes()).encode())
        fingerprint[f"{entry_dir.parent.name}/{entry_dir.name}"] = digest.hexdigest()
    return fingerprint


def resolve_entry(spec: str, archive_root: Path) -> Path:
    """An entry from a path, <label>/<run-id>, <label>/<number> or <label> (its newest intact entry)."""
    archive_root = Path(archive_root)
    for candidate in (Path(spec), archive_root / spec):
        if candidate.is_dir() and re.fullmatch(RUN_ID_PATTERN, candidate.name):
            return candidate
    label, _, run = spec.rstrip("/").partition("/")
    label_dir = archive_root / label
    if label_dir.is_dir() and "/" not in run:
        names = sorted((p.name for p in label_dir.iterdir() if re.fullmatch(RUN_ID_PATTERN, p.name)),
                       key=lambda n: int(n.split("-")[0]))
        if run:
            matches = [n for n in names if n.startswith(run) or n.split("-")[0].lstrip("0") == run.lstrip("0")]
            if len(matches) == 1:
                return label_dir / matches[0]
            if len(matches) > 1:
                raise ArchiveError(f"{spec}: ambiguous ({', '.join(matches)})")
        else:
            intact = [n for n in names if not verify_entry(label_dir / n)]
            if intact:
                return label_dir / intact[-1]
            if names:
                raise ArchiveError(f"{spec}: no intact entry under {label_dir}")
    raise ArchiveError(f"{spec}: no such archive entry (a path, or <label>/<run-id> under {archive_root})")
