"""Which accelerator this process runs on, and every device primitive the measurement asks of it:
one class per platform (cuda, rocm, cpu), detected once per process (`here()`).

A Platform holds what differs between vendors: the torch device string, synchronisation, the GPU
sleep the device loop queues its calls behind, timing events, graphs and their capture, streams,
the allocator's cache, the profiler's device activity, the device's properties and the identity
fields of a result's provenance. The timer (timing, graph_time), the profiled kernels (kernels),
the state reader (gpu_state), the cell, the job and the measuring worker call these instead of
torch.cuda, and compare no platform strings; a new vendor is a new class here. ROCm's HIP answers to
torch.cuda, so Rocm differs from Cuda only in what names and reads its device. Elsewhere torch.cuda
is named only by a backend asking about its own kernel (fa4_kernel: the compute capability its
kernels need) and by an exception's type (failures: torch.cuda.OutOfMemoryError).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from functools import cache

import torch

from fabench.platforms import PlatformName

# Bytes a thread by which the stack limit is raised and set back to have the local memory placed
# anew (Cuda.place_local_memory_anew): any change reallocates it; 256 B is the probe's step.
LOCAL_MEMORY_STEP = 256

Graph = torch.cuda.CUDAGraph  # a captured graph's type, for the timers' annotations
Event = torch.cuda.Event


class Platform:
    name = PlatformName.CPU
    # Whether the device sleep counts the SM clock's cycles, so that a sleep's own duration says
    # the SM clock it ran at (fabench.measure.device.kernels.stream_figures: the clock through a
    # timed loop). CUDA's torch.cuda._sleep spins on clock64(), the SM clock's counter.
    sleep_counts_sm_cycles = False

    @property
    def device(self) -> str:
        """torch's device type here (ROCm's GPUs too are torch's "cuda")."""
        return self.name.torch_device

    def synchronize(self) -> None:
        """Wait for the device's queued work (nothing is queued on a CPU)."""

    def empty_cache(self) -> None:
        """Hand the allocator's cached blocks back (a CPU's allocator keeps none)."""

    def release_memory(self) -> None:
        """Between jobs: the allocator's cache and its peak statistics, as a fresh process has them;
        a device that was never initialised is left so."""

    def sleep(self, cycles: int) -> None:
        raise NotImplementedError(f"no device sleep on {self.name}: nothing is queued to run behind it")

    def event(self) -> Event:
        raise NotImplementedError(f"no device events on {self.name}")

    def graph(self) -> Graph:
        raise NotImplementedError(f"no graph capture on {self.name}")

    def place_local_memory_anew(self) -> str | None:
        """Have the driver place the device's local memory (the stacks and spilled registers of the
        kernels launched next) somewhere new: None when it did, else why it could not."""
        return f"no local memory to place on {self.name}"

    def capture(self, graph: Graph):
        raise NotImplementedError(f"no graph capture on {self.name}")

    def stream(self):
        raise NotImplementedError(f"no device streams on {self.name}")

    def current_stream(self):
        raise NotImplementedError(f"no device streams on {self.name}")

    def on_stream(self, stream):
        raise NotImplementedError(f"no device streams on {self.name}")

    def profiler_activities(self) -> list:
        """What torch.profiler records of the device's work: its kernels (none on a CPU)."""
        return []

    def device_properties(self):
        """torch's properties of the device in use (None on a CPU)."""
        return None

    def device_count(self) -> int:
        return 0

    def toolkit(self) -> dict:
        """The vendor's toolkit torch was built with: CUDA and cuDNN, or HIP (None where not this one)."""
        return {"cuda": None, "hip": None, "cudnn": None}

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
    name = PlatformName.CUDA
    sleep_counts_sm_cycles = True

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def empty_cache(self) -> None:
        torch.cuda.empty_cache()

    def release_memory(self) -> None:
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def sleep(self, cycles: int) -> None:
        torch.cuda._sleep(cycles)

    def event(self) -> Event:
        return torch.cuda.Event(enable_timing=True)

    def graph(self) -> Graph:
        return torch.cuda.CUDAGraph()

    def place_local_memory_anew(self) -> str | None:
        """The context's stack limit raised by LOCAL_MEMORY_STEP bytes a thread and set back
        (cuCtxSetLimit): the driver allocates the local memory of every resident thread again, and
        with it places it anew. Where a process's local memory lies moved a spilling Triton kernel's
        time by up to 1.8% on an H200, as much as its processes differ (docs/timing.md, "Local memory
        placed anew before each trial")."""
        try:
            from cuda.bindings import driver
        except ImportError as err:
            return f"cuda-bindings cannot be imported ({err}): pip install -r envs/gpu.txt"
        torch.cuda.synchronize()  # a limit is set on an idle context only; this one is torch's, current here
        limit = driver.CUlimit.CU_LIMIT_STACK_SIZE
        ok = driver.CUresult.CUDA_SUCCESS
        err, size = driver.cuCtxGetLimit(limit)
        for value in (size + LOCAL_MEMORY_STEP, size):
            if err == ok:
                (err,) = driver.cuCtxSetLimit(limit, value)
        return None if err == ok else f"the driver refused the stack limit ({err.name})"

    def capture(self, graph: Graph):
        """The context in which the calls made are captured into `graph`."""
        return torch.cuda.graph(graph)

    def stream(self) -> torch.cuda.Stream:
        return torch.cuda.Stream()

    def current_stream(self) -> torch.cuda.Stream:
        return torch.cuda.current_stream()

    def on_stream(self, stream: torch.cuda.Stream):
        """The context in which the calls made are queued on `stream`."""
        return torch.cuda.stream(stream)

    def profiler_activities(self) -> list:
        from torch.profiler import ProfilerActivity

        return [ProfilerActivity.CUDA]  # HIP's kernels too, through roctracer

    def device_properties(self):
        return torch.cuda.get_device_properties(torch.cuda.current_device())

    def device_count(self) -> int:
        return torch.cuda.device_count()

    def toolkit(self) -> dict:
        return {"cuda": torch.version.cuda, "hip": None, "cudnn": torch.backends.cudnn.version()}

    def device_name(self) -> str:
        return torch.cuda.get_device_name(0)

    def device_arch(self) -> str | None:
        major, minor = torch.cuda.get_device_capability(0)
        return f"sm_{major}{minor}"

    def driver_version(self) -> str | None:
        return _command_output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])


class Rocm(Cuda):
    name = PlatformName.ROCM
    # HIP's clock64() is s_memtime, which on CDNA counts a constant reference clock, not the shader
    # clock (unverified here: no AMD GPU); a sleep's duration would then say nothing of the clock.
    sleep_counts_sm_cycles = False

    def place_local_memory_anew(self) -> str | None:
        # HIP has the call (hipDeviceSetLimit), but no binding of it is installed here and no AMD GPU
        # was at hand to see what it does to a kernel's time: the result says it was not done.
        return "not done on ROCm: no binding of HIP's hipDeviceSetLimit is installed"

    def toolkit(self) -> dict:
        return {"cuda": None, "hip": torch.version.hip, "cudnn": None}

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
        return named(PlatformName.ROCM if torch.version.hip else PlatformName.CUDA)
    return named(PlatformName.CPU)


def detect() -> PlatformName:
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
