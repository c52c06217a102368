"""`snakemake --cores 1 report` end to end on this CPU, on small shapes."""

import csv
import json
import os
import shutil
import subprocess

import jsonschema
import pytest

from fabench.aiter_config import file_sha256
from fabench.results.shared import shown
from workflow_util import REPO, planned_jobs, report_run, snakemake, tiny_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("workflow")
    config = tiny_config()
    report_run(directory, config)
    return directory, config


def test_report_is_rendered_from_every_job(tiny_run):
    directory, config = tiny_run
    run_dir = directory / "results" / config["run"]
    collected = json.loads((run_dir / "results.json").read_text())
    jobs = {(r["variant"], r["shape_id"]) for r in collected["results"]}
    assert jobs == {(v, s) for v in ("default", "tuned") for s in ("b1-s64-h2-d32", "b1-s128-h2-d64")}
    report = (run_dir / "report.md").read_text()
    for title in (config["variants"]["default"]["title"], config["variants"]["tuned"]["title"]):
        assert f"#### {title}" in report
    assert "| Config (B,S,H,D) | Native (ms) | SDPA (ms) | FlexAttention (ms) |" in report
    assert "| (1, 64, 2, 32) |" in report and "| (1, 128, 2, 64) |" in report  # rows come from the results
    assert "(4, 512, 8, 256) |" not in report.split("### Published vs Reproduced")[0]  # no fixed shapes
    assert "needs a GPU" in report  # unavailable backends say why


def test_two_variants_that_run_the_same_code_are_not_called_faster_than_each_other(tiny_run):
    """On this CPU the Triton role (FlexAttention) is left out and every backend that ran reads no
    variant config: each was measured once per shape, the report says so and claims no variant
    faster, nothing in bold."""
    directory, config = tiny_run
    report = (directory / "results" / config["run"] / "report.md").read_text()
    results = report.split("### Results")[1].split("### Analysis")[0]
    assert "**Measured once per shape**: Native (`native`), SDPA (`sdpa`) read no variant config" in results
    assert "**Same code in every variant**" not in results  # one figure shown twice is no comparison
    tables = [line for line in results.splitlines() if line.startswith("| (")]
    assert tables and not any("**" in line for line in tables)
    improvements = results.split("**Key Improvements**:")[1]
    assert "faster" not in improvements and "now" not in improvements and "**" not in improvements
    assert "| **" not in report.split("winner per sequence length")[1].split("---")[0]


def test_results_csv_has_a_row_per_cell_with_the_analysis_figures(tiny_run):
    directory, config = tiny_run
    run_dir = directory / "results" / config["run"]
    collected = json.loads((run_dir / "results.json").read_text())
    rows = list(csv.DictReader((run_dir / "results.csv").open()))
    assert len(rows) == sum(len(r["backends"]) for r in shown(collected)["results"])  # every table row
    # Native reads no variant config: measured once per shape, in the first variant's job; the
    # tuned table shows it, and so does its row, marked as that one measurement.
    tuned = [r for r in rows if r["variant"] == "tuned" and r["backend"] == "native"]
    assert tuned and all(r["measured_in"] == "default" for r in tuned)
    assert len([r for r in rows if r["measured_in"] == ""]) == sum(len(r["backends"]) for r in collected["results"])
    native = next(r for r in rows if r["variant"] == "default" and r["shape_id"] == "b1-s64-h2-d32"
                  and r["backend"] == "native")
    result = next(r for r in collected["results"] if r["variant"] == "default" and r["shape_id"] == "b1-s64-h2-d32")
    figure = result["backends"]["native"]["stats"]["wall_mean_ms"]
    assert native["metric"] == "wall_mean_ms" and float(native["median_ms"]) == figure["median"]
    assert native["role"] == "baseline" and native["status"] == "ok" and native["seq"] == "64"
    assert native["interval"].startswith("95% CI from the trials of one process")  # a CPU run: 1 process


