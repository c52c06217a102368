"""The workflow's plan (fabench.plan), built directly and through Snakemake: what it refuses before
any job starts, and what the rules get from it."""

from __future__ import annotations

import json
import shlex
import socket
import sys
import threading
from datetime import datetime
from pathlib import Path

import jsonschema
import pytest
import yaml

from fabench.plan import Plan, PlanError
from fabench.workflow_config import check_config
from fabench.workflow_hooks import WorkflowHooks
from fabench.resources import SCHEMA_DIR
from workflow_util import REPO, default_config, planned_jobs, snakemake, tiny_config

H200_ARCHIVE = REPO / "examples" / "h200" / "archive"


def with_defaults(config: dict) -> dict:
    """The config as the workflow has it after validation: the schema's defaults filled in."""
    schema = yaml.safe_load((SCHEMA_DIR / "config.schema.yaml").read_text())
    check_config(config, REPO)

    def fill(validator, properties, instance, schema):
        for name, rule in properties.items():
            if isinstance(instance, dict) and "default" in rule:
                instance.setdefault(name, rule["default"])
        yield from jsonschema.Draft202012Validator.VALIDATORS["properties"](validator, properties, instance, schema)

    filling = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"properties": fill})
    filling(schema).validate(config)
    return config


def cpu_plan(**overrides) -> Plan:
    return Plan(with_defaults({**default_config(), **overrides}), REPO, docker=False, platform="cpu")


def test_a_cpu_host_is_refused_the_sweep_of_aiters_kernel():
    with pytest.raises(PlanError, match=r"^cannot sweep here: the jobs would run on this host's CPU"):
        cpu_plan().require_sweep()
    config = with_defaults(default_config())
    config["sweep"]["kernel_module"] = "support.mha_standin"  # a kernel that runs on a CPU
    Plan(config, REPO, docker=False, platform="cpu").require_sweep()
    Plan(with_defaults(default_config()), REPO, docker=False, platform="cuda").require_sweep()


def test_snakemake_tune_on_a_cpu_host_says_why_before_any_job(tmp_path):
    proc = snakemake(tmp_path, "-n", "--cores", "1", "tune", config=default_config(), timeout=300)
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert "cannot sweep here: the jobs would run on this host's CPU" in output
    assert "Job stats:" not in output and not (tmp_path / "results").exists()


def test_measuring_jobs_run_one_at_a_time_on_a_cpu():
    plan = cpu_plan()
    assert plan.measuring_slots(None, 1) == (1, None)
    slots, note = plan.measuring_slots(None, 2)
    assert slots == 1 and note.startswith("note: --cores 2 on a CPU host: the measuring jobs run one at a time")
    with pytest.raises(PlanError, match=r"^--resources gpu=2: the jobs measure on this host's CPU"):
        plan.measuring_slots(2, 2)
    gpu = Plan(plan.config, REPO, docker=False, platform="cuda")
    assert gpu.measuring_slots(None, 8) == (None, None) and gpu.measuring_slots(4, 8) == (4, None)


@pytest.mark.parametrize("gpus, given, cores, slots", [
    ("0,1", None, 2, 4), ("0,1", None, 8, 4), ("0,1", 2, 1, 4), ("0,1", 3, 1, 4), ("0", None, 1, 2),
    ("0,1", None, 1, 1), ("0,1", 1, 8, 1), ("0,1,2,3", None, 2, 2)])
def test_on_a_gpu_host_each_gpu_has_a_job_measuring_and_the_next_ready_where_the_run_measures_on_all(
        monkeypatch, gpus, given, cores, slots):
    """Two slots per GPU where the run measures on every GPU a job may lease (the user's --resources
    gpu, else --cores, covers the pool); fewer GPUs, one slot each and no launcher ahead."""
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "FABENCH_DEVICE_LEASE",
                "SLURM_JOB_ID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("FABENCH_GPUS", gpus)
    plan = Plan(cpu_plan().config, REPO, docker=False, platform="cuda")
    found, note = plan.measuring_slots(given, cores)
    assert found == slots
    assert (note is not None) == (given is None and cores < len(gpus.split(","))), note
    assert plan.measure_threads(cluster=False) == 0  # the jobs take no core: the slots bound them
    assert plan.measuring_slots(given, cores, cluster=True) == (given, None) and plan.measure_threads(True) == 1


