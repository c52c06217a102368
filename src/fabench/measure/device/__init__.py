"""The accelerator: the platform (CUDA, ROCm or CPU) and every device primitive, the GPU's clocks and
state, the device timers and their rules, graph replays, and the kernels a profiler sees.

May import: the job's timing settings (fabench.measure.spec); no backend, cell or job, nothing of
launch/.
"""
