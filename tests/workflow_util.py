"""Running the real workflow from tests: a config file in a temporary directory, snakemake as a process."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
SNAKEFILE = REPO / "Snakefile"

# Small enough for a 2-core CPU: two shapes, two variants, every backend.
TINY_SHAPES = [{"batch": 1, "seq": 64, "heads": 2, "head_dim": 32}, {"batch": 1, "seq": 128, "heads": 2, "head_dim": 64}]


def default_config() -> dict:
    return yaml.safe_load((REPO / "config.yaml").read_text())


def tiny_config(**overrides) -> dict:
    config = copy.deepcopy(default_config())
    config.update(run="tiny", shapes=copy.deepcopy(TINY_SHAPES), warmup=1, iters=2,
                  cpu={"warmup": 1, "iters": 2, "trials": 2, "repeats": 1, "min_trial_ms": 0, "max_warmup_ms": 0})
    config.update(overrides)
    return config


def write_config(directory: Path, config: dict) -> Path:
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def snakemake(directory: Path, *args: str, config: dict | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    """snakemake on the project's Snakefile, working in `directory` (results/ and logs/ land there)."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory", str(directory)]
    if config is not None:
        cmd += ["--configfile", str(write_config(directory, config))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout, env=env)
