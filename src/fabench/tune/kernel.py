"""The kernel a sweep times, and the record each candidate gets: what the sweep job (fabench.tune.job)
plans with and the measuring loop (fabench.tune.measure) fills in."""

from __future__ import annotations

import importlib

# aiter's forward kernel: a call whose profile shows no kernel of this name ran something else.
AITER_KERNEL = "_attn_fwd"


class Kernel:
    """The kernel swept: a module with aiter's flash_attn_func(q, k, v, causal=, return_lse=, config=),
    the launch options this platform's Triton accepts, and the name its device kernel carries."""

    def __init__(self, platform: str, module_name: str | None):
        self.module, self.reason, self.kernel_name = None, None, None
        self.launch_options = lambda config: (dict(config), {})
        try:
            if module_name:
                self.module = importlib.import_module(module_name)
                self.launch_options = getattr(self.module, "launch_options", self.launch_options)
            else:  # aiter's own, loaded as the benchmark's Triton backend loads it
                from fabench.measure.backends import aiter_kernel

                self.module = aiter_kernel.api_module(platform)
                kernel = aiter_kernel.forward_kernel(aiter_kernel.loader_module(platform))
                self.launch_options = lambda config: aiter_kernel.launch_options(config, kernel)
                self.kernel_name = AITER_KERNEL
        except Exception as err:  # reported for every candidate; the pick step names it
            self.reason = f"the kernel could not be loaded: {type(err).__name__}: {' '.join(str(err).split())[:300]}"


def candidate_record(candidate: dict, **values) -> dict:
    """A candidate's record: what it is, and how it fared (the keys every reader uses)."""
    record = {key: candidate[key] for key in ("id", "values", "config", "reference", "launch", "memory")}
    record.update({"status": None, "failure_kind": None, "reason": None, "figure": None, "ms": None, "ci95": None,
                   "spread": None, "n": 0, "stable": None, "unstable_reason": None, "correctness": None,
                   "compile_s": None, "kernel_shared_memory": None, "required_bytes": None, "pruned_check": None})
    record.update(values)
    return record
