"""The docker runtime: build the benchmark image, patch aiter's config from it, run one job in it.

Everything goes through the Docker Python SDK (``docker>=7``), against the engine named by
``DOCKER_HOST`` (see :mod:`support.docker_engine` for starting one on a bare machine).

Commands::

    python -m fabench.container.image tag   --dockerfile Dockerfile --context . [--build-arg K=V ...]
    python -m fabench.container.image build --dockerfile Dockerfile --context . [--build-arg K=V ...]
                                      --manifest build/images/<tag>.json --log LOG
    python -m fabench.container.image patch-config --manifest M --variant-json '{"BLOCK_M": 64}'
                                      --out results/<run>/aiter-config/<variant>.json
    python -m fabench.container.image run-job --manifest M --aiter-config results/<run>/aiter-config/<v>.json
                                      --results-dir results/<run> [--log LOG] -- <runner args...>

The image tag is a hash of the Dockerfile, the build arguments and the package source, so an
image that is already there is not built again.  The manifest written after a build records
what is inside the image (read from a container of it, not assumed from the build arguments).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import datetime as _dt
import hashlib
import json
import os
import re
import shlex
import signal
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from fabench.container.aiter_config import SKELETON, sidecar_path, write_patched

MANIFEST_VERSION = 1
DEFAULT_NAME = "fabench"
DEFAULT_PACKAGE_PATHS = ("pyproject.toml", "src")
# Where the job container sees the variant's patched config (the runner is given this path)
# and its caches (Triton kernels, aiter's JIT modules, a HOME for the calling uid).
CONTAINER_AITER_CONFIG = "/fabench/aiter-config.json"
CONTAINER_CACHE = "/fabench/cache"
TAIL_LINES = 30
_SKIP_PARTS = {"__pycache__", ".pytest_cache", ".mypy_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo")


class ContainerError(RuntimeError):
    """A build or a job container failed; the message ends with the last lines of its output."""


# --------------------------------------------------------------------------------------------
# tags
# --------------------------------------------------------------------------------------------
def _package_files(paths: Iterable[str | Path], root: Path) -> list[tuple[str, Path]]:
    files = []
    for p in paths:
        p = Path(p)
        full = p if p.is_absolute() else root / p
        if full.is_file():
            candidates = [full]
        elif full.is_dir():
            candidates = [f for f in full.rglob("*") if f.is_file()]
        else:
            raise FileNotFoundError(f"package path {full} does not exist")
        for f in candidates:
            rel = f.relative_to(root) if f.is_relative_to(root) else f
            if _SKIP_PARTS & set(rel.parts) or f.suffix in _SKIP_SUFFIXES or any(
                part.endswith(".egg-info") for part in rel.parts
            ):
                continue
            files.append((rel.as_posix(), f))
    return sorted(files)


def image_hash(dockerfile: str | Path, build_args: dict | None = None,
               package_paths: Iterable[str | Path] = DEFAULT_PACKAGE_PATHS,
               context: str | Path | None = None) -> str:
    """sha256 over the Dockerfile, the build arguments and the package files (path + bytes)."""
    dockerfile = Path(dockerfile)
    root = Path(context) if context is not None else dockerfile.parent
    h = hashlib.sha256()
    h.update(b"dockerfile\0" + dockerfile.read_bytes() + b"\0")
    args = {str(k): "" if v is None else str(v) for k, v in (build_args or {}).items()}
    h.update(b"build-args\0" + json.dumps(args, sort_keys=True).encode() + b"\0")
    ignore = root / ".dockerignore"
    if ignore.is_file():
        h.update(b"dockerignore\0" + ignore.read_bytes() + b"\0")
    for rel, f in _package_files(package_paths, root):
        h.update(b"file\0" + rel.encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def image_tag(dockerfile: str | Path, build_args: dict | None = None,
              package_paths: Iterable[str | Path] = DEFAULT_PACKAGE_PATHS,
              name: str = DEFAULT_NAME, context: str | Path | None = None) -> str:
    """``<name>:<16 hex digits>``, derived from what goes into the image."""
    return f"{name}:{image_hash(dockerfile, build_args, package_paths, context)[:16]}"


def manifest_name(tag: str) -> str:
    """File name of a tag's manifest (``fabench:abc`` -> ``fabench_abc.json``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", tag) + ".json"


