"""An output keeps the mode of the file it replaces, and every file fabench writes goes through
fabench.files (issue 32, item 7): a private 0600 file named as an output stays private, a group's
0660 stays the group's, and a new file gets what the umask gives any new file.

Real `fabench` processes on the committed H200 archive, real files and modes; the scan reads the
source of src/ and workflow/ as it is."""

from __future__ import annotations

import ast
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from fabench.files import write_atomic, write_json

REPO = Path(__file__).resolve().parents[1]
ARCHIVE = REPO / "examples" / "h200" / "archive"

# Every output option of the CLI that writes one file.
OUTPUTS = [("compare", "--out-csv"), ("compare", "--out-md"), ("compare", "--out-json"),
           ("detector-check", "--out-md"), ("detector-check", "--out-json")]
MODES = (0o600, 0o640, 0o660, 0o604)


def fabench(*args: str, cwd: Path, umask: int | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabench.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=os.environ, timeout=300, umask=-1 if umask is None else umask)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("command,option", OUTPUTS)
def test_every_cli_output_keeps_the_mode_of_the_file_it_replaces(tmp_path, command, option):
    outputs = []
    for mode in MODES:
        out = tmp_path / f"{mode:o}-{option.lstrip('-')}"
        out.write_text("old\n")
        out.chmod(mode)
        outputs.append((out, mode))
    for out, mode in outputs:
        done = fabench(command, "--root", str(ARCHIVE), option, str(out), cwd=tmp_path)
        assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
        assert out.read_text() != "old\n" and mode_of(out) == mode, (oct(mode), oct(mode_of(out)))


@pytest.mark.parametrize("umask", (0o022, 0o077, 0o002), ids=oct)
def test_a_new_output_gets_the_mode_the_umask_gives(tmp_path, umask):
    out = tmp_path / "compare.md"
    done = fabench("compare", "--root", str(ARCHIVE), "--out-md", str(out), cwd=tmp_path, umask=umask)
    assert done.returncode in (0, 1) and out.is_file(), done.stderr
    assert mode_of(out) == 0o666 & ~umask


@pytest.mark.parametrize("mode", MODES, ids=oct)
@pytest.mark.parametrize("writer", ("write_atomic", "write_json", "through a link"))
def test_write_atomic_and_write_json_keep_the_replaced_mode(tmp_path, mode, writer):
    kept = tmp_path / "kept.json"
    kept.write_text("{}\n")
    kept.chmod(mode)
    path = kept
    if writer == "through a link":
        path = tmp_path / "link.json"
        path.symlink_to(kept)
    (write_json if writer == "write_json" else write_atomic)(path, {"a": 1} if writer == "write_json" else "1\n")
    assert mode_of(kept) == mode and kept.read_text() in ('{\n  "a": 1\n}\n', "1\n")
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# ---------------------------------------------------------------- every writer goes through fabench.files

# Writes that do not go through fabench.files, each with why: logs appended to as they grow, locks
# and claims made by an exclusive create (never replacing a file), a folder renamed into place,
# and a config copied into this process's own folder. Keyed by file and the call as written.
NOT_OUTPUTS = {
    ("src/fabench/results/archive_store.py", "os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)"):
        "claims an id by exclusive create",
    ("src/fabench/results/archive_store.py", "os.rename(staging, entry_dir)"): "a whole entry's folder into place",
    ("src/fabench/results/output_digests.py", "os.rename(path, aside)"): "an unreadable process file kept aside, renamed whole, never rewritten",
    ("src/fabench/results/archive_lock.py", "os.open(root / LOCK, os.O_RDWR | os.O_CREAT, 0o644)"): "the writer lock",
    ("src/fabench/results/archive_lock.py", "os.open(Path(root) / LOCK, os.O_RDWR | os.O_CREAT, 0o644)"):
        "the writer lock",
    ("src/fabench/measure/launch/worker.py", "os.open(where.lock, os.O_RDWR | os.O_CREAT, 0o600)"): "the worker's lock",
    ("src/fabench/measure/launch/worker.py", "os.replace(self.log, target)"):
        "an adopted spare's log, open and written by the process itself, renamed within the workers' folder",
    ("src/fabench/measure/launch/lease.py", "os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)"): "a GPU lease",
    ("src/fabench/measure/launch/worker_client.py", 'open(where.log, "ab")'): "the worker's log, appended to",
    ("src/fabench/container/image.py", 'open(log_path, "a")'): "the build log, appended to",
    ("src/fabench/container/job.py", 'open(log, "a")'): "the job's log, appended to",
    ("src/fabench/measure/backends/aiter_kernel.py", "shutil.copyfile(patched_file, target)"):
        "aiter's config into this process's own folder",
    ("src/fabench/report/plot_common.py", 'fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")'):
        "into a memory buffer that write_atomic writes",
}
# The workflow's scripts send their error output to the rule's Snakemake log.
SNAKEMAKE_LOG = 'open(snakemake.log[0], "w")'
WRITING_METHODS = {"write_text", "write_bytes", "savefig", "to_csv"}
WRITING_FUNCTIONS = {"os.rename", "os.replace", "shutil.copy", "shutil.copyfile", "shutil.copy2", "shutil.move",
                     "tempfile.mkstemp", "tempfile.NamedTemporaryFile"}


def writes(call: ast.Call) -> bool:
    """Whether a call writes a file: open() for writing, a path's write_*, os/shutil file calls."""
    name = ast.unparse(call.func)
    if name == "os.open":
        return any(flag in ast.unparse(call) for flag in ("O_CREAT", "O_WRONLY", "O_RDWR"))
    if name == "open" or name.endswith(".open"):
        mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
        return isinstance(mode, ast.Constant) and bool(re.search(r"[wax+]", str(mode.value)))
    return name in WRITING_FUNCTIONS or isinstance(call.func, ast.Attribute) and call.func.attr in WRITING_METHODS


def writers() -> list[tuple[str, str]]:
    found = []
    sources = [*sorted((REPO / "src").rglob("*.py")), *sorted((REPO / "workflow").rglob("*.py"))]
    for path in sources:
        rel = path.relative_to(REPO).as_posix()
        if rel == "src/fabench/files.py":
            continue
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and writes(node):
                found.append((rel, " ".join(ast.get_source_segment(text, node).split())))
    return found


def test_every_file_fabench_writes_goes_through_fabench_files():
    unlisted = [(rel, call) for rel, call in writers()
                if (rel, call) not in NOT_OUTPUTS and not (rel.startswith("workflow/scripts/") and call == SNAKEMAKE_LOG)]
    assert unlisted == [], "write these through fabench.files.write_atomic (or say here why not)"
    snakemake_files = [REPO / "Snakefile", *sorted((REPO / "workflow").rglob("*.smk"))]
    text_writes = [line for path in snakemake_files for line in path.read_text().splitlines()
                   if re.search(r"\bopen\([^)]*['\"][wax]", line) or re.search(r"\.write_(text|bytes)\(", line)]
    assert text_writes == []


def test_the_scan_finds_a_writer_that_bypasses_fabench_files():
    """The scan is not blind: each way of writing a file is found."""
    for text in ("Path(p).write_text('x')", "open(p, 'w')", "open(p, mode='ab')", "shutil.copy(a, b)",
                 "os.open(p, os.O_WRONLY | os.O_CREAT)", "os.replace(a, b)", "fig.savefig(path)"):
        assert writes(ast.parse(text).body[0].value), text
    for text in ("open(p)", "open(p, 'rb')", "Path(p).read_text()", "os.open(p, os.O_RDONLY)"):
        assert not writes(ast.parse(text).body[0].value), text
