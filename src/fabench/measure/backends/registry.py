"""Every attention backend, registered in one place.

A backend is a small record: a label, an availability check (returns why it cannot run here, or
None) and a `prepare` function that builds the zero-argument callable the harness times. Inputs
are converted to each backend's layout and dtype in `prepare`, outside the timed call, exactly as
the published report does.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import importlib.util
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager

import torch
import torch.nn.functional as F

from fabench.measure.backends import aiter_kernel, fa4_kernel
from fabench.places import process_scratch
from fabench.platforms import PlatformName


class FallbackError(RuntimeError):
    """A compiled backend ran something other than its compiled kernel."""


class ConfigMismatchError(RuntimeError):
    """The kernel read another config than the patched one the job is measuring."""


@dataclass
class Problem:
    q: torch.Tensor  # (batch, seq, heads, head_dim), fp16, on the device
    k: torch.Tensor
    v: torch.Tensor
    causal: bool
    platform: str
    kernel_config: dict  # the variant's patched aiter fwd.default entry
    kernel_config_path: Path | None = None  # the variant's patched aiter config file (what aiter's loader reads)


@dataclass
class Prepared:
    fn: Callable[[], torch.Tensor]
    layout: str = "bshd"  # layout of fn's output; the harness compares in bshd
    context: Callable[[], ContextManager] = contextlib.nullcontext
    verify: Callable[[], None] | None = None  # after the first call: raise if it ran the wrong thing
    kernel_config: dict | None = None
    # What ran, for the report's columns: kernel, package and version, compiler (None: precompiled).
    implementation: dict | None = None


@dataclass(frozen=True)
class Backend:
    name: str
    label: str
    unavailable: Callable[[str], str | None]
    prepare: Callable[[Problem], Prepared]
    compiled: bool = False  # its first call compiles a kernel: that call's time is recorded as compile_s
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Whether its kernel depends on the variant's config (Problem.kernel_config, aiter's patched file).
    # One that does not is measured once per shape, in the jobs of the run's first variant, and shown
    # in every variant's table (fabench.results.shared). A new backend that does not read the config
    # says so here; left True, it is measured in every variant's job, correct but slower.
    reads_variant_config: bool = True
    # What a measuring worker imports for it at its start-up, before any job (fabench.measure.launch.worker):
    # imports only, touching no device, since a worker started ahead starts while another job measures
    # on its GPU. Saves the first job of each worker that import (FlashAttention-4: 2.5-4 s on an H200).
    start_up: Callable[[], None] | None = None


def _bhsd(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(1, 2).contiguous()


# --- availability checks --------------------------------------------------------------------

def _anywhere(platform: str) -> str | None:
    return None


def _gpu_only(platform: str) -> str | None:
    return None if PlatformName.parse(platform).is_gpu else f"needs a GPU (this host: {platform})"


def _cuda_only(platform: str) -> str | None:
    return None if platform == PlatformName.CUDA else f"needs CUDA (this host: {platform})"


def _aiter_ck(platform: str) -> str | None:
    if platform != PlatformName.ROCM:
        return f"needs ROCm: aiter's CK kernels are HIP code (this host: {platform})"
    return aiter_kernel.unavailable_reason()


def _aiter_triton(platform: str) -> str | None:
    # aiter's Triton kernel is plain Triton: it runs wherever Triton drives a GPU (ROCm or CUDA).
    if not PlatformName.parse(platform).is_gpu:
        return f"needs a GPU that Triton compiles for (this host: {platform})"
    return aiter_kernel.unavailable_reason()


def _flex(platform: str) -> str | None:
    # Inductor compiles FlexAttention to Triton kernels on a GPU and to C++ on a CPU.
    try:
        importlib.import_module("torch.nn.attention.flex_attention")
    except ImportError as err:
        return f"this torch has no FlexAttention ({err})"
    return None


# --- native: the report's O(N^2) path -------------------------------------------------------

def native_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """The published report's reference path: fp32 (batch, heads, seq, dim), mask built per call."""
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.size(-1))
    if causal:
        seq = q.size(2)
        mask = torch.triu(torch.ones(seq, seq, device=q.device), diagonal=1).bool()
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.matmul(F.softmax(scores, dim=-1), v)


def _prepare_native(p: Problem) -> Prepared:
    q, k, v = (_bhsd(t).float() for t in (p.q, p.k, p.v))
    return Prepared(fn=lambda: native_attention(q, k, v, p.causal), layout="bhsd",
                    implementation={"kernel": "eager fp32 matmul, mask, softmax, matmul (the report's native path)",
                                    "package": f"torch {torch.__version__}", "compiler": None})


# --- torch SDPA, free to choose its kernel or pinned to one ------------------------------------

