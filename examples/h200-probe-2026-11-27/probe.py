"""Where a worker's first hand-over went on a GPU host (11.6 and 8.5 s on an H200): each step timed."""
import time
t = time.time()
def step(name):
    global t
    now = time.time(); print(f"{name}: {now - t:.2f} s", flush=True); t = now
import torch; step("import torch")
import fabench.measure.job; step("import fabench.measure.job")
import gc; gc.collect(); gc.freeze(); step("gc collect+freeze")
import torch._dynamo; step("import torch._dynamo")
torch.compiler.reset(); step("torch.compiler.reset")
from fabench.measure.launch.worker import forget_aiter_configs; print(forget_aiter_configs()); step("forget_aiter_configs")
gc.collect(); gc.freeze(); step("gc collect+freeze 2")
print("cuda initialised:", torch.cuda.is_initialized())
torch.ones(1, device="cuda"); torch.cuda.synchronize(); step("CUDA context")
import triton; step("import triton")
