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

An entry's identity is the digest of its measurements (measurements_sha256): what was measured,
where and when, and nothing that names or presents it (label, run name, variant names and titles,
the report, the statistics derived from the trials). The archive holds each identity once. An
entry's integrity: its files match SHA256SUMS, SHA256SUMS and record.json list the same files with
the same digests, record.json's content_sha256 is the digest of that list, and the run id's hash
is the entry's identity (format 2) or its content_sha256 (format 1, archived before identities
were recorded: their identity is derived from their results.json when read).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Mapping

from fabench.analysis.result_types import backend_dicts, provenance_of, recorded_trials
from fabench.files import ENTRY_RECORD as RECORD, ENTRY_SUMS as SUMS  # what makes a folder an entry

RECORD_FORMAT_V1 = "fabench-archive-entry/1"  # run id hash = content_sha256; identity derived
RECORD_FORMAT = "fabench-archive-entry/2"  # + measurements_sha256; run id hash = identity
LOCK = ".lock"
IDS_DIR = ".ids"
STAGING_PREFIX = ".staging-"
LABEL_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._+-]*"
LABEL_MAX = 100  # a folder name, far below the file systems' 255 bytes
RUN_ID_PATTERN = r"(\d{4,})-([0-9a-f]{8})"


class ArchiveError(Exception):
    """The archive refuses: the message says why; nothing was written."""


# ---------------------------------------------------------------- SHA256SUMS

def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sums_text(files: Mapping[str, bytes]) -> str:
    return digests_text({name: sha256_hex(data) for name, data in files.items()})


def digests_text(digests: Mapping[str, str]) -> str:
    """SHA256SUMS lines for file digests, sorted by name."""
    return "".join(f"{digests[name]}  {name}\n" for name in sorted(digests))


def content_sha256(digests: Mapping[str, str]) -> str:
    """The digest of an entry's files (all but record.json and SHA256SUMS): of their SHA256SUMS lines."""
    return sha256_hex(digests_text(digests).encode())


def parse_sums(text: str) -> tuple[dict[str, str], list[str]]:
    sums, problems = {}, []
    for number, line in enumerate(text.splitlines(), 1):
        match = re.fullmatch(r"([0-9a-f]{64}) [ *](.+)", line)
        if not match:
            problems.append(f"{SUMS}: line {number} is not '<sha256>  <file>'")
            continue
        sums[match.group(2)] = match.group(1)
    return sums, problems


# ---------------------------------------------------------------- identity

def _measured(backend: dict) -> dict:
    """What a backend measured: its outcome and its trials (schema v1, without trials: the
    figures it recorded). Statistics derived from trials are left out: recomputing them does
    not make new measurements."""
    kept = {key: backend.get(key) for key in ("status", "reason", "correctness")}
    trials = recorded_trials(backend)
    if trials is not None:
        return {**kept, "trials": trials}
    return {**kept, "wall_mean_ms": backend.get("wall_mean_ms"), "device_ms": backend.get("device_ms")}


def measurements_sha256(collected: dict) -> str:
    """An entry's identity: the sha256 of every measurement in a collected results.json (shape,
    dtype, causality, start time, and each backend's outcome and trials), independent of the
    order of the results and of every name and title (run, variant, label, backend label)."""
    items = sorted(json.dumps([r["shape_id"], r.get("dtype"), r.get("causal"),
                               provenance_of(r).get("started"), name, _measured(backend)],
                              sort_keys=True, separators=(",", ":"))
                   for r in collected["results"] for name, backend in backend_dicts(r).items())
    return sha256_hex("\n".join(items).encode())
