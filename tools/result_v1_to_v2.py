"""Rewrite schema-1 result files as schema 2, in place: what a schema-1 job measured was one
trial in one process, so each timed backend gets that one trial (its recorded wall mean and
device median), the statistics of one trial, and the method says it was converted.

    python tools/result_v1_to_v2.py FILE...

Nothing is invented: a schema-1 device_ms summarized per-iteration events, and it becomes the
summary of the one trial's figure (n=1); the per-iteration percentiles are not kept.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fabench.measure import stats, summary  # noqa: E402
from fabench.results.contract import SCHEMA_VERSION, backend_entry  # noqa: E402

CONVERTED = "converted from schema 1: one trial of the old method (per-iteration CUDA events, nothing queued ahead)"


def convert(result: dict) -> dict:
    method = result["method"]
    for name, entry in result["backends"].items():
        new = backend_entry(entry["label"], **{k: v for k, v in entry.items() if k in backend_entry("x") and k != "label"})
        if entry["wall_mean_ms"] is not None:
            device = entry["device_ms"]["median"] if entry["device_ms"] else None
            new["trials"] = [{"process": 0, "index": 0, "iters": method["iters"], "wall_mean_ms": entry["wall_mean_ms"],
                              "device_ms": device, "warmup_iters": method["warmup"], "gpu_state": None}]
            summary.complete_entry(new, result["flops"], 0.03, [])
            if entry["tflops"]:
                new["tflops"] = entry["tflops"]  # as recorded (they may differ by rounding)
        result["backends"][name] = new
    method.update(trials=1, min_trial_ms=0, device_time=CONVERTED if method.get("device_timer") else None,
                  device_fallbacks={}, clear_l2=False, repeats=1, stable_spread=0.03, ci_method=stats.CI_METHOD,
                  cross_check={"do_bench": False, "tolerance": 0.03},
                  gpu_state={"source": None, "reason": "not recorded in schema 1"})
    result["reference"] = {"status": "ok", "failure_kind": None, "reason": None}
    result["schema_version"] = SCHEMA_VERSION
    return result


def main(paths: list[str]) -> int:
    for path in map(Path, paths):
        result = json.loads(path.read_text())
        if result["schema_version"] != 1:
            print(f"{path}: schema {result['schema_version']}, left as it is")
            continue
        path.write_text(json.dumps(convert(result), indent=2) + "\n")
        print(f"{path}: converted")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
