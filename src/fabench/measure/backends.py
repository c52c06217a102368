"""Every attention backend, registered in one place.

A backend is a small record: a label, an availability check (returns why it cannot run here, or
None) and a `prepare` function that builds the zero-argument callable the harness times. Inputs
are converted to each backend's layout and dtype in `prepare`, outside the timed call, exactly as
the published report does.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import math
from dataclasses import dataclass, field
from typing import Callable, ContextManager

import torch
import torch.nn.functional as F

from fabench.container.aiter_config import find_mha_config, forward_config, installed_aiter_dir


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


@dataclass
class Prepared:
    fn: Callable[[], torch.Tensor]
    layout: str = "bshd"  # layout of fn's output; the harness compares in bshd
    context: Callable[[], ContextManager] = contextlib.nullcontext
    verify: Callable[[], None] | None = None  # after the first call: raise if it ran the wrong thing
    kernel_config: dict | None = None


@dataclass(frozen=True)
class Backend:
    name: str
    label: str
    unavailable: Callable[[str], str | None]
    prepare: Callable[[Problem], Prepared]
    compiled: bool = False  # its first call compiles a kernel: that call's time is recorded as compile_s
    notes: tuple[str, ...] = field(default_factory=tuple)


def _bhsd(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(1, 2).contiguous()


# --- availability checks --------------------------------------------------------------------

def _anywhere(platform: str) -> str | None:
    return None


def _gpu_only(platform: str) -> str | None:
    return None if platform in ("cuda", "rocm") else f"needs a GPU (this host: {platform})"


def _cuda_only(platform: str) -> str | None:
    return None if platform == "cuda" else f"needs CUDA (this host: {platform})"


def _aiter(platform: str) -> str | None:
    if platform != "rocm":
        return f"needs ROCm and AMD's aiter (this host: {platform})"
    if importlib.util.find_spec("aiter") is None:
        return "AMD's aiter is not installed (build the container, or install aiter from git)"
    return None


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
    return Prepared(fn=lambda: native_attention(q, k, v, p.causal), layout="bhsd")


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
    )


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
    )


def _require_compiled_code(fn: Callable[[], torch.Tensor], platform: str) -> None:
    """Profile one call: the compiled path runs Inductor's code, the eager fallback does not.

    torch._dynamo falls back to eager code without an error when, for example, its recompile limit
    is reached; the result is right and about 50x slower, so it must be caught, not timed. On a GPU
    Inductor's code is a Triton kernel; on a CPU, its compiled graph (a "CompiledFxGraph" call).
    """
    if platform == "cpu":
        names = _cpu_profile_names(fn)
        if not any("CompiledFxGraph" in name for name in names):
            raise FallbackError("compiled FlexAttention ran no Inductor graph (eager fallback); ops seen: "
                                + ", ".join(sorted(n for n in names if n.startswith("aten::"))[:6]))
        return
    from fabench.measure.kernels import profile_call

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


# --- aiter: CK and Triton flash attention (ROCm only) ------------------------------------------

TRITON_MHA_MODULES = ("aiter.ops.triton.mha", "aiter.ops.triton.attention.mha")


def aiter_triton_module():
    """aiter's Triton MHA module, wherever this aiter version keeps it."""
    for name in TRITON_MHA_MODULES:
        if importlib.util.find_spec(name.rsplit(".", 1)[0]) and importlib.util.find_spec(name):
            return importlib.import_module(name)
    raise ImportError(f"none of {', '.join(TRITON_MHA_MODULES)} in the installed aiter")


def _prepare_ck(p: Problem) -> Prepared:
    from aiter import flash_attn_func

    q, k, v = p.q, p.k, p.v
    return Prepared(fn=lambda: flash_attn_func(q, k, v, causal=p.causal, return_lse=True)[0])


def _packaged_forward_config() -> dict | None:
    aiter_dir = installed_aiter_dir()
    path = find_mha_config(aiter_dir) if aiter_dir else None
    if path is None:
        return None
    import json

    return forward_config(json.loads(path.read_text()))


def _prepare_aiter_triton(p: Problem) -> Prepared:
    module = aiter_triton_module()
    q, k, v = p.q, p.k, p.v
    # In the container the patched JSON is mounted over aiter's own file, and aiter reads it, as in
    # the report. Elsewhere the same values go in through the config= argument, which bypasses it.
    mounted = _packaged_forward_config() == p.kernel_config
    extra = {} if mounted else {"config": dict(p.kernel_config)}
    kernel_config = {"source": "aiter's config JSON (patched file in place)" if mounted else "config= argument",
                     "values": dict(p.kernel_config), "module": module.__name__}
    return Prepared(
        fn=lambda: module.flash_attn_func(q, k, v, causal=p.causal, return_lse=True, **extra)[0],
        kernel_config=kernel_config,
        verify=(lambda: _check_aiter_read(module, p.kernel_config, q.dtype, kernel_config)) if mounted else None,
    )


def _check_aiter_read(module, expected: dict, dtype: torch.dtype, record: dict) -> None:
    """Ask aiter which forward config it loaded (its _get_config, cached per process) and compare."""
    get_config = getattr(module, "_get_config", None)
    if get_config is None:
        record["effective"] = None
        record["note"] = f"{module.__name__} has no _get_config: the config aiter read could not be checked"
        return
    effective = dict(get_config(False, dtype))
    record["effective"] = effective
    if effective != expected:
        raise ConfigMismatchError(f"aiter's kernel read {effective}, the patched config is {expected}")


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("native", "Native", _anywhere, _prepare_native),
        Backend("ck", "CK", _aiter, _prepare_ck),
        Backend("triton", "Triton", _aiter, _prepare_aiter_triton, compiled=True),
        Backend("sdpa", "SDPA", _anywhere, _prepare_sdpa),
        Backend("sdpa_cudnn", "SDPA (cuDNN)", _cuda_only, lambda p: _prepare_sdpa(p, "CUDNN_ATTENTION")),
        Backend("sdpa_flash", "SDPA (flash)", _gpu_only, lambda p: _prepare_sdpa(p, "FLASH_ATTENTION")),
        Backend("flex", "FlexAttention", _flex, _prepare_flex, compiled=True),
    )
}
