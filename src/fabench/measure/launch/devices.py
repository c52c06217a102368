"""The GPUs of this host, each with what makes a process see it alone.

Read without torch (the lease is taken before any process touches a GPU), in this order:

1. ``FABENCH_GPUS``: ids declared by hand, e.g. ``0,1`` (tests declare two GPUs on a CPU host;
   a user can name the GPUs fabench may use). They are made visible through all three variables.
2. NVIDIA GPUs in PCI order (NVML's index order), from the driver's /proc/driver/nvidia/gpus or,
   where a host has no such folder, from NVML (``nvidia-ml-py``), made visible by UUID, which no
   CUDA_DEVICE_ORDER can renumber. Every job's launcher reads this: on two H200s NVML's start-up
   took 0.10-0.14 s a call, the folder 0.006 s, and both named the same GPUs in the same order.
3. The KFD topology in sysfs (the amdgpu driver): AMD GPUs in ROCr's order, made visible through
   ROCR_VISIBLE_DEVICES (HIP then numbers the one it sees 0), each with its render node for a
   container.

A visibility variable already set in the environment (outside a scheduler, see fabench.measure.launch.lease)
narrows the pool to the GPUs it names.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from fabench.measure.host_cards import NVIDIA_PROC, nvidia_uuids
from fabench.measure.visibility import VISIBLE_VARS

DECLARED_ENV = "FABENCH_GPUS"
KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")
_ID = re.compile(r"[A-Za-z0-9._:-]+")


class DeviceError(ValueError):
    """A declaration or visibility variable that names no usable GPU (one line, naming it)."""


@dataclass(frozen=True)
class Gpu:
    id: str  # host-wide name: the lock's, and what the result records
    visible: dict[str, str]  # visibility variables that show this GPU alone (None-free)
    aliases: tuple[str, ...] = ()  # other names a visibility variable may use for it (a UUID)
    device_nodes: tuple[str, ...] = field(default=())  # what a container needs to reach it alone

    def named_by(self, name: str) -> bool:
        return name == self.id or name in self.aliases


def host_gpus(env: dict[str, str] | None = None, kfd_nodes: Path = KFD_NODES) -> tuple[list[Gpu], str]:
    """This host's GPUs, and how they were found (for the record and for messages)."""
    env = os.environ if env is None else env
    if DECLARED_ENV in env:
        return declared_gpus(env[DECLARED_ENV]), f"declared in {DECLARED_ENV}"
    found = nvidia_proc_gpus()
    if found:
        return found, str(NVIDIA_PROC)
    found = nvidia_gpus()
    if found:
        return found, "NVML"
    found = amd_gpus(kfd_nodes)
    if found:
        return found, f"KFD topology ({kfd_nodes})"
    return [], "none found (/proc/driver/nvidia, NVML, KFD topology)"


def declared_gpus(text: str) -> list[Gpu]:
    ids = [part.strip() for part in text.split(",") if part.strip()]
    bad = [i for i in ids if not _ID.fullmatch(i)]
    if not ids or bad or len(set(ids)) != len(ids):
        raise DeviceError(f"{DECLARED_ENV}={text!r}: expected distinct GPU ids separated by commas, e.g. 0,1")
    return [Gpu(id=i, visible={var: i for var in VISIBLE_VARS}) for i in ids]


def nvidia_gpus() -> list[Gpu]:
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # no driver: not an NVIDIA host
        return []
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            uuid = _text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(index)))
            gpus.append(Gpu(id=str(index), visible={"CUDA_VISIBLE_DEVICES": uuid}, aliases=(uuid,)))
        return gpus
    finally:
        pynvml.nvmlShutdown()


def nvidia_proc_gpus(root: Path = NVIDIA_PROC) -> list[Gpu]:
    """The driver's own list, one folder per GPU named by its PCI address: NVML's order."""
    return [Gpu(id=str(index), visible={"CUDA_VISIBLE_DEVICES": uuid}, aliases=(uuid,))
            for index, uuid in enumerate(nvidia_uuids(root))]


def amd_gpus(kfd_nodes: Path = KFD_NODES) -> list[Gpu]:
    """GPU nodes of the KFD topology (CPU nodes have no SIMDs), in node order: ROCr's order."""
    if not kfd_nodes.is_dir():
        return []
    nodes = sorted((p for p in kfd_nodes.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    gpus = []
    for node in nodes:
        props = _kfd_properties(node / "properties")
        if props.get("simd_count", 0) <= 0:
            continue
        index = str(len(gpus))
        render = f"/dev/dri/renderD{props['drm_render_minor']}" if "drm_render_minor" in props else None
        gpus.append(Gpu(id=index, visible={"ROCR_VISIBLE_DEVICES": index, "HIP_VISIBLE_DEVICES": "0"},
                        device_nodes=(render,) if render else ()))
    return gpus


def _kfd_properties(path: Path) -> dict[str, int]:
    props = {}
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return props
    for line in lines:
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            props[key] = int(value)
    return props


def gpu_pool(env: dict[str, str]) -> tuple[list[Gpu], str]:
    """The GPUs a job may lease here, and how they were found (DeviceError: a bad declaration)."""
    gpus, found_by = host_gpus(env)
    pool, narrowed_by = narrowed(gpus, env)
    return pool, f"{found_by}, narrowed by {narrowed_by}" if narrowed_by else found_by


def narrowed(gpus: list[Gpu], env: dict[str, str]) -> tuple[list[Gpu], str | None]:
    """The GPUs a visibility variable already set names (the first set of VISIBLE_VARS), and which.
    Without GPUs there is nothing to narrow (a CPU host may carry such a variable)."""
    if not gpus:
        return gpus, None
    for var in VISIBLE_VARS:
        if var not in env:
            continue
        names = [n.strip() for n in env[var].split(",") if n.strip()]
        unknown = [n for n in names if not any(g.named_by(n) for g in gpus)]
        if unknown:
            known = ", ".join(g.id for g in gpus)
            raise DeviceError(f"{var}={env[var]!r}: {', '.join(unknown)} is no GPU of this host (ids: {known})")
        return [g for g in gpus if any(g.named_by(n) for n in names)], var
    return gpus, None


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
