"""The peer: NVIDIA's nvbench (cuda-bench) timing the kernels a default fabench run times, on one card.

Its defaults: cold measurement (L2 flushed, launches held behind a blocking kernel), the stdrel
stopping criterion, 0.5 s minimum GPU time per state. Writes nvbench's JSON and a summary line
with the wall time per state, for the speed issue's "process time per cell against nvbench's time
per state". Usage: python tools/nvbench_peer.py OUT.json (cuda-bench imported only then:
tools/nvbench_table.py reads its states' shapes from here on any host).
"""
import json
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# The states: SDPA's backends at each shape (the axis `shape` is an index into SHAPES), and native
# fp32 at NATIVE_SHAPE.
SHAPES = [(4, 512, 8, 256), (4, 1024, 8, 256), (4, 2048, 8, 256), (4, 4096, 8, 256), (4, 1024, 8, 64)]
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
NATIVE_SHAPE = (4, 4096, 8, 256)


def inputs(shape, dtype):
    b, s, h, d = shape
    g = torch.Generator(device="cuda").manual_seed(0)
    return [torch.randn(b, h, s, d, device="cuda", dtype=dtype, generator=g) for _ in range(3)]


def native(q, k, v):
    s = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
    mask = torch.triu(torch.ones(s, s, device=q.device, dtype=torch.bool), 1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), -1) @ v


def sdpa_state(state):
    shape = SHAPES[state.get_int64("shape")]
    backend = BACKENDS[state.get_string("backend")]
    q, k, v = inputs(shape, torch.float16)

    def launch(l):
        with torch.cuda.stream(torch.cuda.ExternalStream(l.get_stream().addressof())):
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with sdpa_kernel(backend):
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.cuda.synchronize()
    state.exec(launch)


def native_state(state):
    q, k, v = inputs(NATIVE_SHAPE, torch.float32)

    def launch(l):
        with torch.cuda.stream(torch.cuda.ExternalStream(l.get_stream().addressof())):
            native(q, k, v)
    native(q, k, v)
    torch.cuda.synchronize()
    state.exec(launch)


def main(out: str) -> None:
    import cuda.bench as bench

    bench.register(sdpa_state).add_int64_axis("shape", list(range(len(SHAPES)))).add_string_axis("backend", list(BACKENDS))
    bench.register(native_state)
    began = time.perf_counter()
    bench.run_all_benchmarks(["nvbench_peer", "--json", out])
    wall = time.perf_counter() - began
    states = len(SHAPES) * len(BACKENDS) + 1
    print(json.dumps({"states": states, "wall_s": round(wall, 2), "s_per_state": round(wall / states, 2),
                      "shapes": SHAPES}))


if __name__ == "__main__":
    main(sys.argv[1])
