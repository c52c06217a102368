"""A stand-in for aiter's Triton MHA module, for the sweep's CPU tests: aiter's call signature, right
numbers (torch's SDPA), and a known time per config (it sleeps), so the sweep's answer is known.

It behaves as aiter's kernel does on a GPU in the ways the sweep must handle: its launch refuses
waves_per_eu as Triton's CUDA backend does, it refuses a config that needs more shared memory
than HARDWARE_LIMIT with Triton's message, and one kind of config gives wrong numbers. Its
shared-memory need is the sweep's CUDA model times 1.2 (a tile the model leaves out), so a
config can fit by the model and still be refused, as on a real device the model may be wrong.
"""

import time

import torch

from fabench.tune import memory

HARDWARE_LIMIT = 40_000
# Tens of ms per call: on a loaded 2-core host a 2 ms sleep took 12 ms, so the known times must
# dwarf the host's noise for the sweep's answer to be known.
UNIT_MS = 50
# The fastest config at every shape, and one that is fastest only at seq 128.
BEST = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 1, "PRELOAD_V": True}
FAST_AT_128 = {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1, "PRELOAD_V": True}
REFERENCE = {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1, "PRELOAD_V": True}
REFUSED = "Keyword argument waves_per_eu was specified but unrecognised (stand-in of Triton's CUDA backend)"


def launch_options(config: dict) -> tuple[dict, dict]:
    applied = {key: value for key, value in config.items() if key != "waves_per_eu"}
    return applied, ({"waves_per_eu": REFUSED} if "waves_per_eu" in config else {})


def factor(config: dict, seq: int) -> float:
    """Time per call in units of UNIT_MS x seq/64."""
    mine = {key: config[key] for key in BEST}
    if mine == BEST:
        return 1.0
    if mine == FAST_AT_128:
        return 0.5 if seq == 128 else 4.0
    if mine == REFERENCE:
        return 2.0
    return 3.0


def known_ms(values: dict, seq: int) -> float:
    return factor(values, seq) * UNIT_MS * seq / 64


def wrong_numbers(config: dict) -> bool:
    return config["num_warps"] == 2 and not config["PRELOAD_V"]


def flash_attn_func(q, k, v, causal=False, return_lse=False, config=None):
    if "waves_per_eu" in config:
        raise TypeError(REFUSED)
    need = int(memory.estimate(config, q.shape[-1], "float16", "cuda")["bytes"] * 1.2)
    if need > HARDWARE_LIMIT:
        raise RuntimeError(f"out of resource: shared memory, Required: {need}, Hardware limit: {HARDWARE_LIMIT}. "
                           "Reducing block sizes or `num_stages` may help.")
    began = time.perf_counter()
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2).float(), k.transpose(1, 2).float(), v.transpose(1, 2).float(), is_causal=causal
    ).transpose(1, 2).to(q.dtype)
    if wrong_numbers(config):
        out = out + 0.5
    left = known_ms(config, q.shape[1]) / 1000 - (time.perf_counter() - began)
    if left > 0:
        time.sleep(left)
    lse = torch.zeros(q.shape[0], q.shape[2], q.shape[1])
    return out, lse
