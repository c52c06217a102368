"""The platforms a job measures on, named once: rocm, cuda and cpu.

A platform arrives as a string (FABENCH_PLATFORM, a job spec, a result's `platform`, the class
fabench.measure.device.accelerator detects); `PlatformName.parse` is where one becomes a platform, and
the properties answer the questions the stages ask of it. Elsewhere no code compares a platform with
a literal name (tests/test_platform_names.py). A StrEnum equals, hashes and serialises as its
string, so results, configs and job specs spell the platforms as before; a value that may be
missing (a result written by hand) is compared with a member instead of parsed.

Torch-free and importing nothing of fabench: every stage, the planner included, imports it.
"""

from __future__ import annotations

from enum import StrEnum


class PlatformError(ValueError):
    """A string that names no platform: the one line says what it may be."""


class PlatformName(StrEnum):
    # The order the config schema's roles and the results' enums list them in.
    ROCM = "rocm"
    CUDA = "cuda"
    CPU = "cpu"

    @classmethod
    def parse(cls, value: object) -> PlatformName:
        """The platform `value` names (a member is returned as it is); PlatformError otherwise."""
        try:
            return cls(value)
        except ValueError:
            raise PlatformError(f"{value!r} is not a platform (expected one of {', '.join(cls)})") from None

    @property
    def is_gpu(self) -> bool:
        """Measured on a GPU (ROCm's HIP answers to torch.cuda as CUDA does)."""
        return self is not PlatformName.CPU

    @property
    def settings_key(self) -> str:
        """The config block whose counts a job here measures with: a CPU's own `cpu` block
        (fabench.measure.spec.Settings.timing_on), else `timing`."""
        return "timing" if self.is_gpu else "cpu"

    @property
    def torch_device(self) -> str:
        """torch's device type here: ROCm's GPUs too are torch's "cuda" devices."""
        return "cuda" if self.is_gpu else "cpu"
