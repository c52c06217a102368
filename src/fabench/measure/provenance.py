"""Where and with what a result was measured."""

from __future__ import annotations

import json
import os
import platform as pyplatform
import socket
import sys
from datetime import datetime, timezone

import torch

from fabench.gitinfo import git_commit, package_version
from fabench.measure.host_cards import nvidia_uuids
from fabench.platforms import PlatformName
from fabench.measure.visibility import LEASE_ENV, visible_devices


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def triton_version() -> str | None:
    # ROCm ships Triton as pytorch-triton-rocm; CUDA torch as triton.
    for name in ("triton", "pytorch-triton-rocm", "pytorch-triton"):
        version = package_version(name)
        if version:
            return version
    return None


def aiter_commit() -> str | None:
    """The container records the commit it built; a source install may carry a git checkout."""
    if os.environ.get("FABENCH_AITER_COMMIT"):
        return os.environ["FABENCH_AITER_COMMIT"]
    from fabench.aiter_config import installed_aiter_dir

    aiter_dir = installed_aiter_dir()
    return git_commit(aiter_dir.parent) if aiter_dir else None


def device_lease() -> dict | None:
    """How the job got its GPU, as its runner handed it down (None: no runner leased one)."""
    text = os.environ.get(LEASE_ENV)
    return json.loads(text) if text else None


def collect(here, config_sha256: str, project_commit: str | None) -> dict:
    """Where the result was measured; `here` is the process's fabench.measure.device.accelerator.Platform."""
    platform = here.name
    return {
        "host": socket.gethostname(),
        "os": pyplatform.platform(),
        "python": pyplatform.python_version(),
        "platform": platform,
        "device": here.device_name(),
        "arch": here.device_arch(),
        "device_count": here.device_count(),
        "visible_devices": visible_devices(platform, dict(os.environ)),
        "device_lease": device_lease(),
        # Every card of the host (by UUID): tells another card of this host from another host's.
        "host_cards": nvidia_uuids() if platform == PlatformName.CUDA else None,
        "driver": here.driver_version(),
        **here.toolkit(),
        "torch": torch.__version__,
        "triton": triton_version(),
        # AMD's aiter wherever it is installed: its Triton kernel runs on CUDA too.
        "aiter": package_version("amd-aiter"),
        "aiter_commit": aiter_commit() if package_version("amd-aiter") else None,
        "runtime": os.environ.get("FABENCH_RUNTIME", "local"),
        "image": os.environ.get("FABENCH_IMAGE"),
        "image_id": os.environ.get("FABENCH_IMAGE_ID"),
        "project_commit": project_commit,
        "config_sha256": config_sha256,
        "command": [sys.executable, "-m", "fabench.measure", *sys.argv[1:]],
        "cwd": os.getcwd(),
    }
