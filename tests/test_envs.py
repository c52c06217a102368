"""The locks in envs/: every pin exact and hashed, each covering what its command installs, used by
the README, CI and the Dockerfile, and accepted by pip in hash-checking mode."""

import re
import subprocess
import sys
import tomllib

import pytest

from workflow_util import REPO

ENVS = REPO / "envs"
# lock -> the extras of pyproject.toml it holds
HOST_LOCKS = {"host.txt": ("workflow",), "cpu.txt": ("workflow", "cpu"), "test.txt": ("workflow", "cpu", "test"),
              "gpu.txt": ("workflow", "aiter", "gpu", "fa4")}
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==(?P<version>\S+)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked(lock: str) -> dict[str, str]:
    """name -> version of a lock; every requirement in it pinned with == and at least one hash."""
    text = (ENVS / lock).read_text().replace("\\\n", " ")
    pins = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith(("#", "--find-links")):
            continue
        match = PIN.match(line)
        assert match and "--hash=sha256:" in line, f"{lock}: not an exact, hashed pin: {line[:80]}"
        pins[canonical(match["name"])] = match["version"]
    return pins


def wanted(extras: tuple[str, ...]) -> dict[str, str]:
    """The project's own pins for these extras (fabench[...] references followed)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins, todo = {}, list(extras)
    while todo:
        for requirement in project["optional-dependencies"][todo.pop()]:
            if requirement.startswith("fabench["):
                todo += requirement[len("fabench["):-1].split(",")
                continue
            match = PIN.match(requirement)
            pins[canonical(match["name"])] = match["version"]
    return pins


@pytest.mark.parametrize("lock", sorted(HOST_LOCKS))
def test_a_host_lock_holds_every_pin_of_its_extras(lock):
    pins = locked(lock)
    for name, version in wanted(HOST_LOCKS[lock]).items():
        assert pins.get(name, "").split("+")[0] == version, f"{lock}: {name} {pins.get(name)} != {version}"
    for requirement in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]:
        assert canonical(re.split(r"[<>=!~ ]", requirement)[0]) in pins


def test_the_host_locks_agree_and_the_cpu_ones_take_the_cpu_torch():
    test = locked("test.txt")
    for lock in ("host.txt", "cpu.txt"):
        assert {name: test[name] for name in locked(lock)} == locked(lock)
    shared = set(locked("gpu.txt")) & set(test)  # NVML is in the GPU lock alone
    assert {name: test[name] for name in shared} == {name: locked("gpu.txt")[name] for name in shared}
    assert "torch" not in locked("gpu.txt") and "amd-aiter" in locked("gpu.txt")
    # FlashAttention-4 (NVIDIA's CuTe DSL, 92 MB of CUDA 13 libraries) is for a GPU host alone.
    assert "flash-attn-4" in locked("gpu.txt") and "nvidia-cutlass-dsl-libs-cu13" in locked("gpu.txt")
    for lock in ("host.txt", "cpu.txt", "test.txt"):
        assert not {"flash-attn-4", "nvidia-cutlass-dsl"} & set(locked(lock)), lock
    assert locked("cpu.txt")["torch"] == test["torch"] == "2.13.0+cpu"
    assert "torch" not in locked("host.txt")  # a GPU host keeps its own build
    assert "--find-links /opt/wheels" in (ENVS / "cpu.txt").read_text()


@pytest.mark.parametrize("layer", ["image-aiter", "image-aiter-index", "image-package"])
def test_the_image_locks_hold_their_inputs_and_the_dockerfile_installs_them(layer):
    pins = locked(f"{layer}.txt")
    for line in (ENVS / f"{layer}.in").read_text().splitlines():
        if line and not line.startswith("#"):
            match = PIN.match(line)
            assert pins[canonical(match["name"])] == match["version"]
    dockerfile = (REPO / "Dockerfile").read_text()
    assert f"pip install --require-hashes -r /opt/fabench/envs/{layer}.txt" in dockerfile
    assert f"!envs/{layer}.txt" in (REPO / ".dockerignore").read_text()


def test_the_readme_and_ci_install_the_locks():
    readme, ci = (REPO / "README.md").read_text(), (REPO / ".ci" / "run").read_text()
    assert "pip install -r envs/cpu.txt && pip install --no-deps -e . && snakemake --cores 1 report" in readme
    command = "pip install -r envs/test.txt && pip install --no-deps -e . && python -m pytest"
    assert command in readme and command in ci
    assert "bash envs/refresh.sh" in readme


# What the documented commands need beyond the workflow, each by the command the docs show: every host
# lock holds it (pyproject's `workflow` extra), so the environment the README installs runs them all.
DOCUMENTED_TOOLS = {"snakemake-executor-plugin-slurm": "snakemake -n --profile profiles/slurm",
                    "pygments": "snakemake --report report.html",
                    "pandas": "pandas.read_csv"}


@pytest.mark.parametrize("lock", ["cpu.txt", "host.txt", "gpu.txt"])
@pytest.mark.parametrize("tool", sorted(DOCUMENTED_TOOLS))
def test_each_documented_command_has_its_tool_in_every_host_lock(tool, lock):
    assert tool in locked(lock), f"{lock} lacks {tool}, which `{DOCUMENTED_TOOLS[tool]}` needs"
    docs = (REPO / "README.md").read_text() + "".join(p.read_text() for p in (REPO / "docs").glob("*.md"))
    assert DOCUMENTED_TOOLS[tool] in docs  # the command this pin is for is still the one documented


@pytest.mark.slow
@pytest.mark.parametrize("lock", sorted(HOST_LOCKS))
def test_pip_accepts_a_host_lock_whole_in_hash_checking_mode(lock, tmp_path):
    """pip resolves the lock alone, every dependency in it and every hash matching (nothing installed).
    gpu.txt goes over a host's own torch (FlashAttention-4 requires one, the lock never pins it): its
    dry run counts this environment's torch as installed. Blind side: the GPU host's torch is not this one."""
    keep_torch = [] if lock == "gpu.txt" else ["--ignore-installed"]
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", *keep_torch,
                           "--require-hashes", "--quiet", "--timeout", "60", "--retries", "2",
                           "--report", str(tmp_path / "plan.json"), "-r", str(ENVS / lock)],
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
