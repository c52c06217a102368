"""How much shared memory (CUDA) or LDS (ROCm) one block of aiter's Triton MHA forward needs, by a
model of the tiles its `_attn_fwd` keeps on chip, so a candidate that cannot fit is skipped before
it is compiled. The model is checked, not trusted: the sweep records every real compile failure
with the model's figure beside it, the shared memory each kernel that ran actually used (from the
profiler), and (sweep.check_pruned) whether a pruned candidate really fails to compile.

The kernel (aiter/ops/triton/_triton_kernels/mha.py): one block owns BLOCK_M query rows; it loads
its Q tile (BLOCK_M x D) once, then walks the keys in steps of BLOCK_N, loading a K tile and a V
tile (BLOCK_N x D each) per step for two dots, Q K^T and P V. D is the head dim padded to a power
of two (BLOCK_DMODEL_POW2, at least 16). The loop over the unmasked blocks is software-pipelined
with the config's num_stages; the loop over the masked (causal diagonal) blocks is not.

CUDA (Triton's NVIDIA backend): dot operands pass through shared memory. The Q tile stays there
for the whole loop and the pipeliner keeps num_stages buffers of each of K and V:
    bytes = e x D x (BLOCK_M + 2 x num_stages x BLOCK_N),  e = bytes per element (fp16: 2)
On an H200, 128/128 with 2 stages at D=256: 2 x 256 x (128 + 2 x 2 x 128) = 327,680 bytes, the
figure Triton reported when it refused that config (232,448 available).

ROCm (Triton's AMD backend, LDS): each operand goes through LDS to reach the MFMA layout and the
buffer is free again once converted, so the largest tile converted at once counts, not their sum:
the Q tile, or the K tile (with PRELOAD_V, K and V are loaded together). num_stages above 1
adds num_stages - 1 LDS buffers of K and V (the stream pipeliner prefetches through registers
first):
    bytes = e x D x max(BLOCK_M, (2 if PRELOAD_V else 1) x BLOCK_N x max(1, num_stages - 1))
The published default, 128/64 at D=256 on an MI300X, then needs exactly its 64 KiB, and it runs.
This model has not yet been checked against an AMD GPU's compile failures: a ROCm sweep's
records are its check.

The published report's arithmetic (128x256 + 64x256 = 49,152 "bytes") counts elements, not
bytes: an fp16 element is 2 bytes.
"""

from __future__ import annotations

import re

from fabench.platforms import PlatformName

ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
# LDS per workgroup on CDNA 3 (MI300X), when torch does not report it.
ROCM_LDS_BYTES = 65536
_REQUIRED = re.compile(r"required:\s*(\d+)", re.IGNORECASE)


def padded_head_dim(head_dim: int) -> int:
    """BLOCK_DMODEL_POW2: the head dim padded to a power of two, at least 16."""
    return max(16, 1 << (head_dim - 1).bit_length())


def estimate(config: dict, head_dim: int, dtype: str, platform: str) -> dict:
    """{bytes, formula} for one block of the forward kernel with `config` (aiter's fwd entry)."""
    e, d = ELEMENT_BYTES[dtype], padded_head_dim(head_dim)
    m, n, stages = config["BLOCK_M"], config["BLOCK_N"], max(1, config.get("num_stages", 1))
    if platform == PlatformName.ROCM:
        preload = 2 if config.get("PRELOAD_V") else 1
        buffers = max(1, stages - 1)
        rows = max(m, preload * n * buffers)
        return {"bytes": e * d * rows,
                "formula": f"{e} x {d} x max({m}, {preload} x {n} x {buffers})"}
    return {"bytes": e * d * (m + 2 * stages * n), "formula": f"{e} x {d} x ({m} + 2 x {stages} x {n})"}


def device_limit(platform: str) -> int | None:
    """Shared memory one block may use on device 0 (CUDA: the opt-in maximum; ROCm: LDS per
    workgroup); None on a CPU, where nothing is pruned."""
    if not PlatformName.parse(platform).is_gpu:
        return None
    from fabench.measure.device.accelerator import named

    props = named(platform).device_properties()
    if platform == PlatformName.CUDA:
        return getattr(props, "shared_memory_per_block_optin", None) or props.shared_memory_per_block
    return getattr(props, "shared_memory_per_block", None) or ROCM_LDS_BYTES


def required_bytes(reason: str | None) -> int | None:
    """The bytes a refused compile asked for ("Required: 327680" in Triton's OutOfResources)."""
    found = _REQUIRED.search(reason or "")
    return int(found.group(1)) if found else None
