"""What a measuring process records: the result file's version, the texts that name how it measured
and the settings it measured with (method_settings), the markers of a process file that holds no
measurement, and one backend's entry.

The measure stage writes these; the readers (fabench.results.contract re-exports them for the
collector, the report, the archive and compare) rely on them. The JSON schema that checks a result
file is workflow/schemas/result.schema.json; a test keeps the two in agreement. Torch-free.
"""

from __future__ import annotations

from fabench.measure.spec import Measurement
from fabench.measure.stopping import StopRule

# 3: process files hold raw observations only; every figure is fabench.analysis's (issue 15).
# 2: every measured backend carries its trials, their statistics, the host overhead, the
# do_bench cross-check, the kernels it launched and its compile time (issue 8).
SCHEMA_VERSION = 3

# 1 ns: below every clock fabench reads (CUDA events resolve about 0.5 us), so a time under it that
# is not zero was not measured. Zero is kept: an interval's lower end below it is clipped to zero
# (fabench.analysis.noise.interval), as results/bounds.py accepts.
MIN_MS = 1e-6
# 10^7 ms, about 2.8 hours: longer than any one figure fabench records (a trial, a call, a median);
# the longest in the committed runs is a CPU job's 36 s. An interval's upper end beyond it is
# clipped to it (fabench.analysis.noise.interval): two CPU processes 10x apart (two jobs sharing a
# 2-core host) gave a 0.04 ms cell a 95% prediction interval reaching 1.5e7 ms, and the run's CSV
# and report refused the run.
MAX_MS = 1e7

# A process file that is no measurement: a process beyond its platform's repeats (planned for a
# GPU that the job did not find), which measured nothing and is left out of the merge.
SKIPPED_KEY = "_skipped"
# A process file made for a process that wrote no result (killed, crashed): every backend failed
# with why. Kept only when no process of the job measured; otherwise only its exit is recorded.
PROCESS_FAILED_KEY = "_process_failed"
# On a result whose job left the backends that read no variant config to another variant's job of
# the same shape: {"measured_in": variant, "backends": [names]} (fabench.results.shared).
SHARED_KEY = "shared_backends"

FAILURE_KINDS = ("oom", "out_of_resources", "unsupported", "correctness", "fallback", "config_mismatch", "error")

WALL_METHOD = "perf_counter around the timed loop, device synchronize after every iteration; mean ms per iteration"
# The kernel time from graph replays (fabench.measure.device.graph_time), checked against CUPTI
# by fabench.analysis.kernel_check.
KERNEL_TIME_METHOD = ("CUDA/HIP graph of [L2 clear, call] x N minus a graph of [L2 clear] x N, each replayed and "
                      "timed by events; per call, against the kernels' own time by CUPTI")
# The events' timestamps resolve about 0.5 us (CUDA's documented resolution): a median period can be
# off by up to that much from quantisation alone, which no count of samples averages away.
EVENT_RESOLUTION_MS = 0.0005
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


def method_settings(job: Measurement) -> dict:
    """The settings part of a result's `method`, as `job` measures with them: the published
    method's counts and the timing used (the measuring process adds what it found: its device timer,
    the GPU's state, ...)."""
    timing, gpu = job.timing, job.platform.is_gpu
    return {
        "warmup": timing.warmup, "iters": timing.iters, "reduced": job.reduced, "wall": WALL_METHOD,
        "stopping": StopRule.from_timing(timing).describe() if gpu else None,
        "trials": timing.trials, "min_trial_ms": timing.min_trial_ms, "repeats": timing.repeats,
        "clear_l2": timing.clear_l2 and gpu,
        "local_memory": timing.local_memory if gpu else None,
        "warmup_settle": {"window_ms": timing.warmup_window_ms, "tolerance": timing.warmup_tolerance,
                          "clock_tolerance": timing.warmup_clock_tolerance, "min_ms": timing.min_warmup_ms,
                          "max_ms": timing.max_warmup_ms,
                          "agree_on": ["window median", "SM clock"] if gpu else []},
        "stable_spread": timing.stable_spread,
        "cross_check": {"do_bench": timing.do_bench and gpu, "tolerance": timing.cross_check_tolerance,
                        "kernel_time": KERNEL_TIME_METHOD if gpu else None},
    }