def dockerfile_arg_defaults(dockerfile: str | Path) -> dict[str, str]:
    """The ``ARG NAME=default`` values of a Dockerfile (last one wins, as for a build)."""
    defaults: dict[str, str] = {}
    for line in Path(dockerfile).read_text().splitlines():
        m = re.match(r"\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?\s*$", line)
        if m and m.group(2) is not None:
            value = m.group(2).strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            defaults[m.group(1)] = value
    return defaults


# --------------------------------------------------------------------------------------------
# the engine
# --------------------------------------------------------------------------------------------
def client(timeout: int = 600):
    import docker

    return docker.from_env(timeout=timeout)


def engine_answers(timeout: float = 5.0) -> bool:
    """Whether the engine named by DOCKER_HOST (or the default socket) answers a ping."""
    try:
        import docker

        cli = docker.from_env(timeout=timeout)
    except Exception:  # no SDK, no socket, a malformed DOCKER_HOST: no engine to use
        return False
    try:
        return bool(cli.ping())
    except Exception:
        return False
    finally:
        cli.close()


def _image_or_none(cli, ref: str):
    import docker

    try:
        return cli.images.get(ref)
    except docker.errors.ImageNotFound:
        return None


def _tail(lines: Iterable[str], n: int = TAIL_LINES) -> str:
    return "\n".join(list(lines)[-n:])


def _write_now(out, text: str) -> None:
    """Write and flush: a log that is followed while a build or job runs shows it as it happens."""
    out.write(text)
    out.flush()


def _utc_now(timespec: str = "auto") -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec=timespec)


# --------------------------------------------------------------------------------------------
# build + manifest
# --------------------------------------------------------------------------------------------
# Run inside the image: what it holds. Only stdlib + importlib.metadata; aiter is NOT imported
# (its import loads HIP modules and needs a GPU).
_PROBE = r"""
import importlib.metadata as md, importlib.util, json, os, platform, subprocess, sys
from pathlib import Path
def v(*names):
    for n in names:
        try:
            return md.version(n)
        except md.PackageNotFoundError:
            pass
out = {"python": platform.python_version(), "torch": v("torch"),
       "triton": v("triton", "pytorch-triton-rocm", "pytorch-triton"),
       "aiter": v("amd-aiter"), "fabench": v("fabench"), "numpy": v("numpy")}
try:
    import torch
    out["torch_hip"] = getattr(torch.version, "hip", None)
    out["torch_cuda"] = getattr(torch.version, "cuda", None)
except Exception as e:
    out["torch_error"] = repr(e)
rocm = None
for f in ("/opt/rocm/.info/version", "/opt/rocm/.info/version-dev"):
    if os.path.exists(f):
        rocm = Path(f).read_text().strip(); break
out["rocm"] = rocm
hip = None
for exe in ("hipconfig", "/opt/rocm/bin/hipconfig"):
    try:
        hip = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout.strip() or None
        if hip: break
    except Exception:
        pass
out["hip"] = hip
spec = importlib.util.find_spec("aiter")
out["aiter_dir"] = list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else None
mha = None
if out["aiter_dir"]:
    from fabench.container.aiter_config import find_mha_config
    p = find_mha_config(out["aiter_dir"], os.environ.get("FABENCH_GPU_ARCHS") or "gfx942")
    mha = str(p) if p else None
out["aiter_mha_config"] = mha
out["env"] = {k: v for k, v in os.environ.items() if k.startswith("FABENCH_")}
open(sys.argv[1], "w").write(json.dumps(out))
"""


def _archive_member(container, path: str) -> bytes:
    """The bytes of one file of a (created or exited) container, through the archive API."""
    import io
    import tarfile

    stream, _ = container.get_archive(path)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = tar.next()
        if member is None or not member.isfile():
            raise ContainerError(f"{path} is not a file in the image")
        return tar.extractfile(member).read()


