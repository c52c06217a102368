"""The result contract in code: the facts about a job's result that the runner writes and every
reader (collector, report, archive, compare) relies on. The JSON schema that checks a result file
is workflow/schemas/result.schema.json; a test keeps the two in agreement. Importing this module
needs no torch, so the host-side stages can use it.
"""

from __future__ import annotations

from pathlib import Path

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "result.schema.json"

STATUSES = ("ok", "unavailable", "failed")
FAILURE_KINDS = ("oom", "out_of_resources", "unsupported", "correctness", "fallback", "config_mismatch", "error")

WALL_METHOD = "perf_counter around the timed loop, device synchronize after every iteration; mean ms per iteration"
FLOP_CONVENTION = "causal: half of the dense 4*B*H*S^2*D (non-causal: the dense count)"


def backend_entry(label: str, **values) -> dict:
    """One backend's record in a result, every key present (None until measured)."""
    entry = {"label": label, "status": "ok", "reason": None, "failure_kind": None, "wall_mean_ms": None,
             "device_ms": None, "tflops": None, "correctness": None, "kernel_config": None}
    unknown = set(values) - set(entry) - {"speedup"}
    if unknown:
        raise KeyError(f"not a backend entry key: {', '.join(sorted(unknown))}")
    entry.update(values)
    return entry
