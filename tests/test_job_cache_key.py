"""A job is measured again exactly when what reaches its measurement changes (issue 26): its
cache key (rule measure's `spec` param, fabench.measure.spec.job_spec) holds the canonical values, so
reordering a variant's Triton keys, or changing counts a CPU job does not use, re-measures nothing.
Real Snakemake: a run measured, then dry runs of changed configs."""

from __future__ import annotations

import pytest
from snakemake.utils import validate

from fabench.measure.spec import Settings, job_spec
from workflow_util import REPO, planned_jobs, snakemake, tiny_config

SHAPE = {"batch": 1, "seq": 64, "heads": 2, "head_dim": 32}


def reordered_triton(config: dict) -> dict:
    for variant in config["variants"].values():
        variant["triton"] = dict(reversed(list(variant["triton"].items())))
    return config


def test_the_spec_is_the_same_whatever_the_key_order_or_the_counts_a_cpu_does_not_use():
    config = tiny_config()
    spec = job_spec(config, "default", SHAPE, platform="cpu")
    assert job_spec(reordered_triton(tiny_config()), "default", SHAPE, platform="cpu") == spec
    assert repr(job_spec(reordered_triton(tiny_config()), "default", SHAPE, platform="cpu")) == repr(spec)
    assert job_spec(tiny_config(iters=20, warmup=9), "default", SHAPE, platform="cpu") == spec
    gpu = job_spec(config, "default", SHAPE, platform="cuda")
    assert job_spec(tiny_config(iters=20), "default", SHAPE, platform="cuda") != gpu  # used there
    assert job_spec(tiny_config(cpu={**config["cpu"], "iters": 3}), "default", SHAPE, platform="cpu") != spec


def test_a_cpu_spec_measures_with_the_same_counts_as_the_whole_config():
    """The canonical settings change nothing the runner reads on that platform."""
    config = tiny_config(iters=20, warmup=9)
    config["timing"] = {"trials": 3, "repeats": 2, "min_trial_ms": 20, "max_warmup_ms": 1000, "min_samples": 10}
    validate(config, str(REPO / "workflow" / "schemas" / "config.schema.yaml"), set_default=True)
    for platform in ("cpu", "cuda"):
        assert Settings.of(config, platform).timing_on(platform) == Settings.of(config).timing_on(platform)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """A one-shape, one-variant CPU run measured and collected, as any user's would be."""
    work = tmp_path_factory.mktemp("cache-key")
    config = tiny_config(shapes=[SHAPE])
    config["variants"] = {"default": config["variants"]["default"]}
    done = snakemake(work, "--cores", "1", "results/tiny/results.json", config=config, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return work, config


def would_run(work, config, *args: str) -> dict[str, int]:
    proc = snakemake(work, "-n", "results/tiny/results.json", *args, config=config, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {} if "Nothing to be done" in proc.stdout + proc.stderr else planned_jobs(proc)


def test_reordered_triton_keys_re_measure_nothing(measured):
    work, config = measured
    jobs = would_run(work, reordered_triton(dict(config, variants={k: dict(v) for k, v in config["variants"].items()})))
    assert "measure" not in jobs and "patch_config" not in jobs, jobs


def test_iters_a_cpu_does_not_use_re_measure_nothing(measured):
    work, config = measured
    jobs = would_run(work, config, "--config", "iters=20")
    assert "measure" not in jobs and "patch_config" not in jobs, jobs


def test_a_count_the_cpu_uses_does_re_measure(measured):
    work, config = measured
    jobs = would_run(work, dict(config, cpu={**config["cpu"], "iters": 3}))
    assert jobs.get("measure") == 1, jobs
