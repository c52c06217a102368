"""Launching the measuring processes: the runner (`python -m fabench.measure`), the launcher that
supervises one process, the measuring worker and its client, the GPU lease and the host's GPUs.

May import: the measurement's modules that say what a job is and how its process starts
(fabench.measure.spec, invocation, timeline, visibility), the host's cards (host_cards: the
driver's list the lease reads too), what a result records (record: a failed
process's result), the job itself (the worker runs it in its own interpreter), and what the worker
puts back between jobs: a backend's loaded config (backends/), the device's memory (device/).
Nothing in the measure wing imports this room; only the plan and the container launcher do.
Torch-free, except the worker.
"""
