"""What a job's backends are given and checked against: q, k, v (drawn on the CPU, kept for the
process's later jobs), the fp32 reference, and the variant's Triton config as aiter reads it. The job
(fabench.measure.job), the compile ahead (fabench.measure.precompile_child) and the sweep
(fabench.tune) make them here, so that each gives its kernels the same inputs.
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path

import torch

from fabench.aiter_config import file_sha256, forward_config
from fabench.measure.backends.registry import process_configs_dir
from fabench.measure.invocation import JobError
from fabench.measure.spec import Shape

# The inputs drawn on the CPU, by (shape, dtype, seed), kept for the process's later jobs: drawing
# them is most of a job's "inputs and fp32 reference" phase (1.1 s at (4,4096,8,256) on an H200
# host, 8.8 s of a default run), and a worker measures every variant of a shape. What they are is
# fixed by the key; each job gets fresh copies on its device. At most INPUT_CACHE_BYTES are kept
# (the default experiment's five shapes in fp16: 390 MB), the least recent dropped first.
_CPU_INPUTS: dict[tuple, tuple[torch.Tensor, ...]] = {}
INPUT_CACHE_BYTES = 1 << 30


def make_inputs(shape: Shape, dtype: torch.dtype, seed: int, device: str) -> tuple[torch.Tensor, ...]:
    """q, k, v in (batch, seq, heads, head_dim); drawn on the CPU so every platform gets the same."""
    return tuple(t.to(device, copy=True) for t in cpu_inputs(shape, dtype, seed))


def cpu_inputs(shape: Shape, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, ...]:
    """q, k, v on the CPU, drawn by `seed` or kept from an earlier draw of the key (the most recent
    kept last); never handed out to be written into (make_inputs copies them to the device)."""
    key = (shape.batch, shape.seq, shape.heads, shape.head_dim, str(dtype), seed)
    drawn = _CPU_INPUTS.pop(key, None)
    if drawn is None:
        gen = torch.Generator().manual_seed(seed)
        dims = (shape.batch, shape.seq, shape.heads, shape.head_dim)
        drawn = tuple(torch.randn(dims, generator=gen).to(dtype) for _ in range(3))
    _CPU_INPUTS[key] = drawn  # the most recent last
    while sum(t.numel() * t.element_size() for ts in _CPU_INPUTS.values() for t in ts) > INPUT_CACHE_BYTES:
        del _CPU_INPUTS[next(iter(_CPU_INPUTS))]
    return drawn


def draw_ahead(wanted: list[tuple[Shape, torch.dtype, int]]) -> int:
    """Draw the CPU inputs of `wanted` (shape, dtype, seed), in the order the jobs will ask for them,
    as many as the kept inputs' bound holds (one more would drop the first wanted); how many were
    drawn. CPU work alone: a measuring worker does it in its start-up (fabench.measure.launch.worker)."""
    drawn, size = 0, 0
    for shape, dtype, seed in dict.fromkeys(wanted):
        size += 3 * shape.batch * shape.seq * shape.heads * shape.head_dim * torch.empty((), dtype=dtype).element_size()
        if size > INPUT_CACHE_BYTES:
            break
        cpu_inputs(shape, dtype, seed)
        drawn += 1
    return drawn


def reference_output(q, k, v, causal: bool) -> torch.Tensor:
    """fp32 attention by torch's math SDPA (not our native code), one batch entry at a time; on a
    torch without SDPA (before 2.0) by the textbook formula, in fp32 too."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        attend, context = _textbook_attention, contextlib.nullcontext()
    else:
        attend, context = torch.nn.functional.scaled_dot_product_attention, sdpa_kernel([SDPBackend.MATH])
    outs = []
    with context:
        for b in range(q.size(0)):
            qb, kb, vb = (t[b : b + 1].transpose(1, 2).float() for t in (q, k, v))
            outs.append(attend(qb, kb, vb, is_causal=causal))
    return torch.cat(outs).transpose(1, 2).contiguous()


def _textbook_attention(q, k, v, is_causal: bool) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v, keys after the query masked out when causal."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
    if is_causal:
        seq = q.size(-2)
        allowed = torch.ones(seq, seq, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def kernel_config_record(triton: dict, path: Path | None, platform: str | None = None, dtype: str = "float16") -> dict:
    """The Triton-role config this job measures: from the patched file when given (what aiter reads),
    with what aiter's own loader read from that file wherever aiter is installed (CPU included)."""
    if path is None:
        return {"path": None, "sha256": None, "values": dict(triton)}
    try:
        patched = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise JobError(f"the variant's patched aiter config {path} cannot be read as JSON ({err}); "
                       f"delete it and run again to patch it anew") from None
    if not isinstance(patched, dict):
        raise JobError(f"the variant's patched aiter config {path} is not a JSON object; "
                       f"delete it and run again to patch it anew")
    record = {"path": str(path), "sha256": file_sha256(path), "values": forward_config(patched)}
    if platform is not None:
        record["aiter_loader"] = _aiter_loader_read(path, platform, dtype)
    return record


def _aiter_loader_read(path: Path, platform: str, dtype: str) -> dict:
    """aiter's loader run on the patched file: what it asked for and returned, or why it could not run."""
    from fabench.measure.backends import aiter_kernel

    reason = aiter_kernel.unavailable_reason()
    if reason:
        return {"read_back": None, "reason": reason}
    try:
        _, placed = aiter_kernel.load_patched(platform, path, getattr(torch, dtype), process_configs_dir())
    except Exception as err:  # recorded: the Triton backend fails its cell on the same cause
        return {"read_back": None, "reason": f"aiter's loader failed: {type(err).__name__}: {err}"}
    return placed
