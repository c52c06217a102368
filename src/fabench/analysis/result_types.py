"""A result's parts as types, decoded from the JSON a result file holds: the one module that reads
a result's core keys by name (tests/test_typed_results.py fails on a subscript of them elsewhere).

The JSON stays the stored form, and the schema (workflow/schemas/result.schema.json) its contract;
each type here is a frozen view of one object of it: `of(value)` decodes (the object itself kept
as `raw`, for the readers not yet typed and for writing it back as it was), the fields hold what
the typed readers use. A missing optional key decodes as the schema's "absent" (None, an empty
tuple or mapping), never as an error: results of every schema version are read as they are
(fabench.analysis.legacy). What a function here builds (`with_*`) is a new dict, never the input
changed; drop_backends, set_stats and record_in_stats alone change their input (the merge's
records of lost processes, the analysis filling in what it derives).

    Result        one (variant, shape) job: its backends, provenance, method, reference
    BackendEntry  one backend of a job: status, figures, trials, kernels, stats, cross-checks
    CellStats     an analysed entry's statistics: stability, and per metric a MetricStats
    MetricStats   one figure's median, its noise (Noise) and the cycles behind it
    Trial         one timed trial's raw observations (what the kernels' own time check reads)
    Provenance    where and when a process measured
    Method        how a job measured (a result's or a publication's method)
    CrossCheck    one independent check of an entry's figure (second method, kernel time)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from fabench.measure.record import SHARED_KEY

# The result's core keys, read by name here only.
BACKENDS, STATS, PROVENANCE, METHOD, TRIALS = "backends", "stats", "provenance", "method", "trials"
CORE_KEYS = (BACKENDS, STATS, PROVENANCE, METHOD, TRIALS)
EMPTY: Mapping = MappingProxyType({})


def _mapping(value: Any) -> Mapping:
    return value if isinstance(value, dict) else EMPTY


@dataclass(frozen=True)
class Noise:
    """A figure's noise (fabench.analysis.noise): sigma of log figures, its degrees of freedom, the
    replicates it is over, and what they are (`between`: "processes", or "trials" in a run of one process)."""
    sigma: float | None
    df: float | None
    replicates: int | None
    between: str | None

    @classmethod
    def of(cls, value: Any) -> Noise | None:
        if not value:
            return None
        return cls(value.get("sigma"), value.get("df"), value.get("replicates"), value.get("between"))


@dataclass(frozen=True)
class MetricStats:
    """One figure of an analysed entry (metric_stats, or device_cycles): its median, noise, intervals."""
    median: float | None
    noise: Noise | None
    raw: Mapping = field(repr=False)

    @classmethod
    def of(cls, value: Any) -> MetricStats | None:
        if not isinstance(value, dict):
            return None
        return cls(value.get("median"), Noise.of(value.get("noise")), value)

    def get(self, key: str, default: Any = None) -> Any:
        """A field of the figure's record no typed reader needs yet (pi95, ci95, clock_mhz)."""
        return self.raw.get(key, default)


@dataclass(frozen=True)
class CellStats:
    """An analysed entry's `stats`: stability (with the reason and codes when unstable), whether
    it ran under a power cap, and each metric's figure."""
    stable: bool
    unstable_reason: str | None
    unstable_codes: Any
    capped: bool
    raw: Mapping = field(repr=False)

    @classmethod
    def of(cls, value: Any) -> CellStats | None:
        if not isinstance(value, dict):
            return None
        return cls(value.get("stable", True), value.get("unstable_reason"), value.get("unstable_codes"),
                   bool(value.get("capped")), value)

    def metric(self, name: str) -> MetricStats | None:
        """The figure of `name` (wall_mean_ms, device_ms, device_cycles), None where not recorded."""
        return MetricStats.of(self.raw.get(name))

    def get(self, key: str, default: Any = None) -> Any:
        """A field of the stats no typed reader needs yet (judged, ci_method, ...)."""
        return self.raw.get(key, default)


def record_in_stats(stats: CellStats, **fields: Any) -> None:
    """Writes these fields into an analysed entry's stats record, in place: the run's noise
    (fabench.analysis.noise) fills in what only the whole run tells (the interval's method)."""
    stats.raw.update(fields)


@dataclass(frozen=True)
class Trial:
    """One trial's observations the kernels' own time check reads."""
    process: int
    kernel_time_graph: Mapping | None
    kernel_samples_ms: tuple
    kernel_names: frozenset

    @classmethod
    def of(cls, value: dict) -> Trial:
        return cls(value.get("process", 0), value.get("kernel_time_graph") or None,
                   tuple(value.get("kernel_samples_ms") or ()),
                   frozenset(k["name"] for k in value.get("kernel_shares") or ()))


