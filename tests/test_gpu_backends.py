"""Backends on a real GPU: the failure modes a CPU cannot show. Skipped without CUDA."""

import pytest
import torch

from fabench.measure.backends import BACKENDS, FallbackError, Problem, _require_triton_kernel
from fabench.measure.job import measure_backend, reference_output

pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() and not torch.version.hip), reason="needs a CUDA GPU")

JOB = {"tolerance": {"max_abs_err": 0.02, "min_cosine": 0.999}, "warmup": 2, "iters": 3, "flops": 1.0}


def problem(head_dim, kernel_config, seq=512):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, seq, 4, head_dim, generator=gen).half().cuda() for _ in range(3))
    return Problem(q, k, v, True, "cuda", kernel_config)


def test_eager_flex_attention_is_caught_as_a_fallback():
    from torch.nn.attention.flex_attention import flex_attention

    p = problem(64, {})
    q, k, v = (t.transpose(1, 2).contiguous() for t in (p.q, p.k, p.v))
    with pytest.raises(FallbackError, match="ran no Triton kernel"):
        _require_triton_kernel(lambda: flex_attention(q, k, v))  # not compiled: the unfused path


def test_compiled_flex_runs_its_triton_kernel_and_is_right():
    p = problem(64, {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1, "PRELOAD_V": True})
    entry = measure_backend(BACKENDS["flex"], p, reference_output(p.q, p.k, p.v, True), JOB)
    assert entry["status"] == "ok", entry["reason"]
    assert entry["kernel_config"]["ignored"] == ["PRELOAD_V"]
    assert entry["device_ms"]["n"] == 3


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability(0) != (9, 0),
                    reason="the shared-memory limit checked is Hopper's (232448 bytes a block)")
def test_flex_tiles_too_big_for_shared_memory_become_a_failed_cell():
    # BLOCK_M=128, BLOCK_N=64 at head_dim 256 with 3 stages needs 128*256*2 + 3*(2*64*256*2) = 262144 bytes.
    p = problem(256, {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3})
    entry = measure_backend(BACKENDS["flex"], p, reference_output(p.q, p.k, p.v, True), JOB)
    assert entry["status"] == "failed" and entry["failure_kind"] == "out_of_resources", entry["reason"]
    assert "shared memory" in entry["reason"]
    after = measure_backend(BACKENDS["sdpa_cudnn"], p, reference_output(p.q, p.k, p.v, True), JOB)
    assert after["status"] == "ok"  # the process goes on measuring
