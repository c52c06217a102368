"""The accelerator: the platform (CUDA, ROCm or CPU), the GPU's clocks and state, the device timers
and their rules, graph replays, and the kernels a profiler sees.

May import: the job's timing settings (fabench.measure.spec) and where a package's version is read
(fabench.measure.provenance); no backend, cell or job, and nothing of launch/.
"""
