"""The benchmark image: its build, and the manifest of what is inside it.

Everything goes through the Docker Python SDK (``docker>=7``), against the engine named by
``DOCKER_HOST`` (tests/support/docker_engine.py starts one on a bare machine). The SDK is
imported inside functions: the runner in the image imports fabench.container, without the SDK.

The image is tagged by its recipe (fabench.container.recipe: a hash of the Dockerfile, the build
arguments and the package source), so an image that is already there is not built again. The manifest written after a build records
what is inside the image, read from a container of it (:mod:`fabench.container.probe`), not
assumed from the build arguments.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as _dt
import io
import json
import os
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from fabench.container.recipe import DEFAULT_NAME, DEFAULT_PACKAGE_PATHS, dockerfile_arg_defaults, image_tag
from fabench.files import write_json

MANIFEST_VERSION = 1
TAIL_LINES = 30
# Where the probe writes inside its container; read back through the archive API.
_PROBE_OUT = "/tmp/fabench-probe.json"


class ContainerError(RuntimeError):
    """A build or a job container failed; the message ends with the last lines of its output."""


# --------------------------------------------------------------------------------------------
# the engine
# --------------------------------------------------------------------------------------------
DEFAULT_ENGINE = "unix:///var/run/docker.sock"


class NoEngineError(ContainerError):
    """No Docker engine answers where DOCKER_HOST (or the default socket) points."""


def engine_address() -> str:
    """Where the SDK looks for the engine: DOCKER_HOST, else the default socket."""
    return os.environ.get("DOCKER_HOST") or f"{DEFAULT_ENGINE} (the default; DOCKER_HOST is not set)"


def no_engine_message(why: str) -> str:
    """One line: where no engine answered, why, and how to point at one."""
    return (f"no Docker engine answers at {engine_address()}: {why}; start one (dockerd), or point "
            f"DOCKER_HOST at it (e.g. DOCKER_HOST=unix:///run/user/$UID/docker.sock or tcp://HOST:2375), "
            f"or run without containers: --config runtime=local")


def client(timeout: float = 600):
    """A client of the engine named by DOCKER_HOST (or the default socket); the caller closes it.
    NoEngineError, in one line, when none answers there."""
    import docker

    try:
        return docker.from_env(timeout=timeout)
    except docker.errors.DockerException as err:
        raise NoEngineError(no_engine_message(_root_cause(err))) from None


def _root_cause(err: BaseException) -> str:
    """The innermost reason of a connection error, e.g. "No such file or directory" for a missing socket."""
    text = " ".join(str(err).split())
    for reason in ("No such file or directory", "Permission denied", "Connection refused", "timed out",
                   "Name or service not known"):
        if reason in text:
            return reason
    return text[:200]


def engine_answers(timeout: float = 5.0) -> bool:
    """Whether the engine named by DOCKER_HOST (or the default socket) answers a ping.

    Never raises: the workflow asks this to choose its runtime, on hosts without docker too.
    """
    try:
        cli = client(timeout=timeout)
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


def last_lines(lines: Iterable[str], n: int = TAIL_LINES) -> str:
    """The last `n` lines, for an error message that shows why without the whole log."""
    return "\n".join(list(lines)[-n:])


def write_now(out, text: str) -> None:
    """Write and flush: a log that is followed while a build or job runs shows it as it happens."""
    out.write(text)
    out.flush()


def _utc_now(timespec: str = "auto") -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec=timespec)


# --------------------------------------------------------------------------------------------
# build + manifest
# --------------------------------------------------------------------------------------------
def _archive_member(container, path: str) -> bytes:
    """The bytes of one file of a (created or exited) container, through the archive API."""
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
    command = ["python3", "-m", "fabench.container.probe", _PROBE_OUT]
    container = cli.containers.create(image_ref, command, network_mode="none", user="0:0",
                                      labels={"fabench.probe": "1"})
    try:
        container.start()
        status = container.wait()
        if status.get("StatusCode") != 0:
            output = container.logs(stdout=True, stderr=True).decode(errors="replace")
            raise ContainerError(f"could not read versions from {image_ref} "
                                 f"(exit {status.get('StatusCode')}):\n{last_lines(output.splitlines())}")
        return json.loads(_archive_member(container, _PROBE_OUT))
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)


def read_file_from_image(cli, image_ref: str, path: str) -> bytes:
    """One file of an image, exactly (a container is created, never started)."""
    container = cli.containers.create(image_ref, ["true"], network_mode="none")
    try:
        return _archive_member(container, path)
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
    """Build the image unless its tag exists (``force``: build anyway); write and return its manifest.

    The manifest is written (atomically) only after a build and the probe both succeeded, so a
    workflow rule whose output it is never sees one for an image that is not there.
    """
    spec = _build_spec(dockerfile, context, build_args, package_paths, name)
    log_path = Path(log) if log else None
    if log_path:
        log_path.parent.mkdir(parents=True, exist_ok=True)
    cli = client()
    try:
        image = None if force else _image_or_none(cli, spec.tag)
        build_seconds = None  # stays None when the tag exists: nothing is built
        if image is None:
            image, build_seconds = _build(cli, spec, log_path)
        elif log_path:
            with open(log_path, "a") as out:
                out.write(f"# {_utc_now()} {spec.tag} exists ({image.id}); not rebuilt\n")
        data = _manifest(cli, spec, image, build_seconds)
    finally:
        cli.close()
    if manifest:
        write_json(manifest, data)
    return data


def _build(cli, spec: _BuildSpec, log_path: Path | None) -> tuple:
    """Build the spec's tag, its output streamed to the log (or stderr); returns (image, seconds)."""
    t0 = time.monotonic()
    logf = open(log_path, "a") if log_path else contextlib.nullcontext(sys.stderr)
    with logf as out:
        out.write(f"# {_utc_now()} building {spec.tag}\n")
        # network_mode="host": the engine may run with --bridge=none (see tests/support/docker_engine.py)
        stream = cli.api.build(path=str(spec.context), dockerfile=_dockerfile_in_context(spec),
                               tag=spec.tag, buildargs=spec.build_args, network_mode="host",
                               rm=True, forcerm=True, pull=False, decode=True)
        image_id, error, tail = _follow_build(stream, out)
    seconds = time.monotonic() - t0
    if error is not None:
        where = f" (log: {log_path})" if log_path else ""
        raise ContainerError(f"building {spec.tag} failed{where}: {error}\n--- last lines ---\n" + last_lines(tail))
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
            write_now(out, text if text.endswith("\n") else text + "\n")
            tail.extend(line for line in text.splitlines() if line.strip())
    return image_id, error, tail


def _manifest(cli, spec: _BuildSpec, image, build_seconds: float | None) -> dict:
    """What the image holds, read from a container of it; ``build_seconds`` None: not built now."""
    effective = {**dockerfile_arg_defaults(spec.dockerfile), **spec.build_args}
    base_ref = effective.get("BASE_IMAGE")
    base = _image_or_none(cli, base_ref) if base_ref else None
    inside = probe_image(cli, image.id)
    if inside.get("aiter_mha_config_missing"):  # an aiter whose config the jobs could not patch
        raise ContainerError(f"image {spec.tag}: {inside['aiter_mha_config_missing']}")
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


def load_manifest(path: str | Path) -> dict:
    """A manifest written by :func:`build_image`; the tag and the image id are required."""
    data = json.loads(Path(path).read_text())
    for key in ("tag", "image_id"):
        if not data.get(key):
            raise ContainerError(f"{path}: manifest without {key!r}")
    return data
