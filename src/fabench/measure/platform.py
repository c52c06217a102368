"""Which accelerator this process runs on: rocm, cuda or cpu."""

from __future__ import annotations

import shutil
import subprocess

import torch

PLATFORMS = ("rocm", "cuda", "cpu")


def detect() -> str:
    # ROCm builds of torch also answer torch.cuda; torch.version.hip tells them apart.
    if torch.cuda.is_available():
        return "rocm" if torch.version.hip else "cuda"
    return "cpu"


def device_name(platform: str) -> str:
    if platform == "cpu":
        return _cpu_model()
    return torch.cuda.get_device_name(0)


def device_arch(platform: str) -> str | None:
    if platform == "rocm":
        return torch.cuda.get_device_properties(0).gcnArchName.split(":")[0]
    if platform == "cuda":
        major, minor = torch.cuda.get_device_capability(0)
        return f"sm_{major}{minor}"
    return None


def driver_version(platform: str) -> str | None:
    if platform == "cuda":
        return _command_output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    if platform == "rocm":
        try:
            with open("/sys/module/amdgpu/version") as handle:
                return handle.read().strip()
        except OSError:
            return _command_output(["rocm-smi", "--showdriverversion"])
    return None


def synchronize(platform: str) -> None:
    if platform != "cpu":
        torch.cuda.synchronize()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def _command_output(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None