def test_results_json_holds_the_reports_findings_valid_against_their_schema(tiny_run):
    directory, config = tiny_run
    collected = json.loads((directory / "results" / config["run"] / "results.json").read_text())
    schema = json.loads((REPO / "workflow" / "schemas" / "run_summary.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(collected["summary"])
    report = (directory / "results" / config["run"] / "report.md").read_text()
    decided = collected["summary"]["decided"]
    assert f"**Decided in this run**: {decided['answered']} of the {decided['asked']} questions" in report
    assert len(collected["summary"]["fastest"]) == len(shown(collected)["results"])


def test_each_result_names_the_patched_config_it_measured(tiny_run):
    directory, config = tiny_run
    for variant in ("default", "tuned"):
        patched = directory / "results" / config["run"] / "aiter-config" / f"{variant}.json"
        result = json.loads((directory / "results" / config["run"] / variant / "b1-s64-h2-d32.json").read_text())
        assert result["kernel_config"]["sha256"] == file_sha256(patched)
        assert result["kernel_config"]["values"] == config["variants"][variant]["triton"]
        assert result["provenance"]["project_commit"] not in (None, "", "unknown")


def test_second_run_has_nothing_to_do(tiny_run):
    directory, config = tiny_run
    proc = snakemake(directory, "--cores", "1", "report", config=config)
    assert proc.returncode == 0
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_how_jobs_are_measured_does_not_make_a_finished_run_stale(tiny_run):
    """A Slurm plan measures in isolate mode where the run was made by workers (issue 40): the mode,
    the workers' idle time and the timeout say how a job is measured, not what: nothing is measured
    again (the run's resolved config, which records them, is written again, and its report)."""
    directory, config = tiny_run
    measure = {**config.get("measure", {}), "mode": "isolate", "worker_idle_s": 7, "job_timeout_s": 999}
    proc = snakemake(directory, "-n", "report", config={**config, "measure": measure})
    assert proc.returncode == 0, proc.stderr
    assert not {"measure", "merge", "collect"} & set(planned_jobs(proc)), proc.stdout[-3000:]


def test_a_title_change_rerenders_without_rerunning_benchmarks(tiny_run):
    directory, config = tiny_run
    config = json.loads(json.dumps(config))
    config["variants"]["tuned"]["title"] = "After tuning, renamed"
    proc = snakemake(directory, "-n", "report", config=config)
    assert proc.returncode == 0, proc.stderr
    # One host job re-renders (rule write_report: merge, collect, plots, report, resolved config).
    assert planned_jobs(proc) == {"write_report": 1, "report": 1}


def test_adding_a_shape_plans_exactly_the_new_jobs(tiny_run):
    directory, config = tiny_run
    config = json.loads(json.dumps(config))
    config["shapes"].append({"batch": 1, "seq": 96, "heads": 2, "head_dim": 32})
    proc = snakemake(directory, "-n", "report", config=config)
    assert proc.returncode == 0, proc.stderr
    # One measuring process per job on this CPU (cpu.repeats 1); the resolved config lists the shape.
    assert planned_jobs(proc) == {"measure": 2 * config["cpu"]["repeats"], "write_report": 1, "report": 1}
    new = {path for line in proc.stdout.splitlines() if line.strip().startswith("output: results/")
           for path in line.strip().removeprefix("output: ").split(", ")}
    assert {p for p in new if p.endswith("b1-s96-h2-d32.json")} == {
        f"results/tiny/{v}/b1-s96-h2-d32.json" for v in ("default", "tuned")}


def test_changing_the_iterations_plans_every_benchmark_job(tiny_run):
    """The CPU's own count: the top-level iters is a GPU's, and changing it re-measures nothing here
    (tests/test_job_cache_key.py)."""
    directory, config = tiny_run
    proc = snakemake(directory, "-n", "report", config={**config, "cpu": {**config["cpu"], "iters": 3}})
    assert proc.returncode == 0, proc.stderr
    assert planned_jobs(proc)["write_report"] == 1 and planned_jobs(proc)["measure"] == 4 * config["cpu"]["repeats"]


def test_a_deleted_result_is_merged_again_and_a_deleted_process_measured_again(tiny_run):
    directory, config = tiny_run
    result = directory / "results" / "tiny" / "tuned" / "b1-s64-h2-d32.json"
    process = directory / "results" / "tiny" / "tuned" / "b1-s64-h2-d32" / "process-0.json"
    kept = {path: path.read_bytes() for path in (result, process)}
    try:
        result.unlink()
        proc = snakemake(directory, "-n", "report", config=config)
        assert proc.returncode == 0, proc.stderr
        # The processes' measurements are kept: only the host job that merges them re-runs.
        assert planned_jobs(proc) == {"write_report": 1, "report": 1}
        process.unlink()
        proc = snakemake(directory, "-n", "report", config=config)
        assert proc.returncode == 0, proc.stderr
        assert planned_jobs(proc) == {"measure": 1, "write_report": 1, "report": 1}
    finally:
        for path, data in kept.items():
            path.write_bytes(data)  # the module's later tests need the finished run


def test_the_processes_of_a_job_run_in_rounds_across_the_run(tmp_path):
    """Process 0 of every job before process 1 of any: the processes of one cell lie apart in time.
    With cpu.repeats 1 a CPU run plans one process per job; a run planned for a GPU that its jobs
    do not find (FABENCH_PLATFORM=cuda here) has a process 1 that measures nothing, left out of the merge."""
    config = tiny_config(shapes=[{"batch": 1, "seq": 64, "heads": 2, "head_dim": 32},
                                 {"batch": 1, "seq": 128, "heads": 2, "head_dim": 64}])
    config["cpu"] = {**config["cpu"], "repeats": 2}
    proc = snakemake(tmp_path, "--cores", "1", "report", config=config)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    order = [line.split("variant=")[1].strip() for line in proc.stdout.splitlines() + proc.stderr.splitlines()
             if "wildcards:" in line and "process=" in line]
    assert [job.split("process=")[1] for job in order] == ["0"] * 4 + ["1"] * 4, order
    # Each round in the same order of jobs: a cell's processes are a whole round apart.
    assert [job.split(",")[:2] for job in order[:4]] == [job.split(",")[:2] for job in order[4:]], order
    result = json.loads((tmp_path / "results" / "tiny" / "default" / "b1-s64-h2-d32.json").read_text())
    assert [p["index"] for p in result["method"]["process_exits"]] == [0, 1]
    assert sorted({t["process"] for t in result["backends"]["native"]["trials"]}) == [0, 1]

    config["cpu"] = {**config["cpu"], "repeats": 1}
    config["run"] = "tiny-one"
    proc = snakemake(tmp_path, "-n", "report", config=config)
    assert planned_jobs(proc)["measure"] == 4, proc.stdout  # one process per job: no process doing nothing

    config["shapes"] = config["shapes"][:1]
    proc = snakemake(tmp_path, "--cores", "1", "report", config=config, env={"FABENCH_PLATFORM": "cuda"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "results" / "tiny-one" / "default" / "b1-s64-h2-d32.json").read_text())
    assert [p["index"] for p in result["method"]["process_exits"]] == [0]
    assert {t["process"] for t in result["backends"]["native"]["trials"]} == {0}
    skipped = json.loads((tmp_path / "results" / "tiny-one" / "default" / "b1-s64-h2-d32" / "process-1.json").read_text())
    assert "not needed" in skipped["_skipped"]


def test_a_failing_backend_leaves_the_run_and_report_whole(tmp_path):
    config = tiny_config(tolerance={"max_abs_err": 1e-5, "min_cosine": 0.999},
                         shapes=[{"batch": 1, "seq": 64, "heads": 2, "head_dim": 32}], variants={
                             "only": {"title": "Only variant", "triton": {"BLOCK_M": 64, "BLOCK_N": 32}}})
    proc = snakemake(tmp_path, "--cores", "1", "report", config=config)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (tmp_path / "results" / "tiny" / "report.md").read_text()
    assert "| (1, 64, 2, 32) | " in report and "| failed: wrong result [1] |" in report
    assert "wrong numbers: max abs err" in report and "(tolerance 1e-05)" in report
    assert "### Appendix: Full Benchmark Output" in report  # the rest of the report is whole


def test_a_checkout_path_with_a_space_and_a_published_path_with_a_command(tmp_path):
    """No value from the file system or the config reaches a shell unquoted; the report keeps the
    config's variant order (stock before autotuned), whatever the alphabet says."""
    checkout = tmp_path / "a checkout"
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard"], check=True,
                           capture_output=True, text=True).stdout.split("\n")
    for name in filter(None, files):
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        if (REPO / name).is_symlink():  # as a clone makes it (src/fabench/schemas)
            (checkout / name).symlink_to(os.readlink(REPO / name))
        elif (REPO / name).is_file():
            shutil.copy2(REPO / name, checkout / name)
    published = "report/published/$(touch INJECTED).yaml"
    shutil.copy(REPO / "report/published/mi300x-2025-12-30.yaml", checkout / published)
    work = tmp_path / "work dir"
    work.mkdir()
    variants = {"stock": {"title": "Stock", "triton": {"BLOCK_M": 128}},
                "autotuned": {"title": "Autotuned", "triton": {"BLOCK_M": 64}}}
    config = tiny_config(shapes=[{"batch": 1, "seq": 64, "heads": 2, "head_dim": 32}], published=published,
                         variants=variants)
    proc = snakemake(work, "--cores", "1", "report", config=config, snakefile=checkout / "Snakefile")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not list(tmp_path.rglob("INJECTED")) and not list(REPO.glob("INJECTED"))
    report = (work / "results" / "tiny" / "report.md").read_text()
    assert report.index("#### Stock") < report.index("#### Autotuned")
    assert "### Published vs Reproduced" in report


def test_the_cpu_test_config_runs_with_nested_config_values(tmp_path):
    """The tiny CPU config as a user passes it (a partial --configfile), with --config values a
    Snakemake user writes: a run named by digits, one key of a block, a list and a whole collection."""
    from workflow_util import CPU_TEST_CONFIG

    proc = snakemake(tmp_path, "--cores", "1", "report", "--configfile", str(CPU_TEST_CONFIG), "--config",
                     "run=123", "cpu={trials: 3}", "shapes=[{batch: 1, seq: 64, heads: 2, head_dim: 32}]",
                     "variants={only: {title: Only, triton: {BLOCK_M: 64, BLOCK_N: 32}}}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = tmp_path / "results" / "123"
    assert sorted(p.relative_to(run).as_posix() for p in run.glob("*/*.json")) == [
        "aiter-config/only.json", "aiter-config/only.meta.json", "only/b1-s64-h2-d32.json"]
    result = json.loads((run / "only" / "b1-s64-h2-d32.json").read_text())
    assert len(result["backends"]["native"]["trials"]) == 3  # cpu.trials from --config, cpu.iters from the file
    assert result["method"]["iters"] == 2 and result["backends"]["flex"]["status"] == "unavailable"
