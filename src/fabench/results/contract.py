"""The result contract in code: the facts about a job's result that the runner writes and every
reader (collector, report, archive, compare) relies on. The JSON schema that checks a result file
is workflow/schemas/result.schema.json; a test keeps the two in agreement. Importing this module
needs no torch, so the host-side stages can use it.
"""

from __future__ import annotations

from fabench.resources import SCHEMA_DIR

# 3: process files hold raw observations only; every figure is fabench.analysis's (issue 15).
# 2: every measured backend carries its trials, their statistics, the host overhead, the
# do_bench cross-check, the kernels it launched and its compile time (issue 8).
SCHEMA_VERSION = 3
SCHEMA_PATH = SCHEMA_DIR / "result.schema.json"

# A process file that is no measurement: a process beyond its platform's repeats (planned for a
# GPU that the job did not find), which measured nothing and is left out of the merge.
SKIPPED_KEY = "_skipped"
# A process file made for a process that wrote no result (killed, crashed): every backend failed
# with why. Kept only when no process of the job measured; otherwise only its exit is recorded.
PROCESS_FAILED_KEY = "_process_failed"

FAILURE_KINDS = ("oom", "out_of_resources", "unsupported", "correctness", "fallback", "config_mismatch", "error")

WALL_METHOD = "perf_counter around the timed loop, device synchronize after every iteration; mean ms per iteration"
FLOP_CONVENTION = "causal: half of the dense 4*B*H*S^2*D (non-causal: the dense count)"


def backend_entry(label: str, **values) -> dict:
    """One backend's record in a result, every key present (None, or no trials, until measured).

    wall_mean_ms: median over trials of the published method's figure; device_ms: the trials'
    device figures as {median, p10, p90, mean, n}; trials: one record per trial (result.schema.json's trial);
    stats: median, 95% CI, spread and n per metric over the trials and the stability verdict;
    host_overhead_ms: wall_mean_ms minus the device median; cross_check: triton's do_bench;
    kernels: the kernel names one call launched, the main kernel's launch settings, the generated
    source's hash; compile_s: the first (compiling) call's time, for compiled backends;
    observations: notes on what cast doubt on the trials, and why do_bench did not run.
    The measuring process fills the raw keys (trials, correctness, kernels, compile_s,
    observations, status); fabench.analysis derives the others from them.
    """
    entry = {"label": label, "status": "ok", "reason": None, "failure_kind": None, "wall_mean_ms": None,
             "device_ms": None, "tflops": None, "correctness": None, "kernel_config": None,
             "trials": [], "stats": None, "host_overhead_ms": None, "cross_check": None, "kernels": None,
             "compile_s": None, "observations": {"notes": [], "do_bench_reason": None}}
    unknown = set(values) - set(entry) - {"speedup"}
    if unknown:
        raise KeyError(f"not a backend entry key: {', '.join(sorted(unknown))}")
    entry.update(values)
    return entry
