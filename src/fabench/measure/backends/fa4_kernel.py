"""FlashAttention-4's forward (the `flash-attn-4` package: Python over NVIDIA's CuTe DSL, which
compiles the kernel at the first call of each shape), as the `fa4` backend, on NVIDIA sm90 and later.

Whether it can run is decided from the platform, the GPU's compute capability and the installed
distributions' metadata alone: `flash_attn` is imported by `prepare`, on a host that passed, or
by a measuring worker's start-up where it is installed (import_interface; on a CPU or ROCm host
nothing of it is loaded). The kernel reads no
variant config: FlashAttention-4 chooses its own tiles per shape and GPU.

Its compiled kernels persist, as Triton's and Inductor's do, in a folder of the compile cache that
the measuring process's environment names (fabench.measure.invocation.CACHE_ENV); within a worker
the package's own in-memory cache serves every later job of the same shape.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from typing import Callable

from fabench.platforms import PlatformName

DISTRIBUTION = "flash-attn-4"
DSL_DISTRIBUTION = "nvidia-cutlass-dsl"
MIN_CAPABILITY = (9, 0)  # its Hopper forward (FlashAttentionForwardSm90) and later architectures
INTERFACE = "flash_attn.cute.interface"
# Every forward kernel of the package is a FlashAttentionForwardSm<arch> class; the profiler names
# its launch `kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90...`.
KERNEL_MARK = "FlashAttentionForward"
INSTALL = "pip install -r envs/gpu.txt, or pip install -e '.[fa4]'"


def installed_version(distribution: str = DISTRIBUTION) -> str | None:
    """The installed version of a distribution, from its metadata (nothing is imported)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def unavailable_reason(platform: str, capability: Callable[[], tuple[int, int]] | None = None) -> str | None:
    """Why FlashAttention-4 cannot run here, in one line, or None. `capability` gives the GPU's
    (major, minor), asked only on a CUDA host (default: torch's, of device 0)."""
    if platform != PlatformName.CUDA:
        return f"needs an NVIDIA GPU of sm90 or later (this host: {platform})"
    if capability is None:
        import torch

        capability = lambda: torch.cuda.get_device_capability(0)  # noqa: E731
    major, minor = capability()
    if (major, minor) < MIN_CAPABILITY:
        return (f"needs an NVIDIA GPU of sm{MIN_CAPABILITY[0]}{MIN_CAPABILITY[1]} or later "
                f"(this GPU: sm{major}{minor})")
    if installed_version() is None:
        return f"{DISTRIBUTION} is not installed ({INSTALL})"
    if importlib.util.find_spec("flash_attn") is None:
        return f"{DISTRIBUTION} is installed but no `flash_attn` package is on the path ({INSTALL})"
    if installed_version(DSL_DISTRIBUTION) is None:
        return f"{DSL_DISTRIBUTION}, which {DISTRIBUTION} compiles with, is not installed ({INSTALL})"
    return None


def attention_output(returned):
    """The attention output of flash_attn_func's return value: the output tensor, or the first of the
    (output, log-sum-exp) pair that version 4 returns."""
    if isinstance(returned, (tuple, list)):
        if not returned:
            raise TypeError("flash_attn_func returned an empty sequence, not the attention output")
        return returned[0]
    return returned


def import_interface():
    """The package's interface module, imported (2.5-4 s on an H200 host, the CuTe DSL's compiler
    included). Its import asks the driver for the GPU's compute capability (cuInit and device
    attributes) but creates no context: a measuring worker imports it at start-up
    (registry.Backend.start_up; tests/test_worker.py checks on a GPU that a worker holds no context)."""
    if installed_version() is None:
        raise ImportError(f"{DISTRIBUTION} is not installed ({INSTALL})")
    return importlib.import_module(INTERFACE)


def forward(q, k, v, causal: bool) -> Callable[[], object]:
    """The zero-argument call the harness times: flash_attn_func on (batch, seq, heads, dim) inputs,
    its output (batch, seq, heads, dim). Imports the package (a GPU host that passed the check)."""
    interface = import_interface()
    attend = interface.flash_attn_func
    return lambda: attention_output(attend(q, k, v, causal=causal))


def implementation() -> dict:
    """What ran, for the report's columns."""
    dsl = installed_version(DSL_DISTRIBUTION)
    return {"kernel": f"FlashAttention-4 forward ({INTERFACE}.flash_attn_func)",
            "package": f"{DISTRIBUTION} {installed_version()}",
            "compiler": f"CuTe DSL JIT ({DSL_DISTRIBUTION} {dsl})"}


def not_its_kernel(names: list[str]) -> str | None:
    """Why the kernels a call launched are not FlashAttention-4's forward, or None when one is."""
    if any(KERNEL_MARK in (name or "") for name in names):
        return None
    return f"flash_attn_func launched no {KERNEL_MARK} kernel; kernels seen: " + ", ".join(sorted(set(names))[:6])
