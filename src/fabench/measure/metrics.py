"""Throughput and correctness metrics: small functions over tensors and samples.
(How time is measured is fabench.measure.device.timing; statistics over trials fabench.analysis.)"""

from __future__ import annotations

import math

import torch


def attention_flops(batch: int, seq: int, heads: int, head_dim: int, causal: bool) -> float:
    dense = 4.0 * batch * heads * seq * seq * head_dim
    return dense / 2 if causal else dense


def compare(out: torch.Tensor, reference: torch.Tensor, tolerance) -> dict:
    """Max abs error and cosine similarity against the fp32 reference, summed in fp64; passed when
    within `tolerance` (fabench.measure.spec.Tolerance)."""
    out32, ref32 = out.double().flatten(), reference.double().flatten()
    if out32.shape != ref32.shape:
        raise ValueError(f"output has {out32.numel()} elements, the reference {ref32.numel()}")
    finite = bool(torch.isfinite(out32).all())
    max_abs = float((out32 - ref32).abs().max()) if finite else math.inf
    cosine = float(torch.nn.functional.cosine_similarity(out32, ref32, dim=0)) if finite else -1.0
    passed = finite and max_abs <= tolerance.max_abs_err and cosine >= tolerance.min_cosine
    return {"max_abs_err": max_abs if finite else None, "cosine": cosine if finite else None,
            "finite": finite, "passed": passed}
