"""Results written before the analysis stage (schema 1 and 2) are read as they are, never
migrated: their files stay byte for byte what was archived (and what SHA256SUMS covers).

Schema 2 recorded every trial but kept some observations only inside derived fields: the notes
on a cell (warm-up that never settled, kernels that differed between processes) inside the
stability verdict's reason, and do_bench's values only as the cross-check's median. Those are
taken back from there. Schema 1 has no trials: its figures are kept, with no interval.

Merges before the code identity (fabench.analysis.policy) noted "different kernels" when only the
digest of Inductor's generated source differed between processes, which depends on the compile
caches' state: such a note is read as what it is today, no note (kernels_note_holds).

Notes of a stream the GPU caught up with (commits up to the one that recorded `unfed_streams` as a
trial field) are read as what they doubt: the stream a cross-check reads, not the kernels' own
durations (stream_doubted).
"""

from __future__ import annotations

import re

from fabench.analysis.result_types import cell_stats
from fabench.measure.observations import Kind, kernels_differ, no_kernel_time, warmup_unsettled

SPREAD_REASON = "trials spread "
# Results of commit 6933101 noted every profiled stream measured again (the GPU having reached a
# call before the host queued it), summed over a trial's batches; a batch keeps an unfed stream
# only after MAX_RETRIES_THEN + 1 unfed ones, so a count up to MAX_RETRIES_THEN says every stream
# kept was fed: a fact of the measurement, not a doubt on it (read so by remeasured_note_holds).
_REMEASURED = re.compile(r"trial \d+: (\d+) profiled stream\(s\) measured again, the GPU having reached")
MAX_RETRIES_THEN = 3
_PROFILED = re.compile(r"profiled stream\(s\) (kept after|measured again)")
_LOOP = re.compile(r"the GPU reached \d+ chunk\(s\) before the host had queued them")
KERNELS_NOTE = "the processes ran different kernels: "
_GENERATED = re.compile(r",? ?generated sha256 [0-9a-fA-FNone]+")


def notes(entry: dict) -> list[str]:
    """The recorded verdict's notes: its reasons without the spread reason the analysis adds."""
    stats = cell_stats(entry)
    reason = (stats.unstable_reason if stats else None) or ""
    return [part for part in reason.split("; ") if part and not part.startswith(SPREAD_REASON)]


def observations(entry: dict) -> dict:
    """What the measuring processes observed beyond the trials, for any schema, each note a coded
    item (fabench.measure.observations): results that recorded English notes are read into kinds."""
    recorded = entry.get("observations")
    if recorded is None:
        recorded = {"notes": notes(entry), "do_bench_reason": None, "recorded_cross_check": entry.get("cross_check")}
    return {**recorded, "notes": [coded(n) for n in recorded.get("notes", [])
                                  if not isinstance(n, str) or kernels_note_holds(n)]}


_WARMUP = re.compile(r"^process (\d+) trial (\d+): warm-up did not settle within (.+) ms$")
_NO_KERNEL_TIME = re.compile(r"^process (\d+) trial (\d+): no kernel time: (.*)$", re.DOTALL)


def coded(note: str | dict) -> dict:
    """An observation as a coded item: a recorded item as it is; an English note of an older result
    by the kind its words name, keeping its words (`text`) so that it reads as it did; a note no
    kind fits as `note`."""
    if not isinstance(note, str):
        return note
    for pattern, make in ((_WARMUP, warmup_unsettled), (_NO_KERNEL_TIME, no_kernel_time)):
        found = pattern.match(note)
        if found:
            return {**make(int(found.group(1)), int(found.group(2)), found.group(3)), "text": note}
    if note.startswith(KERNELS_NOTE):
        return {**kernels_differ([]), "text": note}
    return {"kind": Kind.NOTE.value, "text": note}


def kernels_note_holds(note: str) -> bool:
    """False for a "different kernels" note whose profiled processes launched the same kernels
    (their descriptions equal once the generated-source digest is left out); True for any other note."""
    if not note.startswith(KERNELS_NOTE):
        return True
    processes = re.split(r"(?:^|; )process \d+: ", note[len(KERNELS_NOTE):])
    profiled = {_GENERATED.sub("", p).strip() for p in processes if p and not p.startswith("not profiled")}
    return len(profiled) > 1


def stream_doubted(note: str) -> str | None:
    """The stream a note of a GPU that caught up with the host doubts: "profiled" (the stream under
    the profiler, whose period the second method reads) or "loop" (the device loop without the
    profiler, whose event pairs were the device figure before the kernels' own time was); None for
    a note of anything else. A GPU that waits between calls lengthens the period and any event pair
    around a call, not a kernel's own duration."""
    if _PROFILED.search(note):
        return "profiled"
    return "loop" if _LOOP.search(note) else None


def remeasured_note_holds(note: str) -> bool:
    """Whether a note of re-measured profiled streams (commit 6933101) casts doubt on the cell: only
    where its count could include a stream kept unfed. Every other note holds as it is."""
    found = _REMEASURED.search(note)
    return found is None or int(found.group(1)) > MAX_RETRIES_THEN
