"""Running the real workflow from tests: snakemake as a process, working in a temporary directory."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import yaml
from snakemake.utils import update_config

from fabench.config_layers import replace_whole_values

REPO = Path(__file__).resolve().parent.parent
SNAKEFILE = REPO / "Snakefile"
CPU_TEST_CONFIG = REPO / ".test" / "config-cpu" / "config.yaml"


def default_config() -> dict:
    return yaml.safe_load((REPO / "config.yaml").read_text())


def tiny_config(**overrides) -> dict:
    """The CPU test experiment as one whole config: config.yaml with .test/config-cpu's keys."""
    config = default_config()
    layer = yaml.safe_load(CPU_TEST_CONFIG.read_text())
    update_config(config, layer)  # block by block, as --configfile goes on top of config.yaml
    replace_whole_values(config, [layer])
    config.update(copy.deepcopy(overrides))
    return config


def write_config(directory: Path, config: dict, name: str = "config.yaml") -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def snakemake(directory: Path, *args: str, config: dict | None = None, timeout: int = 900,
              snakefile: Path = SNAKEFILE, env: dict | None = None) -> subprocess.CompletedProcess:
    """snakemake on the project's Snakefile, working in `directory` (results/ and logs/ land there);
    `env` adds to the environment."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(snakefile), "--directory", str(directory)]
    if config is not None:
        cmd += ["--configfile", str(write_config(directory, config))]
    src = snakefile.parent / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")])),
           **(env or {})}
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout, env=env)


def report_run(directory: Path, config: dict) -> None:
    """The README's first command (`snakemake --cores 1 report`) on `config` in `directory`,
    failing the test with the end of its output when it fails."""
    proc = snakemake(directory, "--cores", "1", "report", config=config)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def planned_jobs(proc: subprocess.CompletedProcess) -> dict[str, int]:
    """The "Job stats" table of a dry run: rule name -> number of jobs."""
    lines = proc.stdout.splitlines()
    start = lines.index("Job stats:") + 3
    counts = {}
    for line in lines[start:]:
        parts = line.split()
        if len(parts) != 2 or parts[0] == "total":
            break
        counts[parts[0]] = int(parts[1])
    return counts