@dataclass(frozen=True)
class KernelTimeCheck:
    """The kernels' own time check on an entry (fabench.analysis.kernel_check): whether it agrees,
    by how much it differs and its tolerance either side; None where absent."""
    agrees: bool | None
    difference: float | None
    low: float | None
    high: float | None

    @classmethod
    def of(cls, entry: dict) -> KernelTimeCheck:
        check = _mapping(_mapping(entry.get("cross_check")).get("kernel_time"))
        tolerance = _mapping(check.get("tolerance"))
        return cls(check.get("agrees"), check.get("difference"), tolerance.get("low"), tolerance.get("high"))


@dataclass(frozen=True)
class BackendEntry:
    """One backend of a job (the schema's `backend`): its status and why, its figures as the entry
    states them, its analysed stats, trials, kernels, compile time and observations."""
    status: str
    failure_kind: str | None
    reason: str | None
    wall_mean_ms: Any
    stats: CellStats | None
    trials: tuple = field(repr=False)
    kernels: Mapping | None = field(repr=False)
    compile_s: float | None
    observations: Mapping = field(repr=False)
    raw: Mapping = field(repr=False)

    @classmethod
    def of(cls, value: dict) -> BackendEntry:
        return cls(value["status"], value.get("failure_kind"), value.get("reason"), value.get("wall_mean_ms"),
                   CellStats.of(value.get(STATS)), tuple(value.get(TRIALS) or ()), value.get("kernels") or None,
                   value.get("compile_s"), _mapping(value.get("observations")), value)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def trial_records(self) -> list[Trial]:
        return [Trial.of(t) for t in self.trials]

    def kernel_time(self) -> KernelTimeCheck:
        return KernelTimeCheck.of(self.raw)

    def status_record(self) -> dict:
        """The entry's status as a verdict's values carry it (for the words: status (kind): reason)."""
        return {"status": self.status, "failure_kind": self.failure_kind, "reason": self.reason}


@dataclass(frozen=True)
class Provenance:
    """Where and when a process (or, merged, the job) measured; `finished` is required (the schema's)."""
    process: int | None
    started: str | None
    finished: str
    host: str | None
    gpu_uuid: str | None
    gpu_lease: Any
    raw: Mapping = field(repr=False)

    def process_or(self, default: int) -> int:
        """The process's index as recorded, else `default` (a result of one process records none)."""
        return self.raw.get("process", default)

    @classmethod
    def of(cls, value: dict) -> Provenance:
        return cls(value.get("process"), value.get("started"), value["finished"], value.get("host"),
                   _mapping(value.get("gpu")).get("uuid"), _mapping(value.get("device_lease")).get("gpu"), value)


@dataclass(frozen=True)
class Result:
    """One job's result (a process file, or merged): run, variant, shape, its method, backends
    (name -> BackendEntry, in the file's order), provenance and reference."""
    run: str
    variant: str
    shape_id: str
    method: Mapping = field(repr=False)
    backends: Mapping[str, BackendEntry] = field(repr=False)
    provenance: Provenance = field(repr=False)
    reference: Mapping = field(repr=False)
    raw: Mapping = field(repr=False)

    @classmethod
    def of(cls, value: dict) -> Result:
        return cls(value.get("run"), value.get("variant"), value.get("shape_id"), _mapping(value.get(METHOD)),
                   {name: BackendEntry.of(e) for name, e in value[BACKENDS].items()},
                   Provenance.of(value[PROVENANCE]), _mapping(value.get("reference")), value)

    def backend_dicts(self) -> dict[str, dict]:
        """The backends as the file holds them, for readers not yet typed."""
        return {name: entry.raw for name, entry in self.backends.items()}


# ---------------------------------------------------------------- the JSON built back

def method_of(result: dict) -> Mapping:
    """A result's method (how it was measured), empty where the result records none."""
    return _mapping(result.get(METHOD))


def cell_stats(entry: dict) -> CellStats | None:
    """A backend entry's analysed stats (None for one not analysed: a failed cell, published numbers)."""
    return CellStats.of(entry.get(STATS))


def metric_median(entry: dict, metric: str) -> float | None:
    """The median of an entry's analysed figure `metric`, None where it has none."""
    stats = cell_stats(entry)
    figure = stats.metric(metric) if stats else None
    return figure.median if figure else None


def figure_record(entry: dict, metric: str) -> Mapping | None:
    """An analysed entry's figure of `metric` as recorded (the same object), None where it has none:
    for the readers that pass the figure on whole (the policy's noise, the report's tables)."""
    stats = cell_stats(entry)
    figure = stats.metric(metric) if stats else None
    return figure.raw if figure else None


