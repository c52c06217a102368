"""How a measuring process is started: its arguments (the runner's, plus --process-index; a sweep
job's), checked before any process starts, and its environment (the runner sets it, the result records it):
compile caches under build/compile-cache/ and the settings below.

Inductor compiles in a pool of worker processes that start (each importing torch) while the job
measures: CPU load that enters every host-side figure, and their shutdown delays the exit. One
compile thread compiles in the measuring process itself; a value set by the caller wins. A thread
count of 0, which Snakemake exports to a job that takes no core, is given as 1 (thread_counts).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

from fabench.config import SpecError, config_schema, option_error
from fabench.files import output_file_arg
from fabench.measure.spec import JobSpec, in_image
from fabench.measure.sweep_spec import SweepSpec
from fabench.places import PlaceError

# FlashAttention-4 keeps its compiled kernels on disk only when asked to (its cache is off by default).
MEASURING_ENV = {"TORCHINDUCTOR_COMPILE_THREADS": "1", "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED": "1"}
# Compiled kernels (Inductor's FlexAttention, Triton's builds of aiter's kernel, FlashAttention-4's
# CuTe DSL builds) are cached across processes, jobs and runs in one directory the user can see and
# delete (the docker runtime has its own, build/container-cache/); a value set by the caller wins.
COMPILE_CACHE = Path("build") / "compile-cache"
CACHE_ENV = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton",
             "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR": "flash-attn-cute"}
# The thread counts Snakemake exports to a job from its rule's threads (snakemake.shell). Rule measure
# takes no core on a GPU host's local executor (threads 0: fabench.slots), and a 0 must not reach
# what measures: libgomp refuses it ("Invalid value for environment variable OMP_NUM_THREADS", on
# stderr) and torch then computes on every core. It is given as 1, what these processes ran with
# while the rule took one core, so that they measure as before.
SNAKEMAKE_THREAD_VARS = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                         "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
USAGE = 2  # the exit code of a spec or argument that cannot run: no process result is written


def measuring_environment(lease=None) -> dict:
    """The measuring process's environment: with a lease (fabench.measure.launch.lease), the job's GPU
    alone and the lease it records."""
    cache = Path.cwd() / COMPILE_CACHE
    env = thread_counts({**MEASURING_ENV, **{key: str(cache / sub) for key, sub in CACHE_ENV.items()}, **os.environ})
    return lease.environment(env) if lease is not None else env


def thread_counts(env: dict) -> dict:
    """`env` with each of Snakemake's thread counts that is 0 given as 1 (SNAKEMAKE_THREAD_VARS)."""
    return {**env, **{key: "1" for key in SNAKEMAKE_THREAD_VARS if env.get(key, "").strip() == "0"}}


class Parser(argparse.ArgumentParser):
    """Bad arguments end in one line (no usage block), exit code 2."""

    def error(self, message: str):
        self.exit(USAGE, f"{self.prog}: error: {message}\n")


def job_spec_arg(text: str) -> JobSpec:
    """--spec: a job spec's JSON (fabench.measure.spec.JobSpec), every key and value checked."""
    try:
        return JobSpec.from_json(text)
    except SpecError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def sweep_spec_arg(text: str) -> SweepSpec:
    """--spec of a sweep job: a sweep job spec's JSON (fabench.measure.sweep_spec.SweepSpec), checked alike."""
    try:
        return SweepSpec.from_json(text)
    except SpecError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def config_bounded(*keys: str):
    """The type of an option that stands for the config key at `keys` (--timeout-s for
    measure.job_timeout_s, say): a number the config schema's entry takes. In the image only a
    number: its launcher checked the same options on the host (fabench.measure.spec.RUNTIME_ENV)."""

    def number(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        problem = None if in_image() else option_error(value, *keys)
        if problem:
            raise argparse.ArgumentTypeError(f"{problem} (as the config's {'.'.join(keys)})")
        return value

    return number


def process_index(text: str) -> int:
    """A job's process N: 0 up to the config schema's most processes per job (timing.repeats; in the
    image, whose launcher checked it on the host, 0 or more)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is not a process of a job (expected 0 or more)")
    most = None if in_image() else config_schema()["definitions"]["repeats"]["maximum"]
    if most is not None and value >= most:
        raise argparse.ArgumentTypeError(f"{value} is not a process of a job (expected 0 to {most - 1}: "
                                         f"a job has at most {most} processes, timing.repeats)")
    return value


def aiter_config_arg(text: str) -> Path:
    """--aiter-config: a JSON object in a file (the variant's patched config, rule patch_config)."""
    path = Path(text)
    try:
        value = json.loads(path.read_bytes())
    except OSError as err:
        raise argparse.ArgumentTypeError(f"{path}: {err.strerror}") from None
    except ValueError as err:  # not JSON, or not text
        raise argparse.ArgumentTypeError(f"{path} is not JSON ({str(err).splitlines()[0]})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{path} holds a JSON {type(value).__name__}, not aiter's config object")
    return path


def job_arguments(prog: str, description: str | None = None) -> Parser:
    """The arguments the runner and each measuring process (fabench.measure.job) share."""
    parser = Parser(prog=prog, description=description)
    parser.add_argument("--spec", required=True, type=job_spec_arg, help="the job spec, JSON (fabench.measure.spec.JobSpec)")
    parser.add_argument("--aiter-config", type=aiter_config_arg, help="the variant's patched aiter MHA config JSON")
    parser.add_argument("--out", required=True, type=output_file_arg)
    parser.add_argument("--project-commit", help="git commit of this project (the workflow passes it)")
    return parser


def sweep_arguments(prog: str, description: str | None = None) -> Parser:
    """The arguments of a sweep job (fabench.tune.job), read as a benchmark job's are."""
    parser = Parser(prog=prog, description=description)
    parser.add_argument("--spec", required=True, type=sweep_spec_arg, help="the sweep job's spec, JSON")
    parser.add_argument("--aiter-config", required=True, type=aiter_config_arg,
                        help="the reference variant's patched config")
    parser.add_argument("--out", required=True, type=output_file_arg)
    parser.add_argument("--shortlist", type=Path, help="the coarse stage's survivors (stage refine)")
    return parser


class JobError(Exception):
    """A job that cannot run, for a reason the message states in full (no traceback needed)."""


def report_failure(err: BaseException, spec: JobSpec, process: int | None) -> None:
    """The failure's reason as the last line of output, so that the terminal and the job's log
    both end with it (the workflow tees the job's output to its log); a traceback before it only
    for an error nobody foresaw."""
    foreseen = isinstance(err, (JobError, PlaceError))  # PlaceError: a folder the environment names
    if not foreseen:
        traceback.print_exc()
    name = f"{spec.variant} {spec.shape_id}" + (f" process {process}" if process is not None else "")
    reason = str(err) if foreseen else f"{type(err).__name__}: {err}"
    print(f"[fabench] job failed: {name}: {reason}", file=sys.stderr, flush=True)
