"""The commands the README and docs show, run as a new user runs them after the README's first
command (`snakemake --cores 1 report`), here on the CPU test experiment: each works in the
environment the README installs (its tools are in every host lock: tests/test_envs.py)."""

from __future__ import annotations

import re
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
