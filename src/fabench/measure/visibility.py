"""The environment that says which GPUs a process sees, and the lease that chose its GPU: the one list
of the visibility variables, read by the host's GPUs and the lease (launch/devices, launch/lease),
the measuring worker's identity (launch/worker_client), a result's provenance and the planner's
platform (fabench.planned_platform).

Torch-free: the runner and the container launcher (which never import torch) write it, the
measuring process (fabench.measure.provenance) reads it back into its result.
"""

from __future__ import annotations

# Every variable that narrows the GPUs torch sees, on either vendor.
VISIBLE_VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
# The ones each platform's runtime reads, the one applied first first: ROCr's (HIP then numbers the
# devices ROCr shows), then HIP's, which also reads CUDA's; CUDA reads its own only.
PLATFORM_VARS = {"rocm": ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
                 "cuda": ("CUDA_VISIBLE_DEVICES",)}
# The job's GPU lease (fabench.measure.launch.lease), as JSON, for the processes the job starts.
LEASE_ENV = "FABENCH_DEVICE_LEASE"


def visible_devices(platform: str, env: dict[str, str]) -> str | None:
    """What narrows the GPUs a process of `platform` sees: the first of its variables set (on a CPU,
    the first of all of them: a GPU leased to a job that found none), or None."""
    return next((env[var] for var in PLATFORM_VARS.get(platform, VISIBLE_VARS) if env.get(var)), None)
