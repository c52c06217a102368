"""The two default runs on one H100 (2026-11-25), committed under examples/h100-2026-11-25/archive
(with their README): real GPU data for the comparison, identity and re-analysis tests on a CPU."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
H100_ARCHIVE = ROOT / "examples" / "h100-2026-11-25" / "archive"


def h100_archive() -> Path:
    return H100_ARCHIVE
