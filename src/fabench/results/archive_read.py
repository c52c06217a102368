"""Reading the archive: an entry verified against its SHA256SUMS, loaded, listed with the others
in version order, or found from a path or an id (the layout: archive_layout).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from fabench.results.archive_layout import RECORD, RUN_ID_PATTERN, SUMS, ArchiveError, parse_sums, sha256_hex


def natural_key(text: str) -> tuple:
    """rocm-6.4.3 < rocm-6.10 < rocm-7.0: digit runs compare as numbers."""
    return tuple((1, int(part), "") if part.isdigit() else (0, 0, part) for part in re.findall(r"\d+|\D+", text))


def verify_entry(entry_dir: Path) -> list[str]:
    """Every integrity problem of an entry, each naming the file: changed, truncated, missing, extra."""
    entry_dir = Path(entry_dir)
    if not entry_dir.is_dir():
        return [f"{entry_dir}: not a directory"]
    try:
        sums, problems = parse_sums((entry_dir / SUMS).read_text())
    except FileNotFoundError:
        return [f"{SUMS}: missing (nothing in the entry can be checked)"]
    except (OSError, UnicodeDecodeError) as err:
        return [f"{SUMS}: unreadable ({err})"]
    sizes = {}
    try:
        record_sizes = json.loads((entry_dir / RECORD).read_text()).get("files", {})
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
        size = sizes.get(name)
        if isinstance(size, int) and len(data) < size:
            problems.append(f"{name}: truncated ({len(data)} of {size} bytes)")
        else:
            problems.append(f"{name}: changed (sha256 differs from {SUMS})")
    return problems


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

    def results(self) -> dict:
        return json.loads((self.path / "results.json").read_text())


def load_entry(entry_dir: Path) -> Entry:
    entry_dir = Path(entry_dir)
    entry = Entry(entry_dir, entry_dir.parent.name, entry_dir.name)
    if not re.fullmatch(RUN_ID_PATTERN, entry_dir.name):
        entry.problems.append(f"{entry_dir.name}: not an archive run id (<number>-<8 hex digits>)")
    entry.problems += verify_entry(entry_dir)
    try:
        entry.record = json.loads((entry_dir / RECORD).read_text())
    except (OSError, ValueError):
        entry.record = None
    if entry.record is not None and not entry.problems:
        if (entry.record.get("label"), entry.record.get("run_id")) != (entry.label, entry.run_id):
            entry.problems.append(f"{RECORD}: records {entry.record.get('label')}/{entry.record.get('run_id')}, "
                                  f"stored as {entry.id} (moved or renamed)")
    return entry


def list_entries(archive_root: Path) -> list[Entry]:
    """Every entry under archive_root, verified, in version order (label naturally, then number)."""
    archive_root = Path(archive_root)
    if not archive_root.is_dir():
        return []
    entries = []
    for label_dir in sorted(p for p in archive_root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for entry_dir in sorted(p for p in label_dir.iterdir() if not p.name.startswith(".")):
            if entry_dir.is_dir():
                entries.append(load_entry(entry_dir))
    return sorted(entries, key=lambda e: e.sort_key)


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
