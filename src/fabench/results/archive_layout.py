"""The archive: every finished run kept, per platform version, never overwritten. This module
holds the layout of an entry, shared by the writer (archive_store) and the reader (archive_read):

    archive/<label>/<run-id>/
        record.json        who, what, when: run name, platform, device, every version, timestamps
        SHA256SUMS         sha256 of every other file (`sha256sum -c SHA256SUMS` in the entry checks it)
        results.json       the collected results (schema checked before archiving)
        report.md          the rendered report
        config.json        the resolved config (the run's config.json, else its report-config.json)
        aiter-config/<variant>.json (+ .meta.json), plots/*.png
        ... extra files the caller names (the image manifest, the resolved config)

The label and run id are named in archive_store; SHA256SUMS is written by sums_text and read by
parse_sums.
"""

from __future__ import annotations

import hashlib
import re
from typing import Mapping

RECORD = "record.json"
SUMS = "SHA256SUMS"
RECORD_FORMAT = "fabench-archive-entry/1"
IDS_DIR = ".ids"
STAGING_PREFIX = ".staging-"
LABEL_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._+-]*"
RUN_ID_PATTERN = r"(\d{4,})-([0-9a-f]{8})"


class ArchiveError(Exception):
    """The archive refuses: the message says why; nothing was written."""


# ---------------------------------------------------------------- SHA256SUMS

def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sums_text(files: Mapping[str, bytes]) -> str:
    return "".join(f"{sha256_hex(files[name])}  {name}\n" for name in sorted(files))


def parse_sums(text: str) -> tuple[dict[str, str], list[str]]:
    sums, problems = {}, []
    for number, line in enumerate(text.splitlines(), 1):
        match = re.fullmatch(r"([0-9a-f]{64}) [ *](.+)", line)
        if not match:
            problems.append(f"{SUMS}: line {number} is not '<sha256>  <file>'")
            continue
        sums[match.group(2)] = match.group(1)
    return sums, problems
