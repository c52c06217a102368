"""A non-editable install finds its templates and schemas through the package: `pip install .` into a
fresh virtual environment, then the commands that render, run from a folder outside the checkout."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ARCHIVE = REPO / "examples" / "h200" / "archive"


def build_backend_missing() -> str | None:
    """Why this environment cannot build the package without isolation, or None. setuptools builds
    wheels itself from 70.1 on; before that it needs the `wheel` package (envs/test.txt locks a
    setuptools that needs none)."""
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return "setuptools is not installed here (envs/test.txt installs it)"
    if tuple(int(part) for part in re.findall(r"\d+", version)[:2]) < (70, 1) and importlib.util.find_spec("wheel") is None:
        return f"setuptools {version} needs the wheel package to build, and it is not installed (envs/test.txt has a newer setuptools)"
    return None


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with fabench pip-installed from the checkout, not editable: its python. Its other
    packages are this environment's own, named in a .pth file, and not the base interpreter's (which
    system_site_packages would give: in a venv made by `python3 -m venv` that is a bare Python)."""
    if reason := build_backend_missing():
        pytest.skip(reason)
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # Lines of a .pth file are added after the venv's own site-packages, and .pth files found in them are
    # not run: this environment's editable fabench stays out, its dependencies and setuptools come in.
    (Path(purelib) / "this-environment.pth").write_text("".join(f"{path}\n" for path in site.getsitepackages()))
    # What a source distribution holds, copied, so that the build leaves nothing in the checkout.
    build = tmp_path_factory.mktemp("build")
    shutil.copy(REPO / "pyproject.toml", build)
    shutil.copytree(REPO / "src", build / "src", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(REPO / "workflow" / "schemas", build / "workflow" / "schemas")
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                           "--no-build-isolation", "--no-cache-dir", str(build)],
                          capture_output=True, text=True, timeout=600, cwd=build,
                          env={**os.environ, "TMPDIR": str(build)})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
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
    shipped = {p.name for p in (REPO / "workflow" / "schemas").iterdir()}
    assert {p.name for p in Path(schemas).iterdir()} == shipped >= {"config.schema.yaml", "result.schema.json",
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
