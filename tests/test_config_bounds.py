"""Unbounded config values are named before any job starts (issue 26): each count, duration,
thread count and seed has a maximum in workflow/schemas/config.schema.yaml, and a value beyond it
is one line naming the key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from fabench.config import ConfigError
from fabench.measure.spec import Shape, job_spec
from fabench.workflow_config import check_config
from fabench.shapes import parse_shape_id
from support.workers import worker_dir  # noqa: F401 (a fixture)
from workflow_util import REPO, default_config, snakemake, tiny_config

SCHEMAS = REPO / "workflow" / "schemas"
SWEEP = {"strategy": "exhaustive", "space": {"BLOCK_M": [64]}, "objective": "geomean", "reference": "default"}

# key (dotted) -> (value just inside the bound, value beyond it)
BOUNDS = {
    "seed": (2**32 - 1, 2**32),
    "measure.job_timeout_s": (604800, 1e10),
    "measure.worker_idle_s": (604800, 1e308),
    "cpu.threads": (1024, 100000),
    "iters": (1_000_000, 10**9),
    "warmup": (1_000_000, 10**9),
    "cpu.iters": (1_000_000, 10**9),
    "cpu.repeats": (100, 10**6),
    "cpu.trials": (1000, 10**6),
    "cpu.min_trial_ms": (600000, 1e9),
    "timing.repeats": (100, 10**6),
    "timing.trials": (1000, 10**6),
    "timing.min_samples": (1_000_000, 10**9),
    "timing.min_trial_ms": (600000, 1e12),
    "timing.max_warmup_ms": (600000, 1e12),
    "timing.warmup_window_ms": (600000, 1e12),
    "variants.tuned.triton.num_stages": (16, 10**6),
    "sweep.keep": (1000, 10**6),
    "sweep.timing.iters": (1_000_000, 10**9),
    "sweep.timing.trials": (1000, 10**6),
}


def config_with(dotted: str, value) -> dict:
    config = default_config()
    config.setdefault("sweep", dict(SWEEP))
    node = config
    *parents, last = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return config


@pytest.mark.parametrize("key", sorted(BOUNDS))
def test_a_value_beyond_its_bound_is_one_line_naming_the_key(key):
    inside, beyond = BOUNDS[key]
    check_config(config_with(key, inside), REPO, SCHEMAS)  # the bound itself is allowed
    with pytest.raises(ConfigError) as err:
        check_config(config_with(key, beyond), REPO, SCHEMAS)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{key}: ") and "maximum" in message, message


def test_snakemake_names_a_huge_thread_count_before_any_job(tmp_path):
    config = default_config()
    config["cpu"]["threads"] = 100000
    proc = snakemake(tmp_path, "-n", "report", config=config, timeout=120)
    output = proc.stdout + proc.stderr
    errors = [line for line in output.splitlines() if line.startswith("invalid config:")]
    assert proc.returncode != 0 and errors == [
        "invalid config: cpu.threads: 100000 is greater than the maximum of 1024 (expected type ['integer', 'null'] "
        "and minimum 1 and maximum 1024)"], output
    assert "Traceback" not in output and not (tmp_path / "results").exists()


@pytest.mark.parametrize("key", ["timing.min_trial_ms", "timing.stable_spread", "tolerance.max_abs_err",
                                 "cpu.max_warmup_ms"])
def test_a_number_that_is_not_a_number_is_named(key):
    """NaN passes every minimum and maximum of JSON Schema: refused before the schema is asked."""
    with pytest.raises(ConfigError) as err:
        check_config(config_with(key, float("nan")), REPO, SCHEMAS)
    assert str(err.value) == f"{key}: nan is not a finite number"


def test_a_published_file_with_nan_is_named(tmp_path):
    from fabench.results.published import PublishedError, load_published

    source = (REPO / "report" / "published" / "mi300x-2025-12-30.yaml").read_text()
    bad = tmp_path / "published.yaml"
    bad.write_text(source.replace("ms: {native: 0.274,", "ms: {native: .nan,", 1))
    with pytest.raises(PublishedError, match="nan is not a finite number"):
        load_published(bad)


# ---------------------------------------------------------------- every accepted value runs (issue 32)

# Each numeric key whose consumer has a limit of its own (a C type, a clock), with how the measuring
# job takes it: the seed in the job's spec (torch's generators, and numpy's in a worker), the
# durations as the runner's options (threading, socket and subprocess timeouts).
def spec_seed(value) -> dict:
    return {"spec": {"seed": value}}


CONSUMED = {
    "seed": spec_seed,
    "measure.job_timeout_s": lambda value: {"options": ["--timeout-s", str(value)]},
    "measure.worker_idle_s": lambda value: {"options": ["--worker-idle-s", str(value)]},
}
CONFIG_SCHEMA = yaml.safe_load((SCHEMAS / "config.schema.yaml").read_text())


def schema_node(dotted: str) -> dict:
    node = CONFIG_SCHEMA
    for part in dotted.split("."):
        node = node["properties"][part]
    return node


def bound_values(dotted: str) -> list:
    """The values at the key's bounds the schema accepts: its maximum and its minimum (just above
    an exclusive minimum)."""
    node = schema_node(dotted)
    assert "maximum" in node, f"{dotted}: no maximum in config.schema.yaml"
    low = node.get("minimum", node.get("exclusiveMinimum"))
    if "exclusiveMinimum" in node:
        low = low + 1 if node.get("type") == "integer" else max(low * 2, 0.001)
    return [node["maximum"], low]


def numeric_keys(node: dict, prefix: str = "") -> list[str]:
    found = []
    for key, child in (node.get("properties") or {}).items():
        dotted = f"{prefix}{key}"
        kinds = child.get("type") if isinstance(child.get("type"), list) else [child.get("type")]
        if {"number", "integer"} & set(kinds):
            found.append(dotted)
        found += numeric_keys(child, dotted + ".")
    return found


# Measure durations that no measuring job takes: a spare's wait, which the worker a workflow stops
# passes to the spare it leaves (test_a_spare_waits_at_the_bounds_of_its_time).
NOT_IN_JOBS = {"measure.spare_worker_s"}


def test_every_numeric_key_of_the_measure_stage_is_run_at_its_bounds():
    """A new seed-like key or measure duration joins CONSUMED (or NOT_IN_JOBS, run at its bounds
    below), so that it is run at its bounds."""
    keys = {k for k in numeric_keys(CONFIG_SCHEMA) if k == "seed" or k.startswith("measure.")}
    assert keys == set(CONSUMED) | NOT_IN_JOBS


def test_a_spare_waits_at_the_bounds_of_its_time(tmp_path, worker_dir):
    """measure.spare_worker_s at its maximum: the spare comes up, waiting that long (its socket's
    timeout), and ends when asked; at its minimum, 0, none is left. Blind side: the wait itself."""
    from fabench.measure.launch.worker_client import stop_workers
    from support.workers import live_workers

    env = {"FABENCH_WORKER_DIR": str(worker_dir)}
    for value in bound_values("measure.spare_worker_s"):
        done, _ = measure_job(tmp_path, worker_dir, "worker", {}, [])
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        stop_workers(env=env, spare_s=value)
        deadline = time.monotonic() + 60
        while live_workers(worker_dir) and not spares(worker_dir):  # the worker ends, the spare comes up
            assert time.monotonic() < deadline, "neither a spare nor the worker's end"
            time.sleep(0.1)
        time.sleep(1)
        found = spares(worker_dir)
        assert [r["spare_s"] for r in found] == ([value] if value else []), (value, found)
        stop_workers(env=env)
        while live_workers(worker_dir):
            assert time.monotonic() < deadline, "the spare did not stop"
            time.sleep(0.1)


def spares(folder: Path) -> list[dict]:
    records = [json.loads(r.read_text()) for r in folder.glob("w-*.json")]
    return [r for r in records if r["identity"].get("spare")]


def measure_job(tmp_path: Path, worker_dir: Path, mode: str, spec_change: dict, options: list[str]):
    """The measuring job as the workflow runs it (tiny, on the CPU), with the value in its spec or
    its options: its exit code and output."""
    spec = json.loads(job_spec(tiny_config(), "tuned", parse_shape_id("b1-s64-h2-d32")).to_json())
    spec["settings"].update(spec_change)
    kernel_config = tmp_path / "aiter.json"
    kernel_config.write_text(json.dumps({"fwd": {"default": {"BLOCK_M": 64, "BLOCK_N": 32}}}))
    out = tmp_path / "job.json"
    cmd = [sys.executable, "-m", "fabench.measure", "--spec", json.dumps(spec), "--aiter-config", str(kernel_config),
           "--out", str(out), "--project-commit", "abc123", "--process", "0", "--mode", mode, *options]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "FABENCH_WORKER_DIR": str(worker_dir),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    env.pop("FABENCH_WORKFLOW", None)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    return done, out


@pytest.mark.parametrize("mode", ["worker", "isolate"])
@pytest.mark.parametrize("key", sorted(CONSUMED))
def test_every_accepted_value_runs_through_the_measuring_job(tmp_path, worker_dir, key, mode):
    """Each bound the schema accepts, through the code that takes it: the job measures."""
    for value in bound_values(key):
        change = CONSUMED[key](value)
        done, out = measure_job(tmp_path, worker_dir, mode, change.get("spec", {}), change.get("options", []))
        output = done.stdout + done.stderr
        assert "Traceback" not in output, (key, value, output[-3000:])
        native = json.loads(out.read_text())["backends"]["native"] if done.returncode == 0 else None
        if (native or {}).get("status") != "ok":
            # Only the shortest job timeout may end the job, as a timeout: the job (or its cell)
            # fails alone, saying so, in one line.
            said = (native or {}).get("reason") or output.strip().splitlines()[-1]
            assert key == "measure.job_timeout_s" and value == min(bound_values(key)), (key, value, output[-3000:])
            assert "timed out" in said and "(measure.job_timeout_s)" in said and "\n" not in said, said


def test_the_seed_seeds_every_generator_a_job_uses_at_its_bounds():
    """In-process, what the measuring job and a worker between jobs do with the seed."""
    from fabench.measure.inputs import make_inputs
    from fabench.measure.launch.worker import reset_between_jobs

    for seed in bound_values("seed"):
        reset_between_jobs(seed)
        q, k, v = make_inputs(Shape(batch=1, seq=8, heads=1, head_dim=8), torch.float32, seed, "cpu")
        assert q.shape == (1, 8, 1, 8)
