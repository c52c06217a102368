"""How a measuring process is started: its arguments (the runner's, plus --process-index) and its
environment (the runner sets it, the result records it).

Inductor compiles in a pool of worker processes that start (each importing torch) while the job
measures: CPU load that enters every host-side figure, and their shutdown delays the exit. One
compile thread compiles in the measuring process itself; a value set by the caller wins.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

MEASURING_ENV = {"TORCHINDUCTOR_COMPILE_THREADS": "1"}


def measuring_environment() -> dict:
    return {**MEASURING_ENV, **os.environ}


def job_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The arguments the runner and each measuring process (fabench.measure.job) share."""
    parser.add_argument("--spec", required=True, type=json.loads, help="the job spec, JSON (fabench.config.job_spec)")
    parser.add_argument("--aiter-config", type=Path, help="the variant's patched aiter MHA config JSON")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--project-commit", help="git commit of this project (the workflow passes it)")
    return parser
