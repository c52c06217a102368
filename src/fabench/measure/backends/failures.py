"""A backend's (or the job's) exception as a failed cell: its kind and a reason a reader can act on."""

from __future__ import annotations

import re

import torch

from fabench.measure.backends.registry import ConfigMismatchError, FallbackError
from fabench.measure.device.accelerator import here

# CPU allocation failures: torch's allocator raises a RuntimeError with this text, Python a MemoryError.
CPU_OOM_MARKERS = ("defaultcpuallocator: can't allocate memory", "can't allocate memory",
                   "cannot allocate memory")


def classify_failure(err: BaseException) -> tuple[str, str]:
    """(failure_kind, reason) for an exception raised by a backend."""
    text = " ".join(str(err).split()) or type(err).__name__
    text = text.split(" Set TORCHDYNAMO_VERBOSE")[0]  # Inductor's advice on debugging, not the reason
    lowered = text.lower()
    if isinstance(err, FallbackError):
        return "fallback", text
    if isinstance(err, ConfigMismatchError):
        return "config_mismatch", text
    if (isinstance(err, (torch.cuda.OutOfMemoryError, MemoryError)) or "out of memory" in lowered
            or any(marker in lowered for marker in CPU_OOM_MARKERS)):
        return "oom", f"out of memory: {text[:240]}"
    if "out of resource" in lowered:
        start = lowered.find("out of resource")
        detail = text[start : start + 200]
        return "out_of_resources", f"out of {_exhausted_resource(err)}: {detail}"
    if isinstance(err, NotImplementedError) or any(
        s in lowered for s in ("no available kernel", "not supported", "unsupported", "head_dim", "headdim")
    ):
        return "unsupported", text[:300]
    return "error", f"{type(err).__name__}: {text[:300]}"


def _exhausted_resource(err: BaseException) -> str:
    """Which resource ran out: Triton's OutOfResources names it, but Inductor re-raises the message
    with the kernel's name in its place, so a limit equal to the device's shared memory per block
    identifies it too."""
    limit = re.search(r"hardware limit:\s*(\d+)", str(err), re.IGNORECASE)
    if limit and int(limit.group(1)) == _shared_memory_per_block():
        return "shared memory"
    seen = err
    while seen is not None:
        name = getattr(seen, "name", None)
        if isinstance(name, str) and getattr(seen, "limit", None) is not None:
            return name
        if "shared memory" in str(seen).lower():
            return "shared memory"
        seen = seen.__cause__ or seen.__context__
    return "resources"


def _shared_memory_per_block() -> int | None:
    return getattr(here().device_properties(), "shared_memory_per_block_optin", None)
