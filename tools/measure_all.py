"""Run every benchmark job of a config without Snakemake, one after another (a GPU host without
the workflow's dependencies). Each job is the real runner process, as the workflow starts it.

    python tools/measure_all.py --config config.yaml --run h200-a --results results [--set timing.repeats=1]

Writes <results>/<run>/<variant>/<shape_id>.json and <results>/<run>/times.json (seconds per job).
Defaults missing from the config are not filled in here: give a complete config (config.yaml is).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fabench.config import job_spec  # noqa: E402
from fabench.shapes import shape_id  # noqa: E402


def override(config: dict, assignment: str) -> None:
    """KEY.SUB=VALUE with VALUE parsed as YAML."""
    key, value = assignment.split("=", 1)
    *parents, last = key.split(".")
    node = config
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = yaml.safe_load(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "config.yaml"))
    parser.add_argument("--run", required=True)
    parser.add_argument("--results", default="results")
    parser.add_argument("--set", action="append", default=[], help="KEY.SUB=VALUE override (YAML value)")
    parser.add_argument("--only", action="append", default=[], help="variant/shape_id to run (default: all)")
    args = parser.parse_args()
    config = yaml.safe_load(Path(args.config).read_text())
    config["run"] = args.run
    for assignment in args.set:
        override(config, assignment)
    out_dir = Path(args.results) / args.run
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    times = {}
    for variant in config["variants"]:
        for shape in config["shapes"]:
            name = f"{variant}/{shape_id(shape)}"
            if args.only and name not in args.only:
                continue
            out = out_dir / f"{name}.json"
            cmd = [sys.executable, "-m", "fabench.measure", "--spec", json.dumps(job_spec(config, variant, shape)),
                   "--out", str(out)]
            began = time.perf_counter()
            code = subprocess.run(cmd).returncode
            times[name] = {"seconds": round(time.perf_counter() - began, 1), "exit_code": code}
            print(f"[measure_all] {name}: {times[name]}", flush=True)
            (out_dir / "times.json").write_text(json.dumps(times, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
