"""The archive: every finished run kept, per platform version, never overwritten.

    archive/<label>/<run-id>/
        record.json        who, what, when: run name, platform, device, every version, timestamps
        SHA256SUMS         sha256 of every other file (`sha256sum -c SHA256SUMS` in the entry checks it)
        results.json       the collected results (schema checked before archiving)
        report.md          the rendered report
        config.json        the resolved config (the run's config.json, else its report-config.json)
        aiter-config/<variant>.json (+ .meta.json), plots/*.png
        ... extra files the caller names (the image manifest, the resolved config)

The label is the platform version the results were measured with: rocm-<hip version> on ROCm,
cuda-<CUDA version> on CUDA, cpu-torch<version> on a CPU; a caller may choose another. The run id
is <number>-<hash>: the number counts up per label from 0001 (as pytest-benchmark numbers its
saved runs) and is never given twice, even after an entry is deleted, because each number is
claimed by creating label/.ids/<number> exclusively; the hash is the first 8 hex digits of the
sha256 over the run's files, so the same run archived twice shows the same hash under two numbers.

An entry is written into a staging directory beside it (every file through write_atomic) and
renamed into place when complete, so a reader sees a whole entry or none; the rename fails if the
entry exists, and no code here opens a file of an existing entry for writing.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Iterable, Mapping

import jsonschema

from fabench.files import write_atomic, write_json
from fabench.results.collect import contract_problems, result_schema, run_problems, schema_problems
from fabench.shapes import shape_id

RECORD = "record.json"
SUMS = "SHA256SUMS"
RECORD_FORMAT = "fabench-archive-entry/1"
IDS_DIR = ".ids"
STAGING_PREFIX = ".staging-"
LABEL_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._+-]*"
RUN_ID_PATTERN = r"(\d{4,})-([0-9a-f]{8})"
# What of a run directory is kept: the per-job files are left out, results.json holds them all.
RUN_FILES = ("results.json", "report.md", "config.json")
# The resolved config is kept as config.json: the run's own, else the one frozen for the report.
CONFIG_SOURCES = ("config.json", "report-config.json")
RUN_GLOBS = ("aiter-config/*.json", "*.png", "plots/*.png")
REQUIRED = ("results.json", "report.md")
VERSION_KEYS = ("driver", "cuda", "hip", "rocm", "cudnn", "torch", "triton", "aiter", "aiter_commit",
                "runtime", "image", "image_id")


class ArchiveError(Exception):
    """The archive refuses: the message says why; nothing was written."""


class IncompleteRun(ArchiveError):
    def __init__(self, run_dir: Path, reasons: list[str]):
        self.run_dir, self.reasons = run_dir, reasons
        super().__init__(f"{run_dir} is not a finished run: " + "; ".join(reasons))


# ---------------------------------------------------------------- checking a run

def _read_json(path: Path) -> tuple[object, str | None]:
    try:
        return json.loads(path.read_text()), None
    except FileNotFoundError:
        return None, f"{path.name} missing"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return None, f"{path.name}: not readable JSON ({err})"


def collected_problems(collected: object, schema: dict | None = None) -> list[str]:
    """The collector's checks (result schema, shape ids, one run, one result per job) on a
    collected results.json, each problem naming the result by its index."""
    if not isinstance(collected, dict) or not isinstance(collected.get("results"), list):
        return ['results.json: not {"run": ..., "results": [...]}']
    if not collected["results"]:
        return ["results.json: no results"]
    schema = schema or result_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    problems, valid = [], []
    for i, result in enumerate(collected["results"]):
        where = f"results.json $.results[{i}]"
        found = schema_problems(result, validator) or contract_problems(result)
        problems += [f"{where}{p[1:]}" if p.startswith("$") else f"{where}: {p}" for p in found]
        if not found:
            valid.append((where, result))
    if valid and not problems:
        problems = run_problems(valid)
        if not problems and collected.get("run") != valid[0][1]["run"]:
            problems.append(f"results.json $.run: {collected.get('run')!r} is not the results' run "
                            f"{valid[0][1]['run']!r}")
    return problems


def expected_jobs_from_config(config: dict) -> set[tuple[str, str]]:
    return {(variant, shape_id(shape)) for variant in config.get("variants", {}) for shape in config.get("shapes", [])}


def check_run(run_dir: Path, expected_jobs: Iterable[tuple[str, str]] | None = None, schema: dict | None = None,
              config: dict | None = None) -> dict:
    """The collected results of a finished run, or IncompleteRun naming every reason it is not.

    Jobs expected: `expected_jobs` when given, else every (variant, shape) of `config` (the run's
    config.json), else whatever results.json holds."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise IncompleteRun(run_dir, ["no such directory"])
    reasons = []
    collected, error = _read_json(run_dir / "results.json")
    if error:
        reasons.append(error)
    else:
        reasons += collected_problems(collected, schema)
    if not (run_dir / "report.md").is_file():
        reasons.append("report.md missing")
    if not reasons:
        if expected_jobs is None and config is not None:
            expected_jobs = expected_jobs_from_config(config)
        have = {(r["variant"], r["shape_id"]) for r in collected["results"]}
        missing = sorted(set(expected_jobs or ()) - have)
        if missing:
            reasons.append(f"{len(missing)} job(s) missing from results.json: "
                           + ", ".join(f"{v}/{s}" for v, s in missing))
    if reasons:
        raise IncompleteRun(run_dir, reasons)
    return collected


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
    platform = platforms.pop()
    key, prefix = {"rocm": ("hip", "rocm-"), "cuda": ("cuda", "cuda-"), "cpu": ("torch", "cpu-torch")}[platform]
    versions = {r["provenance"].get("rocm") or r["provenance"].get(key) if platform == "rocm"
                else r["provenance"].get(key) for r in results}
    if None in versions or "" in versions:
        raise ArchiveError(f"provenance.{key} is not recorded: cannot name the {platform} version; name a label")
    if len(versions) != 1:
        raise ArchiveError(f"the results disagree on provenance.{key} ({', '.join(sorted(versions))}): name a label")
    return check_label(prefix + versions.pop())


