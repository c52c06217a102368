"""The commands the README and docs show, run as a new user runs them after the README's first
command (`snakemake --cores 1 report`), here on the CPU test experiment: each works in the
environment the README installs (its tools are in every host lock: tests/test_envs.py)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys

import pandas
import pytest

from workflow_util import REPO, planned_jobs, report_run, snakemake, tiny_config


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """The README's first command, on the CPU test experiment: the report target only."""
    directory = tmp_path_factory.mktemp("first-run")
    config = tiny_config()
    report_run(directory, config)
    return directory, directory / "results" / config["run"]


def test_archive_store_accepts_a_run_made_by_the_report_target(first_run):
    directory, run_dir = first_run
    assert (run_dir / "config.json").is_file()  # the resolved config, written with the report
    proc = subprocess.run([sys.executable, "-m", "fabench.cli", "archive", "store", str(run_dir), "--root",
                           str(directory / "archive")], cwd=directory, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    entry = directory / proc.stdout.strip().splitlines()[-1]
    assert (entry / "config.json").is_file() and (entry / "SHA256SUMS").is_file()


def test_snakemakes_html_report_is_made_from_the_first_run(first_run):
    directory, _ = first_run
    proc = snakemake(directory, "--report", "report.html", "report", "--configfile", str(directory / "config.yaml"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (directory / "report.html").stat().st_size > 10_000


def test_results_csv_reads_with_pandas(first_run):
    _, run_dir = first_run
    table = pandas.read_csv(run_dir / "results.csv")
    assert len(table) > 0 and {"variant", "backend"} <= set(table.columns)


def test_the_slurm_profiles_dry_run_plans_the_measure_jobs(tmp_path):
    proc = snakemake(tmp_path, "-n", "--profile", str(REPO / "profiles" / "slurm"), "report")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert planned_jobs(proc)["measure"] > 0


def test_the_readme_is_read_in_minutes_and_every_page_it_points_to_exists():
    readme = (REPO / "README.md").read_text()
    assert len(readme.split()) <= 1500
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert links and all((REPO / link).exists() for link in links), [l for l in links if not (REPO / l).exists()]
    for page in (REPO / "docs").glob("*.md"):  # the docs' links to each other too
        for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / link).exists(), f"{page.name}: {link}"


@pytest.mark.slow
def test_the_preview_writes_every_section_and_says_it_is_a_preview(tmp_path):
    """The README's quick look, as documented: config/preview.yaml on top of config.yaml."""
    proc = snakemake(tmp_path, "--cores", "1", "report", "--configfile", str(REPO / "config" / "preview.yaml"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = (tmp_path / "results" / "preview" / "report.md").read_text()
    assert "**This is a preview**" in report.split("### Environment Setup")[0]
    headings = set(re.findall(r"^### (.+)$", report, re.M))
    assert {"Results", "Published vs Reproduced", "Correctness", "Device Timing and TFLOP/s",
            "Where the run's time went", "How precise is this run", "Figures",
            "Appendix: Full Benchmark Output", "The Published Claims, Re-tested"} <= headings
    table = pandas.read_csv(tmp_path / "results" / "preview" / "results.csv")
    assert table["shape_id"].nunique() == 2


def test_a_command_line_count_a_cpu_run_does_not_use_is_warned_in_one_line(tmp_path):
    """docs/usage.md's `--config run=quick iters=20`: on a CPU the cpu block's counts apply."""
    proc = snakemake(tmp_path, "-n", "--cores", "1", "report", "--config", "run=quick", "iters=20",
                     config=tiny_config(), env={"FABENCH_PLATFORM": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    [line] = [line for line in proc.stderr.splitlines() if line.startswith("warning: on a CPU")]
    assert "iters=20 (used: cpu.iters=2)" in line
    quiet = snakemake(tmp_path, "-n", "--cores", "1", "report", "--config", "iters=2", config=tiny_config(),
                      env={"FABENCH_PLATFORM": "cpu"})
    assert "warning: on a CPU" not in quiet.stderr


def readme_commands(section: str) -> list[list[str]]:
    """The commands of the README section's bash blocks, in order, comments dropped."""
    text = (REPO / "README.md").read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", body, re.S)
    return [shlex.split(part, comments=True) for block in blocks for line in block.splitlines() if line.strip()
            for part in line.split(" && ")]


@pytest.mark.slow
def test_the_readme_alone_makes_a_second_run_archives_compares_and_gates(first_run, tmp_path):
    """Issue 40: a new user's second run, archive, compare and CI gate, typed from the README as it
    is written, after the first run (here the CPU test experiment, whose platform label is the one
    the README shows). Each command works; the store of a run already archived says so by exit 5."""
    directory = tmp_path / "work"
    shutil.copytree(first_run[0], directory, symlinks=True)
    commands = readme_commands("A second run, keep it, and compare")
    assert [c[:2] for c in commands][:2] == [["snakemake", "--cores"], ["snakemake", "--cores"]]
    assert "run=local2" in commands[0]
    # compare: 0, 3 on a regression or 4 with too few cells judged (a CPU's noise decides which)
    expected = {"archive store": 5, "compare": None}
    for command in commands:
        if command[0] == "snakemake":
            proc = snakemake(directory, *command[1:], config=tiny_config())
            want = 0
        elif command[0] == "mkdir":
            proc = subprocess.run(command, cwd=directory, capture_output=True, text=True, timeout=60)
            want = 0
        else:
            proc = subprocess.run([sys.executable, "-m", "fabench.cli", *command[1:]], cwd=directory,
                                  capture_output=True, text=True, timeout=300)
            want = expected[" ".join(command[1:3]) if command[1] == "archive" else command[1]]
        if want is None:
            assert proc.returncode in (0, 3, 4), proc.stderr[-3000:]
            assert re.search(r"fabench compare: 2 archived runs; .* cells judged", proc.stderr), proc.stderr
        else:
            assert proc.returncode == want, (command, proc.stdout[-2000:] + proc.stderr[-3000:])
    assert (directory / "results" / "local2" / "report.md").is_file() and (directory / "compare" / "ci.md").is_file()
    ignored = subprocess.run(["git", "check-ignore", "-q", "compare/ci.md"], cwd=REPO, timeout=60)
    assert ignored.returncode == 0  # the CI example's page is not left in the checkout as untracked
    assert (directory / "report.html").stat().st_size > 10_000
