"""One benchmark job in a container of the benchmark image.

The job container gets:

* the caller's uid/gid, so what it writes under results/ belongs to the caller;
* results/<run> bind-mounted at the same absolute path and the same working directory, so the
  runner's relative paths hold;
* the variant's patched aiter config at a fixed path (the runner is given it) and, read-only,
  over aiter's packaged file (what aiter's own lookup reads);
* a host cache directory for Triton kernels, aiter's JIT modules and a HOME;
* the job's GPU alone (fabench.measure.launch.lease, taken here on the host before the container starts):
  /dev/kfd and that GPU's render node on an AMD host (/dev/dri whole when the GPU's node is not
  known), and the lease in FABENCH_DEVICE_LEASE for the result.

The container is removed however the job ends: success, failure, SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import grp
import json
import os
import shlex
import signal
import sys
import uuid
from pathlib import Path
from typing import Iterator

from fabench.aiter_config import sidecar_path
from fabench.container.image import TAIL_LINES, ContainerError, client, last_lines, load_manifest, write_now
from fabench.measure.invocation import thread_counts
from fabench.measure.launch import lease as device_lease

# Where the job container sees the variant's patched config (the runner is given this path)
# and its caches (Triton kernels, aiter's JIT modules, a HOME for the calling uid).
CONTAINER_AITER_CONFIG = "/fabench/aiter-config.json"
CONTAINER_CACHE = "/fabench/cache"
RUNNER_MODULE = "fabench.measure"
SWEEP_MODULE = "fabench.tune"  # a sweep job (fabench.tune.job)
JOB_LABEL = "fabench.job"
# Passed through from the caller: its CPU threads, a 0 given as 1 (fabench.measure.invocation.thread_counts;
# which GPU comes from the job's lease).
_PASS_ENV = ("OMP_NUM_THREADS",)
_CACHE_SUBDIRS = ("home", "triton", "aiter-jit", "inductor", "xdg")


def rocm_devices_present() -> bool:
    """An AMD GPU is visible to this host: the kernel driver's compute and render nodes exist."""
    return os.path.exists("/dev/kfd") and os.path.isdir("/dev/dri")


def rocm_device_options(device_nodes: list[str] | tuple[str, ...] = ()) -> dict:
    """docker run options for AMD GPUs, only when this host has them (/dev/kfd and /dev/dri):
    /dev/kfd and the given render nodes (the job's GPU alone), or all of /dev/dri when none given.

    The caller's uid in the container needs the device nodes' groups (video, render) to open them.
    """
    if not rocm_devices_present():
        return {}
    nodes = [Path(n) for n in device_nodes] or list(Path("/dev/dri").iterdir())
    gids = {os.stat("/dev/kfd").st_gid}
    for node in nodes:
        with contextlib.suppress(OSError):
            gids.add(node.stat().st_gid)
    with contextlib.suppress(KeyError):
        gids.add(grp.getgrnam("video").gr_gid)
    shown = [f"{n}:{n}:rwm" for n in device_nodes] or ["/dev/dri:/dev/dri:rwm"]
    return {
        "devices": ["/dev/kfd:/dev/kfd:rwm", *shown],
        "group_add": sorted(str(g) for g in gids if g != 0),
        "ipc_mode": "host",
        "security_opt": ["seccomp=unconfined"],
    }