def check_label(label: str) -> str:
    if not re.fullmatch(LABEL_PATTERN, label or ""):
        raise ArchiveError(f"label {label!r}: use letters, digits and . _ + - (not starting with a symbol)")
    return label


def natural_key(text: str) -> tuple:
    """rocm-6.4.3 < rocm-6.10 < rocm-7.0: digit runs compare as numbers."""
    return tuple((1, int(part), "") if part.isdigit() else (0, 0, part) for part in re.findall(r"\d+|\D+", text))


# ---------------------------------------------------------------- files of an entry

def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sums_text(files: Mapping[str, bytes]) -> str:
    return "".join(f"{sha256_hex(files[name])}  {name}\n" for name in sorted(files))


def _safe_name(name: str) -> str:
    path = PurePosixPath(name)
    if (path.is_absolute() or not path.parts or any(p in ("", ".", "..") for p in path.parts)
            or not re.fullmatch(r"[A-Za-z0-9._+/-]+", name) or name in (RECORD, SUMS)):
        raise ArchiveError(f"file name {name!r} cannot be stored in an archive entry")
    return path.as_posix()


def run_files(run_dir: Path) -> dict[str, Path]:
    files = {name: run_dir / name for name in RUN_FILES if (run_dir / name).is_file()}
    for pattern in RUN_GLOBS:
        for path in sorted(run_dir.glob(pattern)):
            if path.is_file():
                files[path.relative_to(run_dir).as_posix()] = path
    return files


def _read_files(run_dir: Path, extra_files: Mapping[str, os.PathLike | str]) -> dict[str, bytes]:
    contents = {name: path.read_bytes() for name, path in run_files(run_dir).items()}
    for name, path in extra_files.items():
        name = _safe_name(name)
        try:
            data = Path(path).read_bytes()
        except OSError as err:
            raise ArchiveError(f"extra file {name}: cannot read {path}: {err.strerror}") from None
        if name in contents and contents[name] != data:
            raise ArchiveError(f"extra file {name} ({path}) differs from the run's {run_dir / name}")
        contents[name] = data
    return contents


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def make_record(collected: dict, label: str, run_id: str, content_sha256: str, files: Mapping[str, bytes],
                archived_at: str | None = None) -> dict:
    results = collected["results"]
    prov = [r["provenance"] for r in results]
    times = lambda key: sorted(p[key] for p in prov if p.get(key))  # noqa: E731
    return {
        "format": RECORD_FORMAT,
        "label": label,
        "run_id": run_id,
        "number": int(run_id.split("-")[0]),
        "content_sha256": content_sha256,
        "run": collected["run"],
        "archived_at": archived_at or _utc_now(),
        "archived_on": socket.gethostname(),
        "started": (times("started") or [None])[0],
        "finished": (times("finished") or [None])[-1],
        "platform": _common(r["platform"] for r in results),
        "host": _common(p.get("host") for p in prov),
        "device": _common(p.get("device") for p in prov),
        "arch": _common(p.get("arch") for p in prov),
        "versions": {key: _common(p.get(key) for p in prov) for key in VERSION_KEYS if any(key in p for p in prov)},
        "config_sha256": _common(p.get("config_sha256") for p in prov),
        "project_commit": _common(p.get("project_commit") for p in prov),
        "schema_versions": sorted({r["schema_version"] for r in results}),
        "variants": list(dict.fromkeys(r["variant"] for r in results)),
        "shapes": list(dict.fromkeys(r["shape_id"] for r in results)),
        "jobs": len(results),
        "files": {name: {"bytes": len(files[name]), "sha256": sha256_hex(files[name])} for name in sorted(files)},
    }


