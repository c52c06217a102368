"""Unbounded config values are named before any job starts (issue 26): each count, duration,
thread count and seed has a maximum in workflow/schemas/config.schema.yaml, and a value beyond it
is one line naming the key."""

from __future__ import annotations

import pytest

from fabench.config import ConfigError
from fabench.plan import check_config
from workflow_util import REPO, default_config, snakemake

SCHEMAS = REPO / "workflow" / "schemas"
SWEEP = {"strategy": "exhaustive", "space": {"BLOCK_M": [64]}, "objective": "geomean", "reference": "default"}

# key (dotted) -> (value just inside the bound, value beyond it)
BOUNDS = {
    "seed": (2**64 - 1, 2**64),
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