def _prepare_sdpa(p: Problem, pinned: str | None = None) -> Prepared:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (_bhsd(t) for t in (p.q, p.k, p.v))
    context = (lambda: sdpa_kernel([getattr(SDPBackend, pinned)])) if pinned else contextlib.nullcontext
    return Prepared(
        fn=lambda: F.scaled_dot_product_attention(q, k, v, is_causal=p.causal),
        layout="bhsd",
        context=context,
        kernel_config={"sdpa_backend": pinned or "torch's choice"},
        implementation={"kernel": f"torch scaled_dot_product_attention ({_SDPA_NAMES.get(pinned, pinned)})",
                        "package": _torch_package(pinned), "compiler": None},
    )


_SDPA_NAMES = {None: "torch's choice of kernel", "CUDNN_ATTENTION": "pinned to cuDNN",
               "FLASH_ATTENTION": "pinned to its flash-attention kernel"}


def _torch_package(pinned: str | None) -> str:
    if pinned == "CUDNN_ATTENTION" and torch.backends.cudnn.is_available():
        return f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}"
    return f"torch {torch.__version__}"


# --- FlexAttention, compiled by Inductor into a Triton kernel ---------------------------------

FLEX_KERNEL_KEYS = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")


def flex_kernel_options(kernel_config: dict) -> tuple[dict, list[str]]:
    """The variant's aiter keys that FlexAttention understands, and the (AMD-only) rest."""
    options = {key: kernel_config[key] for key in FLEX_KERNEL_KEYS if key in kernel_config}
    ignored = sorted(set(kernel_config) - set(options))
    return options, ignored


def _prepare_flex(p: Problem) -> Prepared:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    q, k, v = (_bhsd(t) for t in (p.q, p.k, p.v))
    seq = q.size(2)
    block_mask = None
    if p.causal:
        block_mask = create_block_mask(
            lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, B=None, H=None, Q_LEN=seq, KV_LEN=seq, device=q.device
        )
    options, ignored = flex_kernel_options(p.kernel_config)
    compiled = torch.compile(flex_attention, fullgraph=True, dynamic=False)
    return Prepared(
        fn=lambda: compiled(q, k, v, block_mask=block_mask, kernel_options=options),
        layout="bhsd",
        verify=lambda: _require_compiled_code(lambda: compiled(q, k, v, block_mask=block_mask,
                                                                      kernel_options=options), p.platform),
        kernel_config={"kernel_options": options, "ignored": ignored},
        implementation={"kernel": "FlexAttention compiled by torch.compile (Inductor)",
                        "package": f"torch {torch.__version__}",
                        "compiler": "Inductor C++ (CPU)" if p.platform == PlatformName.CPU else _triton_compiler()},
    )


def _triton_compiler() -> str:
    try:
        return aiter_kernel.compiler_description()
    except Exception:  # no Triton driver: say so rather than guess
        return "Inductor Triton (backend unknown)"


def _require_compiled_code(fn: Callable[[], torch.Tensor], platform: str) -> None:
    """Profile one call: the compiled path runs Inductor's code, the eager fallback does not.

    torch._dynamo falls back to eager code without an error when, for example, its recompile limit
    is reached; the result is right and about 50x slower, so it must be caught, not timed. Inductor's
    compiled graph shows as a "CompiledFxGraph" call in a host-side profile on any platform. On a GPU
    the device profile is the fallback proof when the host-side one shows none (Inductor's naming
    moves between releases): its code is a Triton kernel. The host-side profile comes first because
    the device profiler's first use in a process costs seconds.
    """
    names = _cpu_profile_names(fn)
    if any("CompiledFxGraph" in name for name in names):
        return
    if platform == PlatformName.CPU:
        raise FallbackError("compiled FlexAttention ran no Inductor graph (eager fallback); ops seen: "
                            + ", ".join(sorted(n for n in names if n.startswith("aten::"))[:6]))
    from fabench.measure.device.kernels import profile_call

    kernels = [launch["name"] for launch in profile_call(fn)]
    if not any("triton" in name for name in kernels):
        raise FallbackError(
            "compiled FlexAttention ran no Triton kernel (eager fallback); kernels seen: "
            + ", ".join(sorted(set(kernels))[:6])
        )


def _cpu_profile_names(fn: Callable[[], torch.Tensor]) -> set[str]:
    import warnings

    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings(), profile(activities=[ProfilerActivity.CPU]) as prof:
        warnings.simplefilter("ignore")
        fn()
    return {event.name for event in prof.events()}


# --- aiter: CK (ROCm) and its Triton kernel (ROCm and CUDA) -----------------------------------------

def _prepare_ck(p: Problem) -> Prepared:
    aiter_kernel.load_aiter(p.platform)
    from aiter import flash_attn_func

    q, k, v = p.q, p.k, p.v
    return Prepared(fn=lambda: flash_attn_func(q, k, v, causal=p.causal, return_lse=True)[0],
                    implementation={"kernel": "aiter CK flash attention forward (aiter.flash_attn_func)",
                                    "package": _aiter_package(), "compiler": "CK (HIP), built by aiter"})


