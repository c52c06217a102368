"""Stage 2, measure: one job (variant, shape) in one process, every backend, one JSON result.

The wing is four rooms, each importing only the rooms below it (tests/test_imports.py):

* launch/   starts and watches the measuring processes: the `python -m fabench.measure` command
            (runner), the one launcher of a process, the measuring worker and its client, the GPU
            lease and the host's GPUs. Torch-free but for the worker, which runs the job.
* here      the measurement itself: the job spec (spec) and the sweep job's (sweep_spec), how a
            measuring process is invoked (invocation), the job (job), its inputs and fp32
            reference (inputs), one backend's trials in it (cell), when a trial stops
            (stopping), where and with what it ran (provenance) and every card of its host (host_cards), its phases (timeline),
            its metrics, the variables that hand a process its GPU (visibility), what a
            result records (record: fabench.results.contract hands it on to the readers), and
            what a process observes beyond its trials, as coded kinds (observations).
* backends/ what is measured: the backends (registry), aiter's kernel loader, why a backend failed.
* device/   the accelerator: the platform, the GPU's clocks and state, the device timers, graph
            replays and the profiled kernels.

Nothing here imports fabench.results or fabench.analysis: they read what this stage writes.
"""
