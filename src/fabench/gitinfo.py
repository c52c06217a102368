"""Which code ran: the git commit of a folder (the project's own, in every result, and aiter's), an
installed package's version, and the content of this fabench package (code_fingerprint). No torch,
so the workflow and the runner's coordinating process can ask too."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def git_commit(path: str | Path, mark_dirty: bool = False) -> str | None:
    """HEAD of the checkout holding `path`, with "-dirty" when `mark_dirty` and tracked files
    differ from it; None where there is no git or no checkout."""
    git = ["git", "-C", str(path)]
    try:
        commit = _git(git + ["rev-parse", "HEAD"])
        dirty = bool(_git(git + ["status", "--porcelain", "--untracked-files=no"])) if mark_dirty else False
    except (subprocess.SubprocessError, OSError):
        return None
    return (commit + ("-dirty" if dirty else "")) if commit else None


def _git(command: list[str]) -> str:
    return subprocess.run(command, capture_output=True, text=True, timeout=10, check=True).stdout.strip()


def package_version(name: str) -> str | None:
    """The installed version of the distribution `name` (None: not installed)."""
    import importlib.metadata  # here: every job's launcher imports this module, and asks no version

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def code_fingerprint() -> str:
    """This fabench's code as it is now, by content: sha256 over every module of the package, its
    path within the package and its bytes. One definition of "the code" for what must change when
    the code does: a measuring worker runs the code it started with (worker_client.identity), and a
    job's kernels compiled ahead stand for the code that compiled them (launch.precompile's stamps).
    A checkout whose files were only touched keeps it; an edit changes it."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        digest.update(path.relative_to(PACKAGE_DIR).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
