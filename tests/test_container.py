"""The docker runtime against a real engine: image build + manifest, config patch, job runs.

Needs root + dockerd (or a DOCKER_HOST that answers); see tests/conftest.py. The first session
on a machine makes the CPU base image (~1 min); later ones reuse it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from fabench.container import image as fc
from fabench.container import recipe
from fabench.container import job as fj
from fabench.aiter_config import sidecar_path
from fabench.container.aiter_image import patch_from_image
from workflow_util import snakemake

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
FULL_SHA = re.compile(r"^[0-9a-f]{40}$")

# aiter's gfx942 MHA config as of the report (its "fwd" sections; values from the report).
FAKE_AITER_CONFIG = {
    "fwd": {
        "default": {"BLOCK_M": 128, "BLOCK_N": 64, "PRELOAD_V": False, "waves_per_eu": 2,
                    "num_warps": 4, "num_ctas": 1, "num_stages": 1},
        "dropout_or_fp32": {"BLOCK_M": 32, "BLOCK_N": 32, "PRELOAD_V": False, "waves_per_eu": 1,
                            "num_warps": 2, "num_ctas": 1, "num_stages": 1},
    }
}

# Run in the job container instead of fabench.measure: reports what a job sees there.
PROBE = '''
import argparse, hashlib, json, os, sys, time
p = argparse.ArgumentParser()
p.add_argument("--out")
p.add_argument("--aiter-config")
p.add_argument("--sleep", type=float, default=0)
p.add_argument("--fail", action="store_true")
a = p.parse_args()
def sha(path):
    try:
        return hashlib.sha256(open(path, "rb").read()).hexdigest()
    except OSError as e:
        return repr(e)
mount = os.environ.get("FABENCH_AITER_CONFIG_MOUNT")
print("probe: started", flush=True)
if a.sleep:
    time.sleep(a.sleep)
if a.fail:
    for i in range(50):
        print(f"probe: line {i}")
    print("probe: the last words", flush=True)
    sys.exit(3)
out = {"uid": os.getuid(), "gid": os.getgid(), "cwd": os.getcwd(),
       "env": {k: v for k, v in os.environ.items() if k.startswith(("FABENCH_", "HOME", "TRITON_", "AITER_"))},
       "aiter_config_arg": a.aiter_config, "aiter_config_sha256": sha(a.aiter_config),
       "mount": mount, "mount_sha256": sha(mount) if mount else None,
       "mount_writable": os.access(mount, os.W_OK) if mount else None,
       "home_writable": os.access(os.environ["HOME"], os.W_OK)}
os.makedirs(os.path.dirname(a.out), exist_ok=True)
open(a.out, "w").write(json.dumps(out))
print("probe: wrote", a.out, flush=True)
'''

FAKE_DOCKERFILE = """ARG BASE
FROM ${BASE}
COPY fakeaiter /opt/fakeaiter
COPY fabench_probe.py /opt/fakeaiter/fabench_probe.py
ENV PYTHONPATH=/opt/fakeaiter FABENCH_AITER_COMMIT=0000000000000000000000000000000000000000
"""


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def job_containers(cli, tag: str) -> list:
    return cli.containers.list(all=True, filters={"label": [f"fabench.image={tag}", fj.JOB_LABEL]})


def patch(manifest: Path, overrides: dict, out: Path) -> dict:
    """patch_from_image as the workflow calls it: the sidecar where run-job looks for it."""
    return patch_from_image(manifest, overrides, out, sidecar_path(out))


# ---------------------------------------------------------------- no engine needed

def test_image_tag_follows_inputs(tmp_path):
    for name in ("Dockerfile", ".dockerignore", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(SRC, tmp_path / "src", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "workflow" / "schemas", tmp_path / "workflow" / "schemas")
    (tmp_path / "envs").mkdir()
    for lock in ("image-aiter.txt", "image-aiter-index.txt", "image-package.txt"):
        shutil.copy(ROOT / "envs" / lock, tmp_path / "envs" / lock)
    args = {"AITER_COMMIT": ""}
    tag = recipe.image_tag(tmp_path / "Dockerfile", args, context=tmp_path)
    assert re.fullmatch(r"fabench:[0-9a-f]{16}", tag)
    # the same inputs anywhere give the same tag (paths are hashed relative to the context)
    assert tag == recipe.image_tag(ROOT / "Dockerfile", args, context=ROOT)
    (tmp_path / "src" / "fabench" / "__pycache__").mkdir(exist_ok=True)
    (tmp_path / "src" / "fabench" / "__pycache__" / "x.pyc").write_bytes(b"junk")
    assert recipe.image_tag(tmp_path / "Dockerfile", args, context=tmp_path) == tag
    assert recipe.image_tag(tmp_path / "Dockerfile", {"AITER_COMMIT": "x"}, context=tmp_path) != tag
    (tmp_path / "src" / "fabench" / "container.py").write_text("# changed\n", "utf-8")
    changed = recipe.image_tag(tmp_path / "Dockerfile", args, context=tmp_path)
    assert changed != tag
    (tmp_path / "envs" / "image-package.txt").write_text("# another lock\n", "utf-8")
    assert recipe.image_tag(tmp_path / "Dockerfile", args, context=tmp_path) != changed
    assert recipe.manifest_name("fabench:abc") == "fabench_abc.json"


def test_dockerfile_pins_and_legacy_builder():
    text = "\n".join(line for line in (ROOT / "Dockerfile").read_text().splitlines()
                     if not line.lstrip().startswith("#"))
    defaults = recipe.dockerfile_arg_defaults(ROOT / "Dockerfile")
    assert FULL_SHA.match(defaults["AITER_COMMIT"]) and defaults["AITER_COMMIT"].startswith("bfe8107fa6")
    assert defaults["GPU_ARCHS"] == "gfx942"
    assert re.fullmatch(r"\d+\.\d+\.\d+", defaults["TRITON_VERSION"])
    base = defaults["BASE_IMAGE"]
    assert base.startswith("rocm/pytorch:") and not base.endswith(":latest")
    # the legacy builder: no BuildKit-only syntax
    assert not re.search(r"RUN\s+--mount", text)
    assert "<<" not in text
    assert not re.search(r"COPY\s+--chmod", text)
    assert "ENV FABENCH_BASE_IMAGE" in text and "FABENCH_AITER_COMMIT=${AITER_COMMIT}" in text
    # our package is copied last: everything after its first COPY is about it (before it, only the
    # pip layers' locks are copied, so that a change to src/ does not rebuild aiter)
    first_copy = text.index("\nCOPY pyproject.toml ")
    assert "aiter" not in text[first_copy:].lower()
    assert [line.split()[1] for line in text[:first_copy].splitlines() if line.startswith("COPY ")] == [
        "envs/image-aiter.txt"]
    # the package-index aiter is pinned in one place: pyproject's `aiter` extra, locked by envs/refresh.sh
    assert "amd-aiter==" not in text and "envs/image-aiter-index.txt" in text


def test_probe_module_writes_what_the_manifest_needs(tmp_path):
    """The probe as the image runs it, here on the host: the keys the manifest reads."""
    out = tmp_path / "probe.json"
    proc = subprocess.run([sys.executable, "-m", "fabench.container.probe", str(out)], capture_output=True,
                          text=True, env=_env(FABENCH_GPU_ARCHS="gfx942"))
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(out.read_text())
    assert set(seen) >= {"python", "torch", "triton", "aiter", "fabench", "numpy", "rocm", "hip",
                         "aiter_dir", "aiter_mha_config", "env"}
    assert seen["python"] == sys.version.split()[0] and seen["env"]["FABENCH_GPU_ARCHS"] == "gfx942"
    assert subprocess.run([sys.executable, "-m", "fabench.container.probe"], capture_output=True,
                          env=_env()).returncode == 2


# ---------------------------------------------------------------- real engine

@pytest.mark.docker
def test_manifest_is_complete(cpu_image, cpu_base_image, docker_client):
    m = json.loads(cpu_image["manifest"].read_text())
    assert m == cpu_image["data"]
    image = docker_client.images.get(m["tag"])
    assert m["image_id"] == image.id and m["build"]["built"] is True
    assert m["tag"].startswith("fabench-test:")
    assert m["base_image"] == {"ref": m["build"]["build_args"]["BASE_IMAGE"], "id": cpu_base_image.id,
                               "repo_digests": cpu_base_image.attrs.get("RepoDigests") or []}
    for key in ("repo_digests", "aiter_commit", "versions", "build", "aiter_mha_config"):
        assert key in m
    v = m["versions"]
    assert v["python"].startswith("3.11.") and v["torch"].startswith("2.13.0")
    # AMD's aiter from the package index, its config found under its device name (0.1.7's layout)
    assert v["aiter"] == "0.1.7.post2.dev18" and m["aiter_commit"] is None and v["triton"] == "3.6.0"
    assert m["aiter_mha_config"].endswith("/aiter/ops/triton/configs/MI300X-MHA-DEFAULT.json")
    assert set(v) >= {"rocm", "hip", "torch", "triton", "aiter", "python"}
    assert m["build"]["build_args"]["AITER_COMMIT"] == ""
    assert m["build"]["effective_build_args"]["GPU_ARCHS"] == "gfx942"
    assert m["build"]["seconds"] is not None
    assert "Successfully built" in cpu_image["log"].read_text()


@pytest.mark.docker
def test_second_build_is_not_a_rebuild(cpu_image):
    log = cpu_image["log"]
    steps = log.read_text().count("\nStep ")
    again = fc.build_image(ROOT / "Dockerfile", ROOT, {**cpu_image["data"]["build"]["build_args"]},
                           cpu_image["manifest"], log, name="fabench-test")
    assert again["build"]["built"] is False and again["build"]["seconds"] is None
    assert again["image_id"] == cpu_image["data"]["image_id"] and again["tag"] == cpu_image["data"]["tag"]
    assert log.read_text().count("\nStep ") == steps  # no build output added


@pytest.mark.docker
def test_failed_build_raises_with_the_log_tail(cpu_base_image, tmp_path):
    (tmp_path / "Dockerfile").write_text(
        f"FROM {cpu_base_image.id}\nRUN echo the-last-words-of-a-build && exit 7\n")
    (tmp_path / "x").write_text("x")
    with pytest.raises(fc.ContainerError, match="the-last-words-of-a-build"):
        fc.build_image(tmp_path / "Dockerfile", tmp_path, {}, tmp_path / "m.json", tmp_path / "b.log",
                       name="fabench-test-broken", package_paths=["x"])
    assert not (tmp_path / "m.json").exists()
    assert "the-last-words-of-a-build" in (tmp_path / "b.log").read_text()


@pytest.mark.docker
def test_patch_config_from_the_package_index_aiter_in_the_image(cpu_image, tmp_path):
    out = tmp_path / "aiter-config" / "tuned.json"
    info = patch(cpu_image["manifest"], {"BLOCK_M": 64, "PRELOAD_V": True}, out)
    patched = json.loads(out.read_text())
    # merged over aiter's packaged file: the other entries and keys are aiter's own
    assert patched["fwd"]["default"] == {"BLOCK_M": 64, "BLOCK_N": 64, "PRELOAD_V": True, "waves_per_eu": 2,
                                         "num_warps": 4, "num_ctas": 1, "num_stages": 1}
    assert set(patched["fwd"]) >= {"dropout_or_fp32", "pe"} and "bkwd_fused" in patched
    side = json.loads((tmp_path / "aiter-config" / "tuned.meta.json").read_text())
    assert side == info and side["mount_target"] == cpu_image["data"]["aiter_mha_config"]
    assert side["base_sha256"] and side["base_sha256"] != side["patched_sha256"]
    assert side["patched_sha256"] == sha256(out) and side["image_id"] == cpu_image["data"]["image_id"]


@pytest.fixture(scope="module")
def fake_aiter_image(cpu_image, tmp_path_factory):
    """The CPU image plus a stand-in aiter package (its config file only) and a probe module."""
    ctx = tmp_path_factory.mktemp("fake-aiter")
    cfg = ctx / "fakeaiter" / "aiter" / "ops" / "triton" / "configs" / "gfx942-MHA-DEFAULT.json"
    cfg.parent.mkdir(parents=True)
    (ctx / "fakeaiter" / "aiter" / "__init__.py").write_text("raise ImportError('stand-in: not importable')\n")
    cfg.write_text(json.dumps(FAKE_AITER_CONFIG, indent=2))
    (ctx / "fabench_probe.py").write_text(PROBE)
    (ctx / "Dockerfile").write_text(FAKE_DOCKERFILE)
    m = fc.build_image(ctx / "Dockerfile", ctx, {"BASE": cpu_image["data"]["image_id"]}, ctx / "manifest.json",
                       ctx / "build.log", name="fabench-test-fakeaiter", package_paths=["fakeaiter", "fabench_probe.py"])
    return {"manifest": ctx / "manifest.json", "data": m, "config": cfg}


@pytest.mark.docker
def test_patch_config_from_the_image(fake_aiter_image, tmp_path):
    m = fake_aiter_image["data"]
    assert m["aiter_dir"] == "/opt/fakeaiter/aiter"
    assert m["aiter_mha_config"] == "/opt/fakeaiter/aiter/ops/triton/configs/gfx942-MHA-DEFAULT.json"
    assert m["aiter_commit"] == "0" * 40
    out, meta = tmp_path / "tuned.json", tmp_path / "meta" / "tuned.meta.json"
    info = patch_from_image(fake_aiter_image["manifest"], {"BLOCK_M": 64, "BLOCK_N": 32, "PRELOAD_V": True},
                            out, meta)
    patched = json.loads(out.read_text())
    assert patched["fwd"]["default"] == {**FAKE_AITER_CONFIG["fwd"]["default"], "BLOCK_M": 64, "BLOCK_N": 32,
                                         "PRELOAD_V": True}
    assert patched["fwd"]["dropout_or_fp32"] == FAKE_AITER_CONFIG["fwd"]["dropout_or_fp32"]
    side = json.loads(meta.read_text())  # the sidecar goes where it is told (a declared output)
    assert side == info and side["mount_target"] == m["aiter_mha_config"]
    assert side["base_sha256"] == sha256(fake_aiter_image["config"])
    assert side["patched_sha256"] == sha256(out)

    bad = tmp_path / "bad.json"
    with pytest.raises(ValueError) as err:
        patch_from_image(fake_aiter_image["manifest"], {"BLOCK_K": 16, "BLOCK_M": 64}, bad, sidecar_path(bad))
    assert "BLOCK_K" in str(err.value) and "BLOCK_M" not in str(err.value).split("expected")[0]
    assert not bad.exists() and not sidecar_path(bad).exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def _env(**extra) -> dict:
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    return env


@pytest.fixture()
def patched(fake_aiter_image, tmp_path):
    results = tmp_path / "results" / "r1"
    cfg = results / "aiter-config" / "tuned.json"
    patch(fake_aiter_image["manifest"], {"BLOCK_M": 64, "BLOCK_N": 32, "PRELOAD_V": True}, cfg)
    return {"results": results, "config": cfg}


@pytest.mark.docker
def test_run_job_sees_the_patched_config(fake_aiter_image, patched, docker_client, tmp_path):
    m = fake_aiter_image["data"]
    log = tmp_path / "job.log"
    out = patched["results"] / "tuned" / "probe.json"
    code = fj.run_job(fake_aiter_image["manifest"], patched["config"], patched["results"],
                      ["--out", str(out)], log=log, cache_dir=tmp_path / "cache", module="fabench_probe")
    assert code == 0 and out.is_file()
    seen = json.loads(out.read_text())
    assert (seen["uid"], seen["gid"]) == (os.getuid(), os.getgid())
    assert seen["aiter_config_arg"] == fj.CONTAINER_AITER_CONFIG
    assert seen["aiter_config_sha256"] == sha256(patched["config"])
    assert seen["mount"] == m["aiter_mha_config"]
    assert seen["mount_sha256"] == sha256(patched["config"])  # aiter's own file is the patched one
    assert seen["mount_writable"] is False and seen["home_writable"] is True
    assert seen["env"]["FABENCH_RUNTIME"] == "docker"
    assert seen["env"]["FABENCH_IMAGE"] == m["tag"] and seen["env"]["FABENCH_IMAGE_ID"] == m["image_id"]
    assert "probe: wrote" in log.read_text()
    assert job_containers(docker_client, m["tag"]) == []


@pytest.mark.docker
def test_run_job_with_relative_paths_and_the_runner(cpu_image, tmp_path, monkeypatch):
    """The real runner, as the workflow calls it: relative paths under results/<run>."""
    from fabench.measure.spec import job_spec
    from fabench.shapes import shape_id

    monkeypatch.chdir(tmp_path)
    cfg = yaml.safe_load((ROOT / ".test" / "config-docker" / "config.yaml").read_text())
    # the schema's defaults (the timing block, ...), as the workflow fills them in
    validate(cfg, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"), set_default=True)
    results = Path("results") / "t"
    config = results / "aiter-config" / "tuned.json"
    patch(cpu_image["manifest"], cfg["variants"]["tuned"]["triton"], config)
    shape = cfg["shapes"][0]
    # As rule measure, then rule write_report's merge: process 0 into the folder Snakemake makes, then the merge.
    process = results / "tuned" / shape_id(shape) / "process-0.json"
    process.parent.mkdir(parents=True)
    out = results / "tuned" / f"{shape_id(shape)}.json"
    spec = job_spec(cfg, "tuned", shape).to_json()
    proc = subprocess.run([sys.executable, "-m", "fabench.container", "run-job", "--manifest",
                           str(cpu_image["manifest"]), "--aiter-config", str(config), "--results-dir", str(results),
                           "--cache-dir", str(tmp_path / "cache"), "--",
                           "--spec", spec, "--process", "0", "--out", str(process), "--project-commit", "abc123"],
                          capture_output=True, text=True, env=_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert process.stat().st_uid == os.getuid()
    merged = subprocess.run([sys.executable, "-m", "fabench.results.merge", "--out", str(out), str(process)],
                            capture_output=True, text=True, env=_env())
    assert merged.returncode == 0, merged.stdout + merged.stderr
    result = json.loads(out.read_text())
    prov = result["provenance"]
    assert prov["runtime"] == "docker" and prov["image_id"] == cpu_image["data"]["image_id"]
    assert result["kernel_config"]["sha256"] == sha256(config)
    assert result["kernel_config"]["path"] == fj.CONTAINER_AITER_CONFIG
    assert out.stat().st_uid == os.getuid()


@pytest.mark.docker
def test_run_job_failure_raises_with_last_lines(fake_aiter_image, patched, docker_client, tmp_path):
    with pytest.raises(fc.ContainerError) as err:
        fj.run_job(fake_aiter_image["manifest"], patched["config"], patched["results"],
                   ["--out", str(patched["results"] / "x.json"), "--fail"], log=tmp_path / "job.log",
                   cache_dir=tmp_path / "cache", module="fabench_probe")
    assert "exited with 3" in str(err.value) and "probe: the last words" in str(err.value)
    assert "probe: line 0\n" not in str(err.value)  # only the tail
    assert job_containers(docker_client, fake_aiter_image["data"]["tag"]) == []


def start_sleeping_job(manifest: Path, patched: dict, tmp_path: Path, **env) -> tuple[subprocess.Popen, Path]:
    """`python -m fabench.container run-job` with the probe sleeping; returns once it sleeps."""
    log = tmp_path / "job.log"
    proc = subprocess.Popen([sys.executable, "-m", "fabench.container", "run-job", "--manifest", str(manifest),
                             "--aiter-config", str(patched["config"]), "--results-dir", str(patched["results"]),
                             "--log", str(log), "--cache-dir", str(tmp_path / "cache"), "--module", "fabench_probe",
                             "--", "--out", str(patched["results"] / "x.json"), "--sleep", "120"],
                            env=_env(**env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not (log.exists() and "probe: started" in log.read_text()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the job container did not start:\n{proc.communicate()[0]}")
        time.sleep(0.2)
    return proc, log


def stopped_within(proc: subprocess.Popen, seconds: float) -> tuple[int, str]:
    """(exit status, output) of a process expected to end by itself within `seconds`."""
    try:
        output, _ = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"still running after {seconds} s:\n{proc.communicate()[0]}")
    return proc.returncode, output


@pytest.fixture()
def jobs():
    """Processes a test started; any still running at its end (a failed assertion) are killed."""
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.docker
def test_run_job_sigterm_removes_the_container(fake_aiter_image, patched, docker_client, tmp_path, jobs):
    tag = fake_aiter_image["data"]["tag"]
    proc, _ = start_sleeping_job(fake_aiter_image["manifest"], patched, tmp_path)
    jobs.append(proc)
    assert len(job_containers(docker_client, tag)) == 1
    proc.send_signal(signal.SIGTERM)
    rc, output = stopped_within(proc, 60)
    assert rc == 130, output
    assert job_containers(docker_client, tag) == []
    assert not (patched["results"] / "x.json").exists()


@pytest.mark.docker
def test_run_job_stops_when_its_workflow_is_gone(fake_aiter_image, patched, docker_client, tmp_path, jobs):
    """A Snakemake killed with SIGKILL leaves no job container behind (FABENCH_WORKFLOW)."""
    tag = fake_aiter_image["data"]["tag"]
    workflow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    jobs.append(workflow)
    try:
        proc, _ = start_sleeping_job(fake_aiter_image["manifest"], patched, tmp_path,
                                     FABENCH_WORKFLOW=f"{socket.gethostname()}:{workflow.pid}")
        jobs.append(proc)
        time.sleep(3)  # longer than the watchdog's interval: a live workflow keeps its job
        assert proc.poll() is None and len(job_containers(docker_client, tag)) == 1
    finally:
        workflow.kill()
        workflow.wait()  # reaped: a zombie would still count as alive
    rc, output = stopped_within(proc, 60)
    assert rc == 130, output
    assert f"the workflow (pid {workflow.pid}) is gone" in output
    assert job_containers(docker_client, tag) == []
    assert not (patched["results"] / "x.json").exists()


@pytest.mark.docker
@pytest.mark.slow
def test_workflow_end_to_end_in_docker(cpu_image, tmp_path):
    """`snakemake report` with runtime docker: every job ran in the image, on the patched config."""
    work = tmp_path / "work"
    work.mkdir()
    # a complete config of its own (tiny shapes, 1 iteration, the CPU image's build args)
    config = yaml.safe_load((ROOT / ".test" / "config-docker" / "config.yaml").read_text())
    proc = snakemake(work, "--cores", "1", "report", config=config)
    logs = "\n".join(f"== {p}\n{p.read_text()[-3000:]}" for p in sorted((work / "logs").rglob("*.log"))) \
        if (work / "logs").exists() else ""
    assert proc.returncode == 0, proc.stderr[-5000:] + logs
    manifests = list((work / "build" / "images").glob("*.json"))
    assert len(manifests) == 1
    manifest = json.loads(manifests[0].read_text())
    assert manifest["tag"] == cpu_image["data"]["tag"]  # the fixture's image, not another build
    assert manifest["build"]["built"] is False
    run = work / "results" / "docker-small"
    results = sorted(run.glob("*/b*.json"))
    assert {p.parent.name for p in results} == {"default", "tuned"}
    for path in results:
        r = json.loads(path.read_text())
        assert r["provenance"]["runtime"] == "docker"
        assert r["provenance"]["image"] == manifest["tag"]
        assert r["provenance"]["image_id"] == manifest["image_id"]
        # the hash the runner computed inside the container is the patched file's
        patched = run / "aiter-config" / f"{path.parent.name}.json"
        assert r["kernel_config"]["sha256"] == sha256(patched)
        assert r["kernel_config"]["path"] == fj.CONTAINER_AITER_CONFIG
        # aiter's own loader, inside the image, read the patched file back: the variant's entry
        loader = r["kernel_config"]["aiter_loader"]
        assert loader["read_back"] == json.loads(patched.read_text())["fwd"]["default"], loader
        assert loader["asked_for"] == "MI300X-MHA-DEFAULT.json" and loader["aiter"] == "amd-aiter 0.1.7.post2.dev18"
        assert {k: loader["read_back"][k] for k in config["variants"][path.parent.name]["triton"]} == \
            config["variants"][path.parent.name]["triton"]
        assert r["provenance"]["aiter"] == "0.1.7.post2.dev18"
    assert (run / "report.md").is_file()


def test_the_runner_imports_nothing_the_image_lacks():
    """The image installs fabench with --no-deps: the runner's imports must be stdlib and torch."""
    code = ("import sys, importlib.abc\n"
            "class Block(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path, target=None):\n"
            "        if name.split('.')[0] in ('yaml', 'jsonschema', 'jinja2', 'docker', 'snakemake'):\n"
            "            raise ImportError(f'{name} is not in the image')\n"
            "sys.meta_path.insert(0, Block())\n"
            "import fabench.measure.job, fabench.container.probe, fabench.aiter_config\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(SRC)})
    assert proc.returncode == 0, proc.stderr
