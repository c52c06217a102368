"""Shared pytest fixtures.

Docker fixtures (tests marked ``docker``): a real engine, no mocks.

* ``docker_host``: the engine named by ``DOCKER_HOST`` when it answers; else one this session
  starts (``support.docker_engine``, needs root and dockerd) and stops at the end.  When no
  engine can be had, docker tests are skipped with the reason, or FAIL when the environment
  sets ``FABENCH_REQUIRE_DOCKER=1`` (CI does).
* ``cpu_base_image``: the local Debian + CPU torch base (tools/make-cpu-base-image.sh), made
  once and then reused from the engine's image store.
* ``cpu_image``: this project's Dockerfile built on that base with the package-index aiter; its manifest.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CPU_BASE_IMAGE = os.environ.get("FABENCH_CPU_BASE_IMAGE", "fabench-cpu-base:bookworm-torch2.13")
# The same name and build arguments as .test/config-docker/config.yaml, so the end-to-end
# test reuses the image the fixture built.
OLDER_CPU_BASE_IMAGE = "fabench-cpu-base:bookworm-debian-torch"
CPU_IMAGE_NAME = "fabench-test"
# AMD's aiter from the package index and a Triton to import its loader: the config is patched and
# read back inside the image by aiter's own loader.
CPU_BUILD_ARGS = {"BASE_IMAGE": CPU_BASE_IMAGE, "AITER_COMMIT": "", "AITER_FROM_INDEX": "1", "TRITON_VERSION": "3.6.0"}


# The quick tier (`python -m pytest -m quick`, docs/testing.md states its cost): every test but those
# marked slow (the whole workflow; and the tests SLOW_LIST names, measured to cost seconds each:
# real archive stores, measuring processes, Snakemake plans) or needing Docker or Slurm.
NOT_QUICK = ("slow", "docker", "slurm")
SLOW_LIST = Path(__file__).parent / "slow_tests.txt"


def slow_entries() -> list[str]:
    """SLOW_LIST's entries: a test file (tests/test_x.py), or a test in it (tests/test_x.py::test_y,
    every parameter of it)."""
    lines = (line.split("#", 1)[0].strip() for line in SLOW_LIST.read_text().splitlines())
    return [line for line in lines if line]


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection reads the marks
def pytest_collection_modifyitems(config, items):
    entries = slow_entries()
    found = set()
    for item in items:
        name = item.nodeid.split("[", 1)[0]
        hit = next((e for e in entries if e in (name, name.split("::", 1)[0])), None)
        if hit is not None:
            found.add(hit)
            item.add_marker(pytest.mark.slow)
        if not any(item.get_closest_marker(mark) for mark in NOT_QUICK):
            item.add_marker(pytest.mark.quick)
    stale = [e for e in entries if not defined(e)]
    if stale:  # a renamed test would silently join the quick tier's cost
        raise pytest.UsageError(f"{SLOW_LIST.name} names tests that do not exist: {', '.join(stale)}")


def defined(entry: str) -> bool:
    """Whether SLOW_LIST's entry names an existing test file, or a test defined in one."""
    path, _, test = entry.partition("::")
    source = ROOT / path
    return source.is_file() and (not test or re.search(rf"^\s*(async )?def {re.escape(test)}\(", source.read_text(), re.M) is not None)


def docker_unavailable(reason: str) -> None:
    """Skip, or fail when FABENCH_REQUIRE_DOCKER=1."""
    if os.environ.get("FABENCH_REQUIRE_DOCKER") == "1":
        pytest.fail(f"FABENCH_REQUIRE_DOCKER=1 but no Docker engine: {reason}", pytrace=False)
    pytest.skip(f"no Docker engine: {reason}")


@pytest.fixture(scope="session")
def docker_host():
    try:
        from support import docker_engine as de
    except ImportError as err:  # pragma: no cover - the package itself is missing
        docker_unavailable(f"support.docker_engine: {err}")
    previous = os.environ.get("DOCKER_HOST")
    if previous and de.ping(previous):
        yield previous
        return
    ok, why = de.can_start_engine()
    if not ok:
        docker_unavailable(why if not previous else f"DOCKER_HOST={previous} does not answer and {why}")

    # An engine already started on the shared data root (python -m support.docker_engine start).
    shared = de.DockerEngine()
    if shared.running():
        os.environ["DOCKER_HOST"] = shared.docker_host
        yield shared.docker_host
        _restore_env("DOCKER_HOST", previous)
        return

    state_dir = Path(tempfile.mkdtemp(prefix="fbd-", dir="/tmp"))  # short: socket path limit
    engine = de.DockerEngine(state_dir=state_dir)  # shared data root: images are reused
    try:
        host = engine.start()
    except de.EngineError as err:
        if "in use by another engine" not in str(err):
            docker_unavailable(str(err))
        # the shared data root is taken by an engine we cannot reach: use a private one
        engine = de.DockerEngine(state_dir=state_dir, data_root=state_dir / "data")
        try:
            host = engine.start()
        except de.EngineError as err2:
            docker_unavailable(str(err2))
    os.environ["DOCKER_HOST"] = host
    try:
        yield host
    finally:
        left = engine.stop()
        _restore_env("DOCKER_HOST", previous)
        if not left:
            shutil.rmtree(state_dir, ignore_errors=True)
        if left:
            pytest.fail(f"still mounted after the engine stopped: {left}", pytrace=False)


def _restore_env(key: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value


@pytest.fixture(scope="session")
def docker_client(docker_host):
    import docker

    cli = docker.DockerClient(base_url=docker_host, timeout=600)
    yield cli
    cli.close()


def make_base_image(docker_client, docker_host: str, tag: str, torch_source: str | None = None):
    """A local Debian + CPU torch base image (tools/make-cpu-base-image.sh), made once, then reused
    from the engine's image store. `torch_source` "debian" takes Debian's own older torch."""
    import docker

    try:
        return docker_client.images.get(tag)
    except docker.errors.ImageNotFound:
        pass
    script = ROOT / "tools" / "make-cpu-base-image.sh"
    env = {**os.environ, "DOCKER_HOST": docker_host, **({"TORCH_WHEEL": torch_source} if torch_source else {})}
    proc = subprocess.run(["bash", str(script), tag], capture_output=True, text=True, env=env, timeout=1200)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        if "is not installed" in tail or "no torch wheel" in tail or "needs root" in tail:
            docker_unavailable(f"cannot make {tag}: {tail.splitlines()[-1]}")
        pytest.fail(f"{script} failed:\n{tail}", pytrace=False)
    return docker_client.images.get(tag)


@pytest.fixture(scope="session")
def cpu_base_image(docker_host, docker_client):
    return make_base_image(docker_client, docker_host, CPU_BASE_IMAGE)


@pytest.fixture(scope="session")
def older_cpu_base_image(docker_host, docker_client):
    """A second base image with another torch (Debian's 1.13), standing in for another ROCm release."""
    return make_base_image(docker_client, docker_host, OLDER_CPU_BASE_IMAGE, torch_source="debian")


@pytest.fixture(scope="session")
def cpu_image(cpu_base_image, tmp_path_factory):
    """Our Dockerfile on the CPU base, built (layers may come from the cache) in this session."""
    from fabench.container.image import build_image

    out = tmp_path_factory.mktemp("cpu-image")
    manifest, log = out / "manifest.json", out / "build.log"
    data = build_image(ROOT / "Dockerfile", ROOT, CPU_BUILD_ARGS, manifest, log, name=CPU_IMAGE_NAME,
                       force=True)
    return {"manifest": manifest, "log": log, "data": data}
