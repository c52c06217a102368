"""The platform a run's jobs will measure on (rocm, cuda or cpu), known when the workflow plans them;
and whether they run in containers (use_docker).

The plan needs it twice: how many measuring processes a job has (a CPU's cpu.repeats, a GPU's
timing.repeats), and which platform's roles the config must give. Importing torch to ask would
cost the planner seconds (and a GPU context), so the answer comes from what torch would see:

- FABENCH_PLATFORM, when set: the planner is told (it runs on another host than the jobs);
- in a container (runtime docker): rocm when this host has AMD's device nodes, which the job's
  container gets (fabench.container.job); else cpu, the container sees no GPU;
- on this host (runtime local): the build of the installed torch (its torch/version.py, read, not
  imported) and the GPU device nodes of that vendor, unless the *_VISIBLE_DEVICES variables hide
  every device.

A job still detects its platform itself (fabench.measure.device.accelerator). Where the two disagree, a
process the job's platform does not need writes a marker the merge skips, and the result's
`method.process_exits` shows how many processes measured.
"""

from __future__ import annotations

import ast
import importlib.util
import os
from pathlib import Path

from fabench.container import image as container_image
from fabench.container.job import rocm_devices_present
from fabench.measure.visibility import PLATFORM_VARS
from fabench.platforms import PlatformError, PlatformName

PLATFORM_ENV = "FABENCH_PLATFORM"
# Said with an error about the planned platform: how it was found, and how to name another.
PLATFORM_HINT = (f"the platform is this host's (its torch build and GPU devices, or the devices a container "
                 f"gets); {PLATFORM_ENV}=rocm, cuda or cpu names another")
NVIDIA_DEVICE_NODES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg")  # dxg: CUDA under WSL2


def planned_platform(docker: bool) -> PlatformName:
    """The platform the run's jobs will measure on (see the module's docstring for how);
    PlatformError when FABENCH_PLATFORM names none."""
    told = os.environ.get(PLATFORM_ENV, "").strip()
    if told:
        try:
            return PlatformName.parse(told)
        except PlatformError as err:
            raise PlatformError(f"{PLATFORM_ENV}: {err}") from None
    if docker:
        return PlatformName.ROCM if rocm_devices_present() else PlatformName.CPU
    build = torch_build()
    if build == PlatformName.ROCM and rocm_devices_present() and not devices_hidden(PlatformName.ROCM):
        return PlatformName.ROCM
    if build == PlatformName.CUDA and any(os.path.exists(node) for node in NVIDIA_DEVICE_NODES) \
            and not devices_hidden(PlatformName.CUDA):
        return PlatformName.CUDA
    return PlatformName.CPU


def devices_hidden(platform: str) -> bool:
    """A *_VISIBLE_DEVICES variable set to nothing (or -1) hides every GPU from torch."""
    for name in PLATFORM_VARS[platform]:
        value = os.environ.get(name)
        if value is not None and (value.strip() == "" or value.strip().startswith("-1")):
            return True
    return False


def torch_build() -> PlatformName | None:
    """rocm, cuda or cpu: which build of torch is installed (None: no torch), from its version.py."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    version_file = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        values = _assignments(version_file.read_text())
    except (OSError, SyntaxError):
        return None
    if values.get("hip"):
        return PlatformName.ROCM
    return PlatformName.CUDA if values.get("cuda") else PlatformName.CPU


def _assignments(source: str) -> dict:
    """The constant `name = value` (and `name: T = value`) lines of a module, without running it."""
    values = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    values[target.id] = node.value.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and isinstance(node.value, ast.Constant):
            values[node.target.id] = node.value.value
    return values


def use_docker(config: dict) -> bool:
    """Whether the jobs run in containers. runtime docker: yes; local: no; auto: with several
    platform images, or on a ROCm host whose Docker engine answers."""
    if config["runtime"] != "auto":
        return config["runtime"] == "docker"
    if config["platforms"]:
        return True
    return rocm_devices_present() and container_image.engine_answers(timeout=5)
