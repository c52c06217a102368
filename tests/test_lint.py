"""The workflow's own style checks, as CI runs them: snakemake --lint and snakefmt --check."""

import re
import subprocess
import sys

from workflow_util import REPO

# Snakemake asks every rule for a conda environment or container. Neither can be exercised where
# this project runs (no conda channel or apptainer is reachable from its machines), and a
# directive that nothing exercises only pretends: the rules' software is this package, installed
# with its pinned dependencies by `pip install -e '.[workflow]'` (pyproject.toml).
ACCEPTED_LINTS = {"Specify a conda environment or container for each rule."}


def test_snakemake_lint_finds_nothing_else():
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--lint"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    output = proc.stdout + proc.stderr
    lints = set(re.findall(r"^\s+\* (.+?):$", output, re.MULTILINE))
    assert lints <= ACCEPTED_LINTS, output
    assert "Traceback" not in output


def test_snakefmt_leaves_every_snakemake_file_as_it_is():
    proc = subprocess.run([sys.executable, "-m", "snakefmt", "--check", "Snakefile", "workflow"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