# ---------------------------------------------------------------- writing

def _claim_number(label_dir: Path, run_hash: str) -> int:
    """The next number of this label, claimed by an exclusive create: two writers never get one number."""
    ids = label_dir / IDS_DIR
    ids.mkdir(parents=True, exist_ok=True)
    used = [int(m.group(1)) for p in ids.iterdir() if (m := re.fullmatch(r"(\d{4,})", p.name))]
    used += [int(m.group(1)) for p in label_dir.iterdir() if (m := re.fullmatch(RUN_ID_PATTERN, p.name))]
    number = max(used, default=0) + 1
    while True:
        try:
            fd = os.open(ids / f"{number:04d}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            number += 1
            continue
        with os.fdopen(fd, "w") as handle:
            handle.write(f"{number:04d}-{run_hash} {_utc_now()}\n")
        return number


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
        # rename() replaces an empty directory: check first, then let it fail on a non-empty one.
        if entry_dir.exists():
            raise ArchiveError(f"archive entry {entry_dir} appeared while writing: not overwritten")
        try:
            os.rename(staging, entry_dir)
        except OSError as err:
            raise ArchiveError(f"archive entry {entry_dir} exists ({err.strerror}): not overwritten") from None
        _fsync_dir(entry_dir.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return entry_dir


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def archive_run(run_dir: Path, archive_root: Path, label: str | None = None,
                extra_files: Mapping[str, os.PathLike | str] | None = None, *,
                expected_jobs: Iterable[tuple[str, str]] | None = None, schema: dict | None = None) -> Path:
    """Store the finished run in `run_dir` as a new entry archive_root/<label>/<run-id>/; its path.

    Refuses (IncompleteRun, nothing written) a run whose results.json is missing or invalid, whose
    report is missing, or that lacks a job of `expected_jobs` (default: every variant x shape of
    its config.json, the run's or the one in `extra_files`)."""
    run_dir, archive_root = Path(run_dir), Path(archive_root)
    extra_files = dict(extra_files or {})
    config = None
    if "config.json" not in extra_files:
        found = [run_dir / name for name in CONFIG_SOURCES if (run_dir / name).is_file()]
        if found:
            extra_files["config.json"] = found[0]
    config_path = Path(extra_files.get("config.json") or run_dir / "config.json")
    if expected_jobs is None and config_path.is_file():
        config, error = _read_json(config_path)
        if error or not isinstance(config, dict):
            raise IncompleteRun(run_dir, [error or f"{config_path}: not a config"])
    collected = check_run(run_dir, expected_jobs, schema, config)
    label = check_label(label) if label is not None else platform_version(collected["results"])
    contents = _read_files(run_dir, extra_files)
    run_hash = sha256_hex(sums_text(contents).encode())[:8]
    label_dir = archive_root / label
    label_dir.mkdir(parents=True, exist_ok=True)
    run_id = f"{_claim_number(label_dir, run_hash):04d}-{run_hash}"
    record = make_record(collected, label, run_id, sha256_hex(sums_text(contents).encode()), contents)
    contents[RECORD] = (json.dumps(record, indent=2) + "\n").encode()
    return store_entry(label_dir / run_id, contents)


def write_receipt(path: Path, entry_dir: Path) -> None:
    """A small file naming the entry a run was archived as (the archive rule's output)."""
    entry = load_entry(entry_dir)
    write_json(path, {"entry": entry.id, "path": str(entry_dir), "content_sha256": (entry.record or {}).get(
        "content_sha256"), "sha256sums": sha256_hex((Path(entry_dir) / SUMS).read_bytes())})


# ---------------------------------------------------------------- reading and verifying

def parse_sums(text: str) -> tuple[dict[str, str], list[str]]:
    sums, problems = {}, []
    for number, line in enumerate(text.splitlines(), 1):
        match = re.fullmatch(r"([0-9a-f]{64}) [ *](.+)", line)
        if not match:
            problems.append(f"{SUMS}: line {number} is not '<sha256>  <file>'")
            continue
        sums[match.group(2)] = match.group(1)
    return sums, problems


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