def probe_image(cli, image_ref: str) -> dict:
    """Versions and paths read from a short-lived container of the image.

    The result travels as a file (read back through the archive API), not as the container's
    output, which an engine may cut short when a container exits right after writing.
    """
    out_file = "/tmp/fabench-probe.json"
    code = _PROBE.replace('open(sys.argv[1], "w").write(json.dumps(out))',
                          f"open({out_file!r}, 'w').write(json.dumps(out))")
    container = cli.containers.create(image_ref, ["python3", "-c", code], network_mode="none",
                                      user="0:0", labels={"fabench.probe": "1"})
    try:
        container.start()
        status = container.wait()
        if status.get("StatusCode") != 0:
            output = container.logs(stdout=True, stderr=True).decode(errors="replace")
            raise ContainerError(f"could not read versions from {image_ref} "
                                 f"(exit {status.get('StatusCode')}):\n{_tail(output.splitlines())}")
        return json.loads(_archive_member(container, out_file))
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)


@dataclass(frozen=True)
class _BuildSpec:
    """What goes into an image, with absolute paths (the engine and the manifest both need them)."""

    dockerfile: Path
    context: Path
    build_args: dict[str, str]
    package_paths: list
    tag: str


def _build_spec(dockerfile: str | Path, context: str | Path, build_args: dict | None,
                package_paths: Iterable[str | Path], name: str) -> _BuildSpec:
    context = Path(context).resolve()
    dockerfile = Path(dockerfile)
    dockerfile = (dockerfile if dockerfile.is_absolute() else Path.cwd() / dockerfile).resolve()
    build_args = {k: "" if v is None else str(v) for k, v in (build_args or {}).items()}
    package_paths = list(package_paths)
    tag = image_tag(dockerfile, build_args, package_paths, name=name, context=context)
    return _BuildSpec(dockerfile, context, build_args, package_paths, tag)


def build_image(dockerfile: str | Path = "Dockerfile", context: str | Path = ".",
                build_args: dict | None = None, manifest: str | Path | None = None,
                log: str | Path | None = None, name: str = DEFAULT_NAME,
                package_paths: Iterable[str | Path] = DEFAULT_PACKAGE_PATHS,
                force: bool = False) -> dict:
    """Build (unless the tag exists) and return/write the manifest."""
    spec = _build_spec(dockerfile, context, build_args, package_paths, name)
    cli = client()
    log_path = Path(log) if log else None
    if log_path:
        log_path.parent.mkdir(parents=True, exist_ok=True)

    image = None if force else _image_or_none(cli, spec.tag)
    build_seconds = None  # stays None when the tag exists: nothing is built
    if image is None:
        image, build_seconds = _build(cli, spec, log_path)
    elif log_path:
        with open(log_path, "a") as out:
            out.write(f"# {_utc_now()} {spec.tag} exists ({image.id}); not rebuilt\n")

    data = _manifest(cli, spec, image, build_seconds)
    if manifest:
        _write_json(Path(manifest), data)
    return data


def _build(cli, spec: _BuildSpec, log_path: Path | None) -> tuple:
    """Build ``spec.tag``, its output streamed to the log (or stderr); returns (image, seconds)."""
    t0 = time.monotonic()
    logf = open(log_path, "a") if log_path else contextlib.nullcontext(sys.stderr)
    with logf as out:
        out.write(f"# {_utc_now()} building {spec.tag}\n")
        # network_mode="host": the engine may run with --bridge=none (see support.docker_engine)
        stream = cli.api.build(path=str(spec.context), dockerfile=_dockerfile_in_context(spec),
                               tag=spec.tag, buildargs=spec.build_args, network_mode="host",
                               rm=True, forcerm=True, pull=False, decode=True)
        image_id, error, tail = _follow_build(stream, out)
    seconds = time.monotonic() - t0
    if error is not None:
        where = f" (log: {log_path})" if log_path else ""
        raise ContainerError(f"building {spec.tag} failed{where}: {error}\n--- last lines ---\n" + _tail(tail))
    return cli.images.get(image_id or spec.tag), seconds