def test_where_no_gpu_is_leased_the_measure_jobs_take_a_core_and_the_slots_are_as_given(monkeypatch):
    monkeypatch.setenv("FABENCH_GPUS", "0;1")  # unreadable: Plan.checked refuses it before any job
    plan = Plan(cpu_plan().config, REPO, docker=False, platform="cuda")
    assert plan.measuring_slots(None, 4) == (None, None) and plan.measure_threads(False) == 1
    monkeypatch.setenv("FABENCH_GPUS", "0")
    monkeypatch.setenv("FABENCH_DEVICE_LEASE", "{}")  # a lease inherited: every job adopts that one
    plan = Plan(plan.config, REPO, docker=False, platform="cuda")
    assert plan.measuring_slots(2, 4) == (2, None) and plan.measure_threads(False) == 1
    monkeypatch.delenv("FABENCH_GPUS")
    monkeypatch.delenv("FABENCH_DEVICE_LEASE")
    assert cpu_plan().measure_threads(False) == 1 and cpu_plan().measure_threads(True) == 1


def test_snakemake_on_a_cpu_with_two_cores_says_so_and_refuses_two_measuring_slots(tmp_path):
    proc = snakemake(tmp_path, "-n", "--cores", "2", "report", config=tiny_config(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "note: --cores 2 on a CPU host: the measuring jobs run one at a time" in proc.stderr
    proc = snakemake(tmp_path, "-n", "--cores", "2", "report", "--resources", "gpu=2", config=tiny_config())
    assert proc.returncode != 0
    assert "--resources gpu=2: the jobs measure on this host's CPU" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_measuring_jobs_on_a_cpu_never_overlap_with_two_cores(tmp_path):
    """Four measuring jobs under --cores 2: each process's measuring span ends before the next begins."""
    config = tiny_config(run="serial")
    config["cpu"]["repeats"] = 2
    proc = snakemake(tmp_path, "--cores", "2", *[f"results/serial/{v}/{s}.json" for v in ["default"]
                                                 for s in ("b1-s64-h2-d32", "b1-s128-h2-d64")],
                     config=config, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    spans = []
    for path in (tmp_path / "results" / "serial" / "default").glob("*/process-*.json"):
        provenance = json.loads(path.read_text())["provenance"]
        spans.append(tuple(datetime.fromisoformat(provenance[k]) for k in ("started", "finished")))
    spans.sort()
    assert len(spans) == 4
    assert all(earlier[1] <= later[0] for earlier, later in zip(spans, spans[1:])), spans


def test_a_dry_run_in_the_docker_runtime_is_told_that_no_engine_answers(tmp_path):
    config = {**tiny_config(), "runtime": "docker"}
    proc = snakemake(tmp_path, "-n", "--cores", "1", "report", config=config, timeout=300,
                     env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: runtime docker:")]
    assert len(warnings) == 1 and "no-engine.sock" in warnings[0], proc.stderr
    assert planned_jobs(proc)["measure"] > 0


def test_the_plan_gives_the_rules_their_launch_lines_and_order():
    plan = cpu_plan()
    line = plan.launcher("r", [], "results/r/aiter-config/default.json")
    assert shlex.split(line) == [sys.executable, "-m", "fabench.measure", "--aiter-config",
                                 "results/r/aiter-config/default.json"]
    run, (first, *_) = next(iter(plan.runs)), list(plan.shapes)
    # every job's process 0 comes before any process 1
    last_round0 = min(plan.process_priority(run, v, s, 0) for v in plan.variants for s in plan.shapes)
    assert plan.process_priority(run, plan.variants[0], first, 1) < last_round0
    spec = json.loads(plan.job_spec_json(run, plan.variants[0], first))
    assert spec["shape_id"] == first and spec["variant"] == plan.variants[0]


def test_the_plan_tracks_every_archived_entry_for_compare():
    config = with_defaults(default_config())
    config["archive"]["root"] = str(H200_ARCHIVE)
    plan = Plan(config, REPO, docker=False, platform="cpu")
    assert len(plan.archive_state([])) == len(list(H200_ARCHIVE.glob("*/*/SHA256SUMS")))


def test_the_plan_refuses_a_config_before_the_schema_fills_it():
    with pytest.raises(PlanError, match=r"^invalid config: published: no file at"):
        Plan.check({**default_config(), "published": "no/such/numbers.yaml"}, REPO)
    with pytest.raises(PlanError, match=r"^invalid config: iters: "):
        Plan.check({**default_config(), "iters": "many"}, Path(REPO))


CLUSTER_PROBE = """
from fabench.plan import submits_jobs
print("submits jobs:", submits_jobs(workflow.resource_settings.nodes, workflow.remote_exec))
rule all:
    input: []
"""


@pytest.mark.parametrize("args, submits", [
    (["--executor", "slurm", "--jobs", "2"], True),
    (["--profile", str(REPO / "profiles" / "slurm")], True),
    (["--cores", "2"], False),
    (["--jobs", "2"], False),  # a local run's --jobs is its --cores (in a real run: not -n)
    (["--profile", str(REPO / "profiles" / "multi-gpu")], False),
])
def test_a_cluster_executor_is_known_from_snakemakes_own_settings_when_the_snakefile_is_parsed(tmp_path, args,
                                                                                                  submits):
    """Snakemake names its executor to the Snakefile only when jobs run; the plan reads what
    Snakemake has by then (its --jobs, its remote mode), never its command line or profile files."""
    (tmp_path / "Snakefile").write_text(CLUSTER_PROBE)
    proc = snakemake(tmp_path, *args, snakefile=tmp_path / "Snakefile", timeout=120)  # nothing to do
    assert f"submits jobs: {submits}" in proc.stdout.splitlines(), proc.stdout + proc.stderr


class EngineStandIn:
    """A unix socket where a Docker engine would answer, counting who knocks (and answering nobody)."""

    def __init__(self, path: Path):
        self.path, self.knocks = path, 0
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen()
        self.server.settimeout(0.2)
        self.open = True
        self.thread = threading.Thread(target=self._count, daemon=True)
        self.thread.start()

    def _count(self):
        while self.open:
            try:
                conn, _ = self.server.accept()
            except (TimeoutError, OSError):
                continue
            self.knocks += 1
            conn.close()

    def close(self):
        self.open = False
        self.thread.join()
        self.server.close()


def test_the_docker_engine_is_asked_only_by_targets_that_build_or_run_a_container(tmp_path):
    config = {**tiny_config(), "runtime": "docker"}
    engine = EngineStandIn(tmp_path / "e.sock")
    env = {"DOCKER_HOST": f"unix://{engine.path}"}
    try:
        # Parsing the Snakefile asks nothing (every target now needs the measure jobs first: the
        # resolved config is written with the report, by rule write_report).
        proc = snakemake(tmp_path, "--list-rules", config=config, timeout=300, env=env)
        assert proc.returncode == 0, proc.stderr
        assert engine.knocks == 0 and "warning: runtime docker" not in proc.stderr
        proc = snakemake(tmp_path, "-n", "--cores", "1", "report", config=config, timeout=300, env=env)
        assert proc.returncode == 0, proc.stderr
        assert engine.knocks >= 1
        assert len([line for line in proc.stderr.splitlines() if line.startswith("warning: runtime docker:")]) == 1
    finally:
        engine.close()


def test_the_workflows_end_never_fails_on_a_workers_folder_it_cannot_use(tmp_path, monkeypatch):
    """The Snakefile's handlers stop the measuring workers; a workers' folder that is a file gives a
    line naming the variable, not an error of the handler's own."""
    from fabench.watchdog import WORKFLOW_ENV

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("FABENCH_WORKER_DIR", str(tmp_path / "a-file"))
    monkeypatch.setenv(WORKFLOW_ENV, "test")
    hooks = WorkflowHooks(cpu_plan(measure={**default_config()["measure"], "mode": "worker"}), cluster=False)
    note = hooks.stop_measuring_workers()
    assert note.startswith("note: the measuring workers were not told to stop") and "FABENCH_WORKER_DIR" in note


def test_every_variable_that_names_a_place_is_checked_before_any_job(tmp_path):
    """fabench.places (the jobs' own check) is asked at plan time: a place-naming variable that points
    at a file stops the workflow before any job, in one line naming the variable."""
    places = pytest.importorskip("fabench.places")
    (tmp_path / "a-file").write_text("")
    for variable in ("FABENCH_WORKER_DIR", "FABENCH_LEASE_DIR"):
        env = {"PATH": "/usr/bin:/bin", variable: str(tmp_path / "a-file")}
        assert places.check_env_places(env), variable
        proc = snakemake(tmp_path, "-n", "--cores", "1", "report", config=tiny_config(), timeout=300, env=env)
        assert proc.returncode != 0
        lines = [line for line in (proc.stdout + proc.stderr).splitlines() if "invalid environment:" in line]
        assert len(lines) == 1 and variable in lines[0] and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("command_line, key", [
    ({"iters": 20}, "cpu={iters: 20}"), ({"timing": {"repeats": 3}}, "cpu={repeats: 3}"),
    ({"timing": {"trials": 7}}, "cpu={trials: 7}")])
def test_the_cpu_warning_suggests_the_cpu_key_the_user_meant(command_line, key):
    """The newcomer's `timing={repeats: 3}` was told to set `cpu={iters: 20}` (issue 40)."""
    line = cpu_plan().unused_on_cpu(command_line)
    assert line is not None and f"--config '{key}'" in line, line


def test_how_a_job_is_measured_is_no_parameter_snakemake_tracks():
    """The mode, idle time and timeout are how, not what: Snakemake records only plain values as a
    rule's parameters (persistence._serialize_param), so these must not be one; the end-to-end check
    is tests/test_workflow.py (a finished run planned in isolate mode measures nothing)."""
    from snakemake.persistence import UNREPRESENTABLE, PersistenceBase

    options = cpu_plan().measure_options(cluster=True)
    assert "--mode isolate" in str(options)
    assert PersistenceBase._serialize_param_builtin(None, options) is UNREPRESENTABLE
