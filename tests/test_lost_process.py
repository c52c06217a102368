"""A measuring process lost mid-job (its worker killed by a real SIGKILL, on this CPU): the run
still ends with its report, the cell is failed with why, not "ok" from the process that was left,
and the next run measures the lost process again, once; the killed worker's temporary folder is
not left behind.

Blind side: a GPU's measuring process is lost the same way (the launcher and the merge are
torch-free and the same on every platform), but only a CPU is killed here; Slurm's and docker's
jobs go through the same rule and merge, not run here."""

import json
import os
import signal
import subprocess
import sys

import jsonschema
import pytest

from support.workers import first_measuring_log, live_workers, worker_dir  # noqa: F401 (worker_dir: a fixture)
from workflow_util import REPO, tiny_config, write_config

RESULT_SCHEMA = json.loads((REPO / "workflow/schemas/result.schema.json").read_text())


def command(directory, config, *extra):
    return [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(directory),
            "--configfile", str(write_config(directory, config)), "--cores", "1", "report", *extra]


def environment(worker_dir):
    return {**os.environ, "FABENCH_WORKER_DIR": str(worker_dir),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}


@pytest.mark.slow
def test_a_killed_worker_fails_its_cell_with_why_and_the_next_run_measures_that_process_again(tmp_path, worker_dir):
    # Two processes per cell (cpu.repeats 2): the cell's other process measures, as on a GPU. Both
    # shapes: the run's other cells give the intervals their noise (with one ok cell alone, its
    # prediction interval can reach below any time results_csv accepts).
    config = tiny_config()
    # Each trial's loop lasts 1 s: the job seen measuring is still measuring when the kill lands
    # (a tiny job of a few milliseconds ended before it on a loaded host, and nothing was lost).
    config["cpu"] = {**config["cpu"], "repeats": 2, "min_trial_ms": 1000}
    env = environment(worker_dir)
    env["TMPDIR"] = str(tmp_path / "tmp")  # where the measuring processes make their folders
    (tmp_path / "tmp").mkdir()
    logs = tmp_path / "logs" / config["run"]
    workflow = subprocess.Popen(command(tmp_path, config), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)

    killed_log = first_measuring_log(logs, workflow)
    [pid] = live_workers(worker_dir, round_=0)  # the first measuring log is a round-0 process's
    assert list((tmp_path / "tmp").glob(f"fabench-aiter-configs-*-{pid}-*"))  # its folder, for the variant's config
    os.kill(pid, signal.SIGSTOP)  # frozen mid-job, so that the kill lands before the job could finish
    os.kill(pid, signal.SIGKILL)
    output, _ = workflow.communicate(timeout=600)
    assert workflow.returncode == 0, output[-3000:]
    # The killed worker's own folder (aiter's configs) was removed by its launcher, not left behind.
    assert not [p.name for p in (tmp_path / "tmp").glob(f"fabench-aiter-configs-*-{pid}-*")]

    variant, shape = killed_log.parent.parent.name, killed_log.parent.name
    run_dir = tmp_path / "results" / config["run"]
    job = json.loads((run_dir / variant / f"{shape}.json").read_text())
    jsonschema.validate(job, RESULT_SCHEMA)
    for name in ("native", "sdpa"):
        entry = job["backends"][name]
        # Not "ok" from one process: failed, with the lost process and why, its other process's trials kept.
        assert entry["status"] == "failed" and entry["failure_kind"] == "error"
        assert entry["reason"].startswith(f"process 0 its measuring worker (pid {pid}) ended mid-job")
        assert "figures are of process 1 alone" in entry["reason"] and "measures the lost one again" in entry["reason"]
        assert {trial["process"] for trial in entry["trials"]} == {1}
    report = (run_dir / "report.md").read_text()
    assert f"its measuring worker (pid {pid}) ended mid-job" in report and "a process of the cell was lost" in report

    # The next run measures that process again (Snakemake says why), and only it.
    dry = subprocess.run(command(tmp_path, config, "-n"), capture_output=True, text=True, env=env, timeout=600)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert dry.stdout.count("rule measure:") == 1, dry.stdout[-3000:]  # that process only
    assert f"results/{config['run']}/{variant}/{shape}/process-0.json" in dry.stdout
    again = subprocess.run(command(tmp_path, config), capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    job = json.loads((run_dir / variant / f"{shape}.json").read_text())
    for name in ("native", "sdpa"):
        assert job["backends"][name]["status"] == "ok"
        assert {trial["process"] for trial in job["backends"][name]["trials"]} == {0, 1}
    [first, _] = job["method"]["process_exits"]
    assert first["index"] == 0 and first["wrote_result"] is True and first["measured_again"] == 1

    # Measured again once per loss, not forever: the run after that has nothing to do.
    done = subprocess.run(command(tmp_path, config, "-n"), capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0 and "rule measure:" not in done.stdout, done.stdout[-3000:]
