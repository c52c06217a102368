"""Which accelerator this process runs on, and what the timer asks of it: one class per platform
(cuda, rocm, cpu), detected once per process (`here()`).

A Platform holds what differs between vendors: the torch device string, the variables that make a
device visible, synchronisation, the GPU sleep the device loop queues its calls behind, timing
events, graph capture, the allocator's cache, the state reader (fabench.measure.device.gpu_state) and the
identity fields of a result's provenance. The timer and the job call these instead of torch.cuda
and platform strings; a new vendor is a new class here. ROCm's HIP answers to torch.cuda, so Rocm
differs from Cuda only in what names and reads its device.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from functools import cache

import torch

from fabench.measure.device.gpu_state import GpuState

PLATFORMS = ("rocm", "cuda", "cpu")


class Platform:
    name = "cpu"
    device = "cpu"
    visible_vars: tuple[str, ...] = ()  # the environment variables that choose its devices
    gpu = False

    def synchronize(self) -> None:
        """Wait for the device's queued work (nothing is queued on a CPU)."""

    def empty_cache(self) -> None:
        """Hand the allocator's cached blocks back (a CPU's allocator keeps none)."""

    def sleep(self, cycles: int) -> None:
        raise NotImplementedError(f"no device sleep on {self.name}: nothing is queued to run behind it")

    def event(self):
        raise NotImplementedError(f"no device events on {self.name}")

    def graph(self):
        raise NotImplementedError(f"no graph capture on {self.name}")

    def capture(self, graph):
        raise NotImplementedError(f"no graph capture on {self.name}")

    def stream(self):
        raise NotImplementedError(f"no device streams on {self.name}")

    def state(self) -> GpuState:
        """The reader of the device's clocks, temperature and power (none on a CPU, with why)."""
        return GpuState(self.name)

    def device_name(self) -> str:
        with contextlib.suppress(OSError):
            with open("/proc/cpuinfo") as handle:
                for line in handle:
                    if line.startswith("model name"):
                        return line.split(":", 1)[1].strip()
        return "cpu"

    def device_arch(self) -> str | None:
        return None

    def driver_version(self) -> str | None:
        return None


class Cuda(Platform):
    name = "cuda"
    device = "cuda"
    visible_vars = ("CUDA_VISIBLE_DEVICES",)
    gpu = True

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def empty_cache(self) -> None:
        torch.cuda.empty_cache()

    def sleep(self, cycles: int) -> None:
        torch.cuda._sleep(cycles)

    def event(self) -> torch.cuda.Event:
        return torch.cuda.Event(enable_timing=True)

    def graph(self) -> torch.cuda.CUDAGraph:
        return torch.cuda.CUDAGraph()

    def capture(self, graph: torch.cuda.CUDAGraph):
        """The context in which the calls made are captured into `graph`."""
        return torch.cuda.graph(graph)

    def stream(self) -> torch.cuda.Stream:
        return torch.cuda.Stream()

    def device_name(self) -> str:
        return torch.cuda.get_device_name(0)

    def device_arch(self) -> str | None:
        major, minor = torch.cuda.get_device_capability(0)
        return f"sm_{major}{minor}"

    def driver_version(self) -> str | None:
        return _command_output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])


class Rocm(Cuda):
    name = "rocm"
    # ROCr's variable first: HIP numbers the devices ROCr shows (fabench.measure.launch.devices).
    visible_vars = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")

    def device_arch(self) -> str | None:
        return torch.cuda.get_device_properties(0).gcnArchName.split(":")[0]

    def driver_version(self) -> str | None:
        try:
            with open("/sys/module/amdgpu/version") as handle:
                return handle.read().strip()
        except OSError:
            return _command_output(["rocm-smi", "--showdriverversion"])


CLASSES = {cls.name: cls for cls in (Rocm, Cuda, Platform)}


@cache
def named(name: str) -> Platform:
    """The platform of that name (one instance per process)."""
    return CLASSES[name]()


@cache
def here() -> Platform:
    """The platform this process runs on, detected once. ROCm builds of torch also answer
    torch.cuda; torch.version.hip tells them apart."""
    if torch.cuda.is_available():
        return named("rocm" if torch.version.hip else "cuda")
    return named("cpu")


def detect() -> str:
    """This process's platform by name, as results record it."""
    return here().name


def synchronize(platform: str) -> None:
    named(platform).synchronize()


def device_name(platform: str) -> str:
    return named(platform).device_name()


def device_arch(platform: str) -> str | None:
    return named(platform).device_arch()


def driver_version(platform: str) -> str | None:
    return named(platform).driver_version()


def _command_output(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None