def _prepare_aiter_triton(p: Problem) -> Prepared:
    """aiter's Triton MHA forward with the variant's patched config file, read by aiter's own loader.

    The values aiter's loader returns go to the launch (config=), less the options this platform's
    Triton refuses, which are recorded as not applied. A loader that returns anything but the
    patched values fails the cell (config_mismatch): the kernel would run another config.
    """
    if p.kernel_config_path is None:
        raise ConfigMismatchError("no patched aiter config file was given to the job (--aiter-config): "
                                  "aiter's loader would read its packaged config, not the variant's")
    module = aiter_kernel.api_module(p.platform)
    loader, placed = aiter_kernel.load_patched(p.platform, p.kernel_config_path, p.q.dtype, process_configs_dir())
    loaded = placed.pop("read_back")
    if loaded != p.kernel_config:
        raise ConfigMismatchError(f"aiter's loader read {loaded} from {placed['asked_for']}, "
                                  f"the patched config is {p.kernel_config}")
    applied, not_applied = aiter_kernel.launch_options(loaded, aiter_kernel.forward_kernel(loader))
    q, k, v = p.q, p.k, p.v
    return Prepared(
        fn=lambda: module.flash_attn_func(q, k, v, causal=p.causal, return_lse=True, config=applied)[0],
        kernel_config={"source": "aiter's config loader reading the patched file", "module": module.__name__,
                       **placed, "values": loaded, "launch": applied, "not_applied": not_applied},
        implementation={"kernel": f"aiter Triton MHA forward ({module.__name__}.flash_attn_func)",
                        "package": _aiter_package(), "compiler": aiter_kernel.compiler_description()},
    )


def _aiter_package() -> str | None:
    from fabench.aiter_config import aiter_version, installed_aiter_dir

    return aiter_version(installed_aiter_dir())


@functools.lru_cache(maxsize=1)
def process_configs_dir() -> str:
    """This process's own directory for aiter's configs: the installed package is never written.
    Removed at exit; when the process is killed first, by the next one (fabench.places.process_scratch)."""
    directory = process_scratch()
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return directory


# --- FlashAttention-4 (flash-attn-4, NVIDIA's CuTe DSL), NVIDIA sm90 and later ----------------------

def _prepare_fa4(p: Problem) -> Prepared:
    """flash_attn_func on the job's own (batch, seq, heads, dim) fp16 inputs. Its first call compiles
    (the package's JIT), so it is timed as compile_s; on a GPU the profiled call must show the
    package's own forward kernel."""
    fn = fa4_kernel.forward(p.q, p.k, p.v, p.causal)
    return Prepared(fn=fn, verify=lambda: _require_fa4_kernel(fn), implementation=fa4_kernel.implementation())


def _require_fa4_kernel(fn: Callable[[], torch.Tensor]) -> None:
    from fabench.measure.device.kernels import kernel_names, profile_call

    why = fa4_kernel.not_its_kernel(kernel_names(profile_call(fn)))
    if why:
        raise FallbackError(why)


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("native", "Native", _anywhere, _prepare_native, reads_variant_config=False),
        # aiter's CK kernels read none of the Triton config the variants patch.
        Backend("ck", "CK", _aiter_ck, _prepare_ck, reads_variant_config=False),
        Backend("triton", "Triton", _aiter_triton, _prepare_aiter_triton, compiled=True),
        Backend("sdpa", "SDPA", _anywhere, _prepare_sdpa, reads_variant_config=False),
        Backend("sdpa_cudnn", "SDPA (cuDNN)", _cuda_only, lambda p: _prepare_sdpa(p, "CUDNN_ATTENTION"),
                reads_variant_config=False),
        Backend("sdpa_flash", "SDPA (flash)", _gpu_only, lambda p: _prepare_sdpa(p, "FLASH_ATTENTION"),
                reads_variant_config=False),
        Backend("flex", "FlexAttention", _flex, _prepare_flex, compiled=True),
        Backend("fa4", "FlashAttention-4", fa4_kernel.unavailable_reason, _prepare_fa4, compiled=True,
                reads_variant_config=False, start_up=fa4_kernel.import_interface),
    )
}


def start_up(names) -> dict[str, str]:
    """The start-up imports of the named backends (Backend.start_up) that have one: each one's outcome,
    "imported" or why not (a failure is the job's to report, when its backend is prepared)."""
    done = {}
    for name in names:
        backend = BACKENDS.get(name)
        if backend is None or backend.start_up is None:
            continue
        try:
            backend.start_up()
            done[name] = "imported"
        except Exception as err:  # prepare meets it again and fails the cell with it
            done[name] = f"not imported: {type(err).__name__}: {err}"
    return done
