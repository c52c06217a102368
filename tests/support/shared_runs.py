"""The two default runs on one H100 that the project keeps beside its checkout (read only):
../shared/data/h100-2026-11-25/archive, or where FABENCH_H100_ARCHIVE names. Tests that need
them are skipped with the reason where they are absent, or FAIL when FABENCH_REQUIRE_SHARED_DATA=1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
H100_ARCHIVE = Path(os.environ.get("FABENCH_H100_ARCHIVE", ROOT.parent / "shared" / "data" / "h100-2026-11-25" / "archive"))


def h100_archive() -> Path:
    if not (H100_ARCHIVE / "cuda-13.0").is_dir():
        message = f"the shared H100 runs are not at {H100_ARCHIVE} (set FABENCH_H100_ARCHIVE)"
        if os.environ.get("FABENCH_REQUIRE_SHARED_DATA") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return H100_ARCHIVE