def _dockerfile_in_context(spec: _BuildSpec) -> str:
    """The Dockerfile relative to the context, as the build API wants it (absolute if it cannot be)."""
    try:
        return os.path.relpath(spec.dockerfile, spec.context)
    except ValueError:
        return str(spec.dockerfile)


def _follow_build(stream: Iterable[dict], out) -> tuple[str | None, str | None, collections.deque]:
    """Write the build's output as it comes; returns (image id, error or None, last lines)."""
    image_id = error = None
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    for chunk in stream:
        text = chunk.get("stream") or chunk.get("status") or ""
        if "error" in chunk:
            error = chunk.get("error") or json.dumps(chunk.get("errorDetail"))
            text = f"ERROR: {error}\n"
        if isinstance(chunk.get("aux"), dict) and "ID" in chunk["aux"]:
            image_id = chunk["aux"]["ID"]
        if text:
            _write_now(out, text if text.endswith("\n") else text + "\n")
            tail.extend(line for line in text.splitlines() if line.strip())
    return image_id, error, tail


def _manifest(cli, spec: _BuildSpec, image, build_seconds: float | None) -> dict:
    """What the image holds, read from a container of it; ``build_seconds`` None: not built now."""
    effective = {**dockerfile_arg_defaults(spec.dockerfile), **spec.build_args}
    base_ref = effective.get("BASE_IMAGE")
    base = _image_or_none(cli, base_ref) if base_ref else None
    inside = probe_image(cli, image.id)
    env = inside.pop("env", {})
    aiter_commit = env.get("FABENCH_AITER_COMMIT") or None
    return {
        "manifest_version": MANIFEST_VERSION,
        "tag": spec.tag,
        "image_id": image.id,
        "repo_digests": image.attrs.get("RepoDigests") or [],
        "created": image.attrs.get("Created"),
        "size_bytes": image.attrs.get("Size"),
        "base_image": {"ref": base_ref, "id": base.id if base else None,
                       "repo_digests": (base.attrs.get("RepoDigests") or []) if base else []},
        "aiter_commit": aiter_commit,
        "aiter_repo": (env.get("FABENCH_AITER_REPO") or None) if aiter_commit else None,
        "gpu_archs": env.get("FABENCH_GPU_ARCHS") or None,
        "versions": {k: inside.get(k) for k in ("rocm", "hip", "torch", "torch_hip", "torch_cuda",
                                                "triton", "aiter", "python", "fabench", "numpy")},
        "aiter_dir": inside.get("aiter_dir"),
        "aiter_mha_config": inside.get("aiter_mha_config"),
        "build": _build_record(cli, spec, effective, build_seconds),
        "written": _utc_now(timespec="seconds"),
    }


def _build_record(cli, spec: _BuildSpec, effective_args: dict, seconds: float | None) -> dict:
    return {"built": seconds is not None, "seconds": round(seconds, 1) if seconds is not None else None,
            "dockerfile": str(spec.dockerfile), "context": str(spec.context),
            "build_args": spec.build_args, "effective_build_args": effective_args,
            "package_paths": [str(p) for p in spec.package_paths],
            "engine": cli.version().get("Version")}


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)


def load_manifest(path: str | Path) -> dict:
    data = json.loads(Path(path).read_text())
    for key in ("tag", "image_id"):
        if not data.get(key):
            raise ContainerError(f"{path}: manifest without {key!r}")
    return data


# --------------------------------------------------------------------------------------------
# kernel config patch
# --------------------------------------------------------------------------------------------
def read_file_from_image(cli, image_ref: str, path: str) -> bytes:
    """One file of an image, exactly (a container is created, never started)."""
    container = cli.containers.create(image_ref, ["true"], network_mode="none")
    try:
        return _archive_member(container, path)
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)


