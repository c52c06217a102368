"""A non-editable install finds its templates and schemas through the package: `pip install .` into a
fresh virtual environment, then the commands that render, run from a folder outside the checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ARCHIVE = REPO / "examples" / "h200" / "archive"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv (reusing this interpreter's installed dependencies) with fabench pip-installed
    from the checkout, not editable: its python."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    # What a source distribution holds, copied, so that the build leaves nothing in the checkout.
    build = tmp_path_factory.mktemp("build")
    shutil.copy(REPO / "pyproject.toml", build)
    shutil.copytree(REPO / "src", build / "src", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(REPO / "workflow" / "schemas", build / "workflow" / "schemas")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                    "--no-build-isolation", "--no-cache-dir", str(build)],
                   check=True, capture_output=True, text=True, timeout=600, cwd=build,
                   env={**os.environ, "TMPDIR": str(build)})
    return python


def run_outside(program: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The installed interpreter or command, with nothing of the checkout on its path."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run([str(program), *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env)


def test_the_installed_package_is_not_the_checkout(installed, tmp_path):
    proc = run_outside(installed, tmp_path, "-c",
                       "import fabench, fabench.resources as r; print(fabench.__file__); print(r.SCHEMA_DIR)")
    assert proc.returncode == 0, proc.stderr
    package, schemas = proc.stdout.split()
    assert not Path(package).is_relative_to(REPO) and "site-packages" in package
    assert {p.name for p in Path(schemas).iterdir()} == {"config.schema.yaml", "result.schema.json",
                                                          "published.schema.yaml"}


def test_compare_renders_from_a_non_editable_install(installed, tmp_path):
    proc = run_outside(installed.parent / "fabench", tmp_path, "compare", "--root", str(ARCHIVE),
                       "--out-md", "compare.md", "--out-json", "compare.json")
    assert proc.returncode == 0, proc.stderr
    markdown = (tmp_path / "compare.md").read_text()
    assert markdown.startswith("#") and "| Config (B,S,H,D) |" in markdown


def test_detector_check_renders_from_a_non_editable_install(installed, tmp_path):
    proc = run_outside(installed.parent / "fabench", tmp_path, "detector-check", "--root", str(ARCHIVE),
                       "--out-md", "detector.md")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "detector.md").read_text().strip()


def test_the_result_schema_of_an_install_is_the_checkouts(installed, tmp_path):
    proc = run_outside(installed, tmp_path, "-c",
                       "from fabench.results.collect import result_schema; import json; "
                       "print(json.dumps(result_schema(), sort_keys=True))")
    assert proc.returncode == 0, proc.stderr
    checkout = (REPO / "workflow" / "schemas" / "result.schema.json").read_text()
    assert json.loads(proc.stdout) == json.loads(checkout)
