"""Which code ran: the git commit of a folder (the project's own, in every result, and aiter's) and
an installed package's version. No torch, so the workflow and the runner's coordinating process
can ask too."""

from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path


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
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
