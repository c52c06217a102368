"""Timing, throughput and correctness metrics: small functions over tensors and samples."""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable

import torch

from fabench.measure.platform import synchronize



def wall_mean_ms(fn: Callable[[], object], platform: str, warmup: int, iters: int) -> float:
    """The published report's method, kept so our numbers compare with its numbers."""
    for _ in range(warmup):
        fn()
        synchronize(platform)
    synchronize(platform)
    start = time.perf_counter()
    for _ in range(iters):
        fn()
        synchronize(platform)
    return (time.perf_counter() - start) / iters * 1000.0


def device_samples_ms(fn: Callable[[], object], iters: int) -> list[float]:
    """Per-iteration device time from events (CUDA or HIP): no host overhead in the figure."""
    pairs = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in pairs]


def summarize(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "median": statistics.median(ordered),
        "p10": _percentile(ordered, 0.10),
        "p90": _percentile(ordered, 0.90),
        "mean": statistics.fmean(ordered),
        "n": len(ordered),
    }


def _percentile(ordered: list[float], q: float) -> float:
    # Linear interpolation between closest ranks, as numpy's default.
    pos = (len(ordered) - 1) * q
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def attention_flops(batch: int, seq: int, heads: int, head_dim: int, causal: bool) -> float:
    dense = 4.0 * batch * heads * seq * seq * head_dim
    return dense / 2 if causal else dense


def tflops(flops: float, ms: float | None) -> float | None:
    if not ms or ms <= 0:
        return None
    return flops / (ms * 1e-3) / 1e12


def compare(out: torch.Tensor, reference: torch.Tensor, tolerance: dict) -> dict:
    """Max abs error and cosine similarity against the fp32 reference, summed in fp64."""
    out32, ref32 = out.double().flatten(), reference.double().flatten()
    if out32.shape != ref32.shape:
        raise ValueError(f"output has {out32.numel()} elements, the reference {ref32.numel()}")
    finite = bool(torch.isfinite(out32).all())
    max_abs = float((out32 - ref32).abs().max()) if finite else math.inf
    cosine = float(torch.nn.functional.cosine_similarity(out32, ref32, dim=0)) if finite else -1.0
    passed = finite and max_abs <= tolerance["max_abs_err"] and cosine >= tolerance["min_cosine"]
    return {"max_abs_err": max_abs if finite else None, "cosine": cosine if finite else None,
            "finite": finite, "passed": passed}
