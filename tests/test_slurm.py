"""The workflow on a real Slurm cluster (tests/support/slurm_cluster.py) through Snakemake's Slurm
executor plugin, with profiles/slurm: every measure job a Slurm job with a GPU of its own, host
steps local. Skipped where the Slurm binaries are absent; FABENCH_REQUIRE_SLURM=1 (CI) makes it
required. And the profile's plan, which needs no cluster.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from datetime import datetime

import pytest

from support.slurm_cluster import SlurmCluster, SlurmError, missing_binaries
from workflow_util import REPO, planned_jobs, snakemake, tiny_config

SLURM_PROFILE = REPO / "profiles" / "slurm"
# Without an accounting database the plugin must poll squeue (it would wait on sacct), and a
# small run need not wait the default minute before its first status check.
CLUSTER_ARGS = ("--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "5")


def slurm_unavailable(reason: str) -> None:
    if os.environ.get("FABENCH_REQUIRE_SLURM") == "1":
        pytest.fail(f"FABENCH_REQUIRE_SLURM=1 but no Slurm cluster: {reason}", pytrace=False)
    pytest.skip(f"no Slurm cluster: {reason}")


@pytest.fixture
def slurm(tmp_path_factory, monkeypatch):
    missing = missing_binaries()
    if missing:
        slurm_unavailable(f"missing {', '.join(missing)} (apt-get install slurmctld slurmd slurm-client munge)")
    if os.geteuid() != 0:
        slurm_unavailable("needs root")
    pytest.importorskip("snakemake_executor_plugin_slurm", reason="pip install -e '.[slurm]'")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except SlurmError as err:
        pytest.fail(str(err), pytrace=False)
    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    try:
        yield cluster
    finally:
        cluster.cancel_jobs()
        cluster.stop()


def test_the_slurm_profile_plans_one_gpu_per_measure_job_and_none_for_host_steps(tmp_path):
    proc = snakemake(tmp_path, "-n", "--profile", str(SLURM_PROFILE), "report", config=tiny_config(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    jobs = planned_jobs(proc)
    assert jobs["measure"] > 0
    gpus = _planned_gpus(proc.stdout)
    assert gpus["measure"] == [1] * jobs["measure"]
    assert {rule: set(asked) for rule, asked in gpus.items() if rule != "measure"} == {
        rule: {0} for rule in jobs if rule != "measure"}


def _planned_gpus(plan: str) -> dict[str, list[int]]:
    """rule -> the gpu resource of each of its planned jobs (0 when it asks for none)."""
    asked: dict[str, list[int]] = {}
    for block in re.split(r"\n(?=\[)", plan):
        rule = re.search(r"^(?:local)?(?:rule|checkpoint) (\w+):", block, re.M)
        resources = re.search(r"^\s+resources: (.*)$", block, re.M)
        if rule and resources:
            gpu = re.search(r"\bgpu=(\d+)", resources.group(1))
            asked.setdefault(rule.group(1), []).append(int(gpu.group(1)) if gpu else 0)
    return asked


@pytest.mark.slurm
def test_a_run_on_slurm_measures_every_job_as_a_slurm_job_each_on_its_own_gpu(tmp_path, slurm):
    config = tiny_config(run="slurm")
    config["cpu"]["repeats"] = 2  # every measure job measures (and records its GPU)
    proc = snakemake(tmp_path, "--profile", str(SLURM_PROFILE), *CLUSTER_ARGS, "report", config=config,
                     timeout=1200)
    # A host step that failed says why in its own log only (the report's: logs/slurm/report.log).
    host_logs = "".join(f"--- {log}\n{log.read_text()[-3000:]}" for log in (tmp_path / "logs" / "slurm").glob("*.log"))
    assert proc.returncode == 0, proc.stderr[-5000:] + host_logs + slurm.logs()
    run = tmp_path / "results" / "slurm"

    submitted = slurm.jobs()
    measure_files = sorted(run.glob("*/*/process-*.json"))
    assert submitted and all(job["Comment"].startswith("rule_measure_") for job in submitted), submitted
    assert len(submitted) == len(measure_files)  # one Slurm job per measure job, none for host steps

    by_id = {job["JobId"]: job for job in submitted}
    spans = []  # (GPU, start, end) of each Slurm job: how long Slurm held its GPU for it
    for path in measure_files:
        result = json.loads(path.read_text())
        lease = result["provenance"]["device_lease"]
        job = by_id.get(lease["found_by"].split()[-1])
        assert lease["source"] == "scheduler" and job, (lease, submitted)
        visible = lease["visible_devices"]["CUDA_VISIBLE_DEVICES"]
        assert visible in ("0", "1") and result["provenance"]["visible_devices"] == visible
        spans.append((visible, _time(job["StartTime"]), _time(job["EndTime"])))
    overlapping = [(a, b) for a, b in itertools.combinations(spans, 2) if a[1] < b[2] and b[1] < a[2]]
    assert overlapping, f"no two measure jobs ran at once: {spans}"
    assert all(a[0] != b[0] for a, b in overlapping), overlapping

    results = json.loads((run / "results.json").read_text())["results"]
    assert {(r["variant"], r["shape_id"]) for r in results} == {
        (v, s) for v in config["variants"] for s in ("b1-s64-h2-d32", "b1-s128-h2-d64")}
    report = (run / "report.md").read_text()
    for variant in config["variants"].values():
        assert f"#### {variant['title']}" in report
    assert "| (1, 64, 2, 32) |" in report and "| (1, 128, 2, 64) |" in report
    exits = [e for r in results for e in r["method"]["process_exits"] if e["wrote_result"]]
    assert {e["gpu_lease"] for e in exits} <= {"0", "1"}  # each process's GPU, kept by the merge


def _time(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()
