"""How many measure jobs Snakemake runs at once on a GPU host's local executor (its resource `gpu`,
one per measure job) and how many of its cores each takes (rule measure's threads); the plan asks
here (fabench.plan.Plan.measuring_slots, Plan.measure_threads) and workflow/rules/common.smk
registers the answer. A CPU host and a cluster executor are the plan's own cases.

On a GPU host a measure job computes nothing on the host's cores: it takes none (threads 0), and the
slots alone bound how many run. The run measures on N GPUs: the user's --resources gpu=N, else
min(--cores, the GPUs a job may lease here). Where N covers every GPU of that pool, the slots are two
per GPU: one job measuring, and the next job's launcher started beside it, ready, waiting for the
lease (fabench.measure.launch.lease), its interpreter, imports, spec check and workers' start-up
made while the GPU measures. On two H200s the launchers took 5.9 s of the 87 s the measure jobs
spanned, between one job's process and the next, each started only once the job before it had ended
(examples/h200-x2-house-2026-11-28, report w1). Where N is fewer than the pool, the slots stay N: a
launcher started ahead would lease a free GPU the run was not meant to use.
"""

from __future__ import annotations

from fabench.measure.launch.devices import DeviceError
from fabench.measure.launch.lease import locked_pool_size


def leasable_gpus(env: dict[str, str]) -> int:
    """How many GPUs a measure job's lease chooses among here; 0 where it locks none or the pool
    cannot be read (the plan's check of the environment names what is wrong: Plan.checked)."""
    try:
        return locked_pool_size(env)
    except DeviceError:
        return 0


def gpu_host_slots(given: int | None, cores: int | None, pool: int) -> tuple[int | None, str | None]:
    """The measuring slots on a GPU host's local executor, whose pool is `pool` GPUs (0: no lease
    locks here, and the slots are the user's --resources gpu, unset: any number), and a note."""
    if not pool:
        return given, None
    measured_on = given if given is not None else (pool if cores is None else min(cores, pool))
    if measured_on >= pool:
        return 2 * pool, None
    note = None if given is not None else (
        f"note: --cores {cores} on a host of {pool} GPUs: the jobs measure on {measured_on} GPU"
        f"{'s' if measured_on != 1 else ''} at a time, each "
        f"job's launcher started once the job before it has ended; --cores {pool} (or --resources gpu={pool}) "
        "measures on all, the next job's launcher ready beside each")
    return measured_on, note