def patch_config(manifest: str | Path, overrides: dict, out: str | Path) -> dict:
    """Patch the image's aiter MHA config with a variant's overrides; write file + sidecar."""
    m = load_manifest(manifest)
    out = Path(out)
    target = m.get("aiter_mha_config")
    cli = client()
    if target:
        raw = read_file_from_image(cli, m["image_id"], target)
        base = json.loads(raw)
        base_sha = hashlib.sha256(raw).hexdigest()
    else:
        base, base_sha = copy.deepcopy(SKELETON), None
    info = {
        "base_path": target,
        "base_sha256": base_sha,
        **write_patched(base, overrides, out),  # ValueError names unknown keys
        # the file inside the image that this one is bind-mounted over (None: nothing to mount)
        "mount_target": target,
        "image": m["tag"],
        "image_id": m["image_id"],
        "aiter_commit": m.get("aiter_commit"),
    }
    _write_json(sidecar_path(out), info)
    return info


# --------------------------------------------------------------------------------------------
# one job in a container
# --------------------------------------------------------------------------------------------
def rocm_devices_present() -> bool:
    """An AMD GPU is visible to this host: the kernel driver's compute and render nodes exist."""
    return os.path.exists("/dev/kfd") and os.path.isdir("/dev/dri")


def rocm_device_options() -> dict:
    """docker run options for AMD GPUs, only when this host has them (/dev/kfd and /dev/dri)."""
    if not rocm_devices_present():
        return {}
    gids = {os.stat("/dev/kfd").st_gid}
    for node in Path("/dev/dri").iterdir():
        with contextlib.suppress(OSError):
            gids.add(node.stat().st_gid)
    with contextlib.suppress(KeyError):
        import grp

        gids.add(grp.getgrnam("video").gr_gid)
    return {
        "devices": ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"],
        "group_add": sorted(str(g) for g in gids if g != 0),
        "ipc_mode": "host",
        "security_opt": ["seccomp=unconfined"],
    }


_PASS_ENV = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES",
             "OMP_NUM_THREADS", "FABENCH_REQUIRE_DEVICE")


class _Terminated(BaseException):
    """Raised from the SIGTERM handler so that ``finally`` blocks run."""


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    def handler(signum, frame):
        raise _Terminated(f"signal {signum}")

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_job(manifest: str | Path, aiter_config: str | Path, results_dir: str | Path,
            runner_args: list[str], log: str | Path | None = None,
            cache_dir: str | Path | None = None, workdir: str | Path | None = None,
            module: str = "fabench.measure.job") -> int:
    """Run ``python -m fabench.measure.job <runner_args> --aiter-config <fixed path>`` in the image.

    ``module`` replaces ``fabench.measure.job`` (tests run a probe the same way a job runs).
    """
    m = load_manifest(manifest)
    aiter_config = Path(aiter_config).resolve()
    results_dir = Path(results_dir).resolve()
    workdir = Path(workdir).resolve() if workdir else Path.cwd()
    _check_job_args(aiter_config, runner_args)
    mount_target = _mount_target(m, aiter_config)
    results_dir.mkdir(parents=True, exist_ok=True)
    cache = _job_cache(m, cache_dir)
    options = {
        "user": f"{os.getuid()}:{os.getgid()}",  # files in results/ belong to the caller
        "environment": _job_environment(m, mount_target),
        "mounts": _job_mounts(results_dir, aiter_config, cache, mount_target),
        "working_dir": str(workdir),
        "network_mode": "host",
        "labels": {"fabench.job": "1", "fabench.image": m["tag"]},
    }
    command = ["python3", "-m", module, *runner_args, "--aiter-config", CONTAINER_AITER_CONFIG]
    return _run_container(client(), m, command, options, log)


def _check_job_args(aiter_config: Path, runner_args: list[str]) -> None:
    if not aiter_config.is_file():
        raise ContainerError(f"no patched config at {aiter_config}")
    if "--aiter-config" in runner_args:
        raise ContainerError("runner args must not carry --aiter-config: run-job passes the mounted one")


def _mount_target(m: dict, aiter_config: Path) -> str | None:
    """The file in the image the patched config goes over, as its sidecar names it (None: none)."""
    sidecar = sidecar_path(aiter_config)
    mount_target = json.loads(sidecar.read_text()).get("mount_target") if sidecar.is_file() else None
    if m.get("aiter_mha_config") and not mount_target:
        raise ContainerError(
            f"{aiter_config}: no sidecar naming the file to mount over ({sidecar}); "
            "make it with `python -m fabench.container.image patch-config`")
    if mount_target and m.get("aiter_mha_config") and mount_target != m["aiter_mha_config"]:
        raise ContainerError(f"{sidecar} was patched for {mount_target}, the image has {m['aiter_mha_config']}")
    return mount_target


