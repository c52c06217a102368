"""`snakemake --cores 1 tune` end to end on this CPU, sweeping the stand-in kernel (its times are
known), then the winner measured by the benchmark's own jobs and shown in the report."""

import json
import os

import pytest
import yaml

from support import mha_standin
from workflow_util import REPO, planned_jobs, snakemake, tiny_config, write_config

pytestmark = pytest.mark.slow
TESTS = REPO / "tests"


def sweep_config(strategy: str = "coarse_refine") -> dict:
    config = tiny_config()
    config["sweep"] = {"strategy": strategy, "keep": 2, "objective": "geomean", "reference": "tuned",
                       "space": {"BLOCK_M": [32, 128], "BLOCK_N": [32, 64], "num_warps": [4], "num_stages": [1, 2],
                                 "PRELOAD_V": [True, False], "waves_per_eu": [1, 2]},
                       "shapes": config["shapes"],  # both head dims (by default only the main one)
                       "kernel_module": "support.mha_standin", "memory_limit": mha_standin.HARDWARE_LIMIT,
                       "timing": {"iters": 1, "trials": 2, "min_trial_ms": 0, "min_warmup_ms": 0, "max_warmup_ms": 0}}
    return config


@pytest.fixture(scope="module")
def standin_on_path():
    """The jobs import the stand-in from tests/ (support.mha_standin)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
        yield


@pytest.fixture(scope="module")
def tuned_run(tmp_path_factory, standin_on_path):
    directory = tmp_path_factory.mktemp("tune")
    config = sweep_config()
    proc = snakemake(directory, "--cores", "1", "tune", config=config)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return directory, config


def test_coarse_then_refine_keeps_the_best_and_picks_the_known_winner(tuned_run):
    directory, config = tuned_run
    tune = directory / "results" / config["run"] / "tune"
    shortlist = json.loads((tune / "shortlist.json").read_text())["values"]
    assert [(v["BLOCK_M"], v["BLOCK_N"]) for v in shortlist] == [(128, 64), (32, 32)]  # known scores 2.0, 1.41
    summary = json.loads((tune / "sweep.json").read_text())
    assert [s["stage"] for s in summary["stages"]] == ["coarse", "refine"]
    assert len(summary["stages"][1]["ranking"]) == 2 * 4 + 1  # survivors x stages x PRELOAD_V, + the reference
    assert summary["winner"]["id"] == "M128-N64-w4-s1-pv1" and summary["winner"]["score"] > 1.5
    assert summary["per_shape_best"]["b1-s128-h2-d64"]["id"] == "M32-N32-w4-s1-pv1"
    variants = yaml.safe_load((tune / "variants.yaml").read_text())["variants"]
    assert variants["swept"]["triton"] == {**config["variants"]["tuned"]["triton"], **mha_standin.BEST}


def test_a_second_tune_has_nothing_to_do(tuned_run):
    directory, config = tuned_run
    proc = snakemake(directory, "-n", "tune", config=config)
    assert proc.returncode == 0 and "Nothing to be done" in proc.stdout + proc.stderr


def test_the_winner_runs_through_the_benchmark_and_the_report_shows_three_variants(tuned_run):
    directory, config = tuned_run
    run = directory / "results" / config["run"]
    configfile = write_config(directory, config, "sweep-config.yaml")
    proc = snakemake(directory, "--cores", "1", "report", "--configfile", str(configfile),
                     str(run / "tune" / "variants.yaml"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    measured = json.loads((run / "swept" / "b1-s64-h2-d32.json").read_text())
    assert measured["kernel_config"]["values"]["BLOCK_M"] == 128  # read from the patched file it ran with
    report = (run / "report.md").read_text()
    for title in ("Before Tuning", "After Tuning", "After Sweep (Swept Triton Config)"):
        assert f"#### {title}" in report
    sweep = report.split("### Tuning Sweep")[1]
    assert "**Winner**: `M128-N64-w4-s1-pv1`" in sweep and "measured by the benchmark's own jobs" in sweep
    assert "#### Every candidate: stage coarse (5 candidates" in sweep
    assert "pruned: model 49,152 B > 40,000 B; compile refused (required 58,982 B)" in sweep
    # Measuring the winner changed nothing the sweep depends on: neither command has anything left.
    for args in (["tune", "--configfile", str(configfile)],
                 ["report", "--configfile", str(configfile), str(run / "tune" / "variants.yaml")]):
        again = snakemake(directory, "-n", *args)
        assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, again.stdout[-2000:]


def test_without_a_sweep_variant_the_report_needs_no_sweep(tuned_run):
    directory, config = tuned_run
    proc = snakemake(directory, "-n", "report", config=config)
    assert proc.returncode == 0 and "sweep_stage" not in proc.stdout


def test_the_plan_of_an_exhaustive_sweep_is_one_job_per_shape(tmp_path, standin_on_path):
    proc = snakemake(tmp_path, "-n", "tune", config=sweep_config("exhaustive"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    plan = planned_jobs(proc)
    assert plan["sweep_stage"] == 2 and plan["sweep_pick"] == 1 and "sweep_shortlist" not in plan


def test_a_sweep_from_no_variant_is_refused_in_one_line_before_any_job(tmp_path):
    config = sweep_config()
    config["sweep"]["reference"] = "best"
    proc = snakemake(tmp_path, "-n", "tune", config=config)
    assert proc.returncode != 0
    assert "invalid config: sweep.reference: 'best' is not a variant (default, tuned)" in proc.stdout + proc.stderr