class Terminated(BaseException):
    """Raised from the SIGTERM handler so that ``finally`` blocks run (and remove the container)."""


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` in the main thread while the block runs."""
    def handler(signum, frame):
        raise Terminated(f"signal {signum}")

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
            module: str = RUNNER_MODULE) -> int:
    """Run ``python3 -m fabench.measure <runner_args> --aiter-config <fixed path>`` in the image.

    Returns 0; a container that exits otherwise raises ContainerError with its last lines.
    ``module`` replaces ``fabench.measure`` (tests run a probe the same way a job runs).
    """
    m = load_manifest(manifest)
    aiter_config = Path(aiter_config).resolve()
    results_dir = Path(results_dir).resolve()
    _check_job_args(aiter_config, runner_args)
    mount_target = _mount_target(m, aiter_config)
    results_dir.mkdir(parents=True, exist_ok=True)
    _check_in_host(module, runner_args, aiter_config)
    cache = _job_cache(m, cache_dir)
    with device_lease.acquire() as lease:  # held until the container is gone
        options = {
            **_job_options(m, mount_target, results_dir, aiter_config, cache, workdir, lease),
            **rocm_device_options(lease.device_nodes),
        }
        command = ["python3", "-m", module, *runner_args, "--aiter-config", CONTAINER_AITER_CONFIG]
        return _run_container(m, command, options, log)


def _job_options(m: dict, mount_target: str | None, results_dir: Path, aiter_config: Path, cache: Path,
                 workdir: str | Path | None, lease: device_lease.Lease) -> dict:
    return {
        "user": f"{os.getuid()}:{os.getgid()}",  # files in results/ belong to the caller
        "environment": _job_environment(m, mount_target, lease),
        "mounts": _job_mounts(results_dir, aiter_config, cache, mount_target),
        "working_dir": str(Path(workdir).resolve() if workdir else Path.cwd()),
        "network_mode": "host",  # the engine may run with --bridge=none
        "labels": {JOB_LABEL: "1", "fabench.image": m["tag"]},
    }


def _check_job_args(aiter_config: Path, runner_args: list[str]) -> None:
    if not aiter_config.is_file():
        raise ContainerError(f"no patched config at {aiter_config}")
    if "--aiter-config" in runner_args:
        raise ContainerError("runner args must not carry --aiter-config: run-job passes the mounted one")


def _check_in_host(module: str, runner_args: list[str], aiter_config: Path) -> None:
    """The job's arguments read here, by the command the container will run, before it starts: the
    spec's values and the options are checked against the config schema on the host, whose
    dependencies the image does not have (it reads their types alone: fabench.measure.spec.RUNTIME_ENV).
    A bad one ends this process as it would end that command: one line, exit status 2."""
    if module == RUNNER_MODULE:
        from fabench.measure.launch.runner import parse_args
    elif module == SWEEP_MODULE:
        from fabench.measure.invocation import sweep_arguments

        parse_args = sweep_arguments(f"python -m {SWEEP_MODULE}").parse_args
    else:  # a tests' probe: its own arguments
        return
    parse_args([*runner_args, "--aiter-config", str(aiter_config)])


def _mount_target(m: dict, aiter_config: Path) -> str | None:
    """The file in the image the patched config goes over, as its sidecar names it (None: none).

    An image with aiter but a config without a sidecar would run on aiter's unpatched file:
    refused, as is a sidecar made for another image's file.
    """
    sidecar = sidecar_path(aiter_config)
    mount_target = json.loads(sidecar.read_text()).get("mount_target") if sidecar.is_file() else None
    in_image = m.get("aiter_mha_config")
    if in_image and not mount_target:
        raise ContainerError(f"{aiter_config}: no sidecar naming the file to mount over ({sidecar}); "
                             "make both with fabench.container.aiter_image.patch_from_image")
    if mount_target and in_image and mount_target != in_image:
        raise ContainerError(f"{sidecar} was patched for {mount_target}, the image has {in_image}")
    return mount_target


def _job_cache(m: dict, cache_dir: str | Path | None) -> Path:
    """The host dir behind CONTAINER_CACHE, one per image unless given; made with its subdirs."""
    default = Path.cwd() / "build" / "container-cache" / m["image_id"].split(":")[-1][:16]
    cache = Path(cache_dir).resolve() if cache_dir else default
    for sub in _CACHE_SUBDIRS:
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


def _job_environment(m: dict, mount_target: str | None, lease: device_lease.Lease) -> dict[str, str]:
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
    env.update(thread_counts({k: os.environ[k] for k in _PASS_ENV if k in os.environ}))
    if lease.device_nodes:  # the container has this GPU's nodes alone: it needs no visibility variable
        lease = dataclasses.replace(lease, visible_devices=dict.fromkeys(lease.visible_devices))
    env = lease.environment(env)
    if mount_target:  # the runner may check that aiter's packaged file is the patched one
        env["FABENCH_AITER_CONFIG_MOUNT"] = mount_target
    return env


def _run_container(m: dict, command: list[str], options: dict, log: str | Path | None) -> int:
    """Run ``command`` in the manifest's image, its output to the log (or stdout); always removed.

    The container is named before it is created, so that one whose create call was interrupted
    by SIGTERM is still found and removed.
    """
    name = f"fabench-job-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    logf = open(log, "a") if log else contextlib.nullcontext(sys.stdout)
    cli = client()
    container = None
    with sigterm_raises(), logf as out:
        write_now(out, f"# {m['tag']} ({m['image_id']}): {shlex.join(command)}\n")
        try:
            container = cli.containers.create(m["image_id"], command, name=name, **options)
            container.start()
            tail = _follow_output(container, out)
            code = int(container.wait().get("StatusCode", -1))
            if code != 0:
                raise ContainerError(f"job container exited with {code}: {shlex.join(command)}\n"
                                     f"--- last lines ---\n{last_lines(tail)}")
            return code
        finally:
            with contextlib.suppress(Exception):
                (container or cli.containers.get(name)).remove(force=True)
            cli.close()


def _follow_output(container, out) -> collections.deque[str]:
    """Copy the container's output to ``out`` as it comes; returns its last lines."""
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    pending = ""  # a line not yet ended: chunks do not follow line breaks
    for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
        text = chunk.decode(errors="replace")
        write_now(out, text)
        pending += text
        *lines, pending = pending.split("\n")
        tail.extend(lines)
    if pending:
        tail.append(pending)
    return tail