def _job_cache(m: dict, cache_dir: str | Path | None) -> Path:
    """The host dir behind CONTAINER_CACHE, one per image unless given; made with its subdirs."""
    cache = Path(cache_dir).resolve() if cache_dir else (Path.cwd() / "build" / "container-cache" /
                                                           m["image_id"].split(":")[-1][:16])
    for sub in ("home", "triton", "aiter-jit", "inductor", "xdg"):
        (cache / sub).mkdir(parents=True, exist_ok=True)
    return cache


def _bind(source: Path, target: str, read_only: bool):
    import docker.types

    return docker.types.Mount(target=target, source=str(source), type="bind", read_only=read_only)


def _job_mounts(results_dir: Path, aiter_config: Path, cache: Path, mount_target: str | None) -> list:
    mounts = [
        _bind(results_dir, str(results_dir), False),  # same absolute path: relative runner args work
        _bind(aiter_config, CONTAINER_AITER_CONFIG, True),  # the path the runner is given
        _bind(cache, CONTAINER_CACHE, False),
    ]
    if mount_target:  # over aiter's packaged file: what aiter's _get_config reads
        mounts.append(_bind(aiter_config, mount_target, True))
    return mounts


def _job_environment(m: dict, mount_target: str | None) -> dict[str, str]:
    env = {
        "FABENCH_RUNTIME": "docker",  # recorded in the result's provenance, with the image
        "FABENCH_IMAGE": m["tag"],
        "FABENCH_IMAGE_ID": m["image_id"],
        "HOME": f"{CONTAINER_CACHE}/home",  # the caller's uid has no home in the image
        "TRITON_CACHE_DIR": f"{CONTAINER_CACHE}/triton",
        "TORCHINDUCTOR_CACHE_DIR": f"{CONTAINER_CACHE}/inductor",
        "XDG_CACHE_HOME": f"{CONTAINER_CACHE}/xdg",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    if m.get("aiter_dir"):
        env["AITER_JIT_DIR"] = f"{CONTAINER_CACHE}/aiter-jit"
    env.update({k: os.environ[k] for k in _PASS_ENV if k in os.environ})
    if mount_target:  # the runner may check that aiter's packaged file is the patched one
        env["FABENCH_AITER_CONFIG_MOUNT"] = mount_target
    return env


def _run_container(cli, m: dict, command: list[str], options: dict, log: str | Path | None) -> int:
    """Run ``command`` in the manifest's image, its output to the log (or stdout); always removed."""
    logf = open(log, "a") if log else contextlib.nullcontext(sys.stdout)
    container = None
    name = f"fabench-job-{os.getpid()}-{uuid.uuid4().hex[:8]}"  # found by name if create is interrupted
    with _sigterm_raises(), logf as out:
        _write_now(out, f"# {m['tag']} ({m['image_id']}): {shlex.join(command)}\n")
        try:
            container = cli.containers.create(m["image_id"], command, name=name, **options,
                                              **rocm_device_options())
            container.start()
            tail = _follow_output(container, out)
            code = int(container.wait().get("StatusCode", -1))
            if code != 0:
                raise ContainerError(f"job container exited with {code}: {shlex.join(command)}\n"
                                     f"--- last lines ---\n{_tail(tail)}")
            return code
        finally:
            with contextlib.suppress(Exception):
                (container or cli.containers.get(name)).remove(force=True)


def _follow_output(container, out) -> collections.deque[str]:
    """Copy the container's output to ``out`` as it comes; returns its last lines."""
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    pending = ""  # a line not yet ended: chunks do not follow line breaks
    for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
        text = chunk.decode(errors="replace")
        _write_now(out, text)
        pending += text
        *lines, pending = pending.split("\n")
        tail.extend(lines)
    if pending:
        tail.append(pending)
    return tail


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------
def _build_args(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise SystemExit(f"--build-arg {pair!r}: expected KEY=VALUE")
        k, v = pair.split("=", 1)
        out[k] = v
    return out


def _add_image_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dockerfile", default="Dockerfile")
    p.add_argument("--context", default=".")
    p.add_argument("--build-arg", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--name", default=DEFAULT_NAME, help="image repository name (tag = NAME:<hash>)")
    p.add_argument("--package-path", action="append", default=None,
                   help="files/dirs of our package that go into the image (default: pyproject.toml, src)")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fabench.container.image", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tag", help="print the tag an image of these inputs gets")
    _add_image_options(t)
    b = sub.add_parser("build", help="build the image (unless its tag exists) and write its manifest")
    _add_image_options(b)
    b.add_argument("--manifest", required=True, type=Path)
    b.add_argument("--log", type=Path)
    b.add_argument("--force", action="store_true", help="build even if the tag exists")
    c = sub.add_parser("patch-config", help="patch aiter's MHA config from the image for one variant")
    c.add_argument("--manifest", required=True, type=Path)
    c.add_argument("--variant-json", required=True, help="JSON object merged into fwd.default")
    c.add_argument("--out", required=True, type=Path)
    _add_run_job_parser(sub)
    return p


def _add_run_job_parser(sub) -> None:
    r = sub.add_parser("run-job", help="run one benchmark job in the image")
    r.add_argument("--manifest", required=True, type=Path)
    r.add_argument("--aiter-config", required=True, type=Path)
    r.add_argument("--results-dir", required=True, type=Path)
    r.add_argument("--log", type=Path, help="append the container's output here (default: stdout)")
    r.add_argument("--cache-dir", type=Path, help="host dir for Triton/aiter caches "
                   "(default: build/container-cache/<image id>)")
    r.add_argument("--module", default="fabench.measure.job", help=argparse.SUPPRESS)  # tests: a probe module
    r.add_argument("runner_args", nargs=argparse.REMAINDER, help="-- then the runner's arguments")


def _cmd_tag(a: argparse.Namespace) -> int:
    pkg = a.package_path or list(DEFAULT_PACKAGE_PATHS)
    print(image_tag(a.dockerfile, _build_args(a.build_arg), pkg, name=a.name, context=a.context))
    return 0


def _cmd_build(a: argparse.Namespace) -> int:
    pkg = a.package_path or list(DEFAULT_PACKAGE_PATHS)
    m = build_image(a.dockerfile, a.context, _build_args(a.build_arg), a.manifest, a.log,
                    name=a.name, package_paths=pkg, force=a.force)
    how = f"built in {m['build']['seconds']:.0f} s" if m["build"]["built"] else "existed"
    print(f"{m['tag']} {m['image_id']} ({how})")
    return 0


def _cmd_patch_config(a: argparse.Namespace) -> int:
    try:
        overrides = json.loads(a.variant_json)
    except json.JSONDecodeError as e:
        return _usage_error(f"--variant-json: {e}")
    if not isinstance(overrides, dict):
        return _usage_error("--variant-json must be a JSON object")
    try:
        patch_config(a.manifest, overrides, a.out)
    except ValueError as e:  # unknown keys in the overrides
        return _usage_error(str(e))
    return 0


def _cmd_run_job(a: argparse.Namespace) -> int:
    args = a.runner_args[1:] if a.runner_args[:1] == ["--"] else a.runner_args
    return run_job(a.manifest, a.aiter_config, a.results_dir, args, a.log, a.cache_dir, module=a.module)


def _usage_error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


_COMMANDS = {"tag": _cmd_tag, "build": _cmd_build, "patch-config": _cmd_patch_config,
             "run-job": _cmd_run_job}


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    try:
        return _COMMANDS[a.cmd](a)
    except ContainerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # the engine's own errors (no engine, image gone, ...)
        import docker.errors

        if isinstance(e, docker.errors.DockerException):
            print(f"error: docker: {e}", file=sys.stderr)
            return 1
        raise
    except (KeyboardInterrupt, _Terminated):
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