def provenance_of(result: dict) -> Mapping:
    """A result's provenance as recorded (empty where it records none)."""
    return _mapping(result.get(PROVENANCE))


def process_index(result: dict, default: int = 0) -> int:
    """The index of the process that wrote a result, as its provenance records it, else `default`."""
    return result[PROVENANCE].get("process", default)


def shared_backends(result: dict) -> list[str]:
    """The backends a job's processes left to the job that measures them once (SHARED_KEY)."""
    return list(_mapping(result.get(SHARED_KEY)).get(BACKENDS) or [])


def backend_dicts(result: dict) -> dict[str, dict]:
    """A result's backend entries as the file holds them (the same objects), for readers not yet typed."""
    return result[BACKENDS]


def backend_names(result: dict) -> list[str]:
    """The backends a result (a dict as the file holds it) names, in its order."""
    return list(result[BACKENDS])


def with_backends(result: dict, backends: dict[str, dict]) -> dict:
    """The result with these backend entries (in place of its own; the other keys as they are)."""
    return {**result, BACKENDS: backends}


def drop_backends(result: dict, names: set[str]) -> None:
    """Removes these backends from the result, in place (the merge's records of lost processes)."""
    result[BACKENDS] = {k: v for k, v in result[BACKENDS].items() if k not in names}


def with_method(result: dict, **fields: Any) -> dict:
    """The result with these fields set in its method (the rest as it was)."""
    return {**result, METHOD: {**result[METHOD], **fields}}


def with_provenance(result: dict, drop: tuple[str, ...] = (), **fields: Any) -> dict:
    """The result with these fields set in its provenance and `drop`'s keys removed from it."""
    provenance = {k: v for k, v in {**result[PROVENANCE], **fields}.items() if k not in drop}
    return {**result, PROVENANCE: provenance}


def set_stats(entry: dict, stats: dict | None, **beside: Any) -> None:
    """Sets a backend entry's analysed stats, then the derived fields `beside` them, in place
    (fabench.analysis.entry produces them)."""
    entry[STATS] = stats
    entry.update(beside)


def with_trials(entry: dict, trials: list[dict]) -> dict:
    """A backend entry with these trials."""
    return {**entry, TRIALS: trials}


# ---------------------------------------------------------------- a sweep candidate's record (fabench.tune.measure)

def correctness_of(entry: BackendEntry) -> Mapping | None:
    """A backend entry's correctness check as recorded (fabench.measure.metrics.compare); None where
    no output was checked."""
    return entry.raw.get("correctness")


# ---------------------------------------------------------------- the method, and trials as recorded

@dataclass(frozen=True)
class Method:
    """A result's method (how its job measured; the schema's `method`), or a publication's, laid
    out alike: the counts the report states typed, every other setting through `get`. The warmup
    and iterations are required by the schema; the rest None where not recorded (a schema v1
    result, published numbers)."""
    warmup: int | None
    iters: int | None
    reduced: bool
    trials: int | None
    repeats: int | None
    raw: Mapping = field(repr=False)

    @classmethod
    def of(cls, record: dict) -> Method:
        """The method of `record` (a result, or published numbers), empty where it records none."""
        value = _mapping(record.get(METHOD))
        return cls(value.get("warmup"), value.get("iters"), bool(value.get("reduced")), value.get(TRIALS),
                   value.get("repeats"), value)

    def get(self, key: str, default: Any = None) -> Any:
        """A setting of the method no typed reader needs yet (dtype, min_trial_ms, clear_l2, ...)."""
        return self.raw.get(key, default)


def recorded_trials(entry: dict) -> list | None:
    """A backend entry's trials as recorded, None where it records none (schema v1, before trials:
    not the same as an empty list, which an entry's identity tells apart)."""
    return entry.get(TRIALS)


@dataclass(frozen=True)
class CrossCheck:
    """One independent check of an entry's figure (`cross_check.<name>`: second_method, the period
    by two clocks; kernel_time, the kernels' own time by graphs): whether it agrees (None: not
    judged) and the method it judged by; the rest (difference, tolerance, reason) through `get`."""
    agrees: bool | None
    method: str | None
    raw: Mapping = field(repr=False)

    @classmethod
    def of(cls, entry: dict, name: str) -> CrossCheck:
        """The check `name` of a backend entry; every field None where the entry records none."""
        check = _mapping(_mapping(entry.get("cross_check")).get(name))
        return cls(check.get("agrees"), check.get(METHOD), check)

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)
