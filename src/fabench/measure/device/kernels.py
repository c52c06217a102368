"""The kernels behind a figure: what one call launches, and for Inductor's kernels how.

One profiled call gives every device kernel's name, grid, block, registers and shared memory
(from the profiler's trace). For kernels Inductor generated (compiled FlexAttention) the
generated module also tells the block sizes, num_warps and num_stages it chose, how many configs
it could choose from (more than one means a benchmark-based choice at run time), and the source
that was compiled, hashed so two processes can be compared.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import warnings
from typing import Callable

import torch

from fabench.measure.device.accelerator import here
from fabench.measure.device.timing import MAX_SLEEP_FACTOR


def profile_call(fn: Callable[[], object], calls: int = 1) -> list[dict]:
    """Every device kernel `calls` calls of fn launch, in launch order, with its launch settings."""
    from torch.profiler import profile

    with warnings.catch_warnings(), profile(activities=here().profiler_activities()) as prof:
        warnings.simplefilter("ignore")  # the profiler warns about its cycles on every use
        for _ in range(calls):
            fn()
        here().synchronize()
    # The chrome trace: it alone carries each kernel's launch settings (grid, block, registers).
    return [_launch(e) for e in device_work(_chrome_trace_events(prof))]


# What the device figure and the period beside it are, in words (each result's method records them).
KERNEL_TIME = ("the kernels' own time per call: the durations of the kernels one call launches, summed, from "
               "CUPTI through torch.profiler (as Nsight and tritonbench's profiler latency mode), the calls run "
               "back to back behind a GPU sleep; the gaps between kernels are not in it")
PERIOD = ("the per-call time of that back-to-back stream: one call's start to the next one's, gaps and the L2 "
          "clear (when configured) included; measured by CUDA/HIP events and, in the profiled streams, by CUPTI")

_profiler_warm = False


def warm_profiler() -> None:
    """Pay the profiler's first-use cost (CUPTI's and Kineto's set-up: 4.7 s a process on an H100)
    once per process, on a tiny op, before any cell's figures are taken; a long-lived worker pays it
    once for all its jobs."""
    global _profiler_warm
    if _profiler_warm:
        return
    from torch.profiler import profile

    with warnings.catch_warnings(), profile(activities=here().profiler_activities()):
        warnings.simplefilter("ignore")
        torch.zeros(1, device=here().device).add_(1)
        here().synchronize()
    _profiler_warm = True


def profiled_chunks(timer, counts: list[int]) -> tuple[list[dict], list[tuple[list[float], list[float], bool]],
                                                      list[int]]:
    """The trace's kernels of `counts` chunks run by the device timer under the profiler (each chunk a
    GPU sleep, then per call the L2 clear when configured and the call between its events; after
    the last chunk a closing sleep), each chunk's (event pairs, event periods, fed) from the same
    stream, and every sleep's SM cycles in queue order: one stream per batch gives the kernels' own
    time (CUPTI), the event pair around each call (do_bench's quantity), the per-call period by both
    clocks, and the SM clock each chunk left (stream_figures). The sleep-ahead is sized for the host's
    rate under the profiler (DeviceTimer.stream_kind); a stream not fed doubles the next one's
    sleep, as the plain loop does."""
    from torch.profiler import profile

    with timer.stream_kind("profiled"):
        with warnings.catch_warnings(), profile(activities=here().profiler_activities()) as prof:
            warnings.simplefilter("ignore")
            chunks = timer.run_chunks(counts)
            timer.closing_sleep()
            here().synchronize()
        if not all(chunk[2] for chunk in chunks):
            timer.sleep_factor = min(timer.sleep_factor * 2, MAX_SLEEP_FACTOR)
    return _kernel_events(prof), chunks, list(timer.sleep_cycles)


def stream_figures(kernels: list[dict], counts: list[int], per_call: int, cleared: bool,
                   sleep_cycles: list[int] | None = None, read_clocks: bool = False) -> tuple[dict | None, str | None]:
    """The kernels' own time of each call, the per-call period and each kernel's time, from the trace
    of chunks of calls (kernels in start order; ts and dur in us), or why the trace cannot be read.

    A chunk is the timer's sleep, then per call `per_call` kernels, an L2 clear before them when
    `cleared`; where `sleep_cycles` holds one more sleep than there are chunks, the stream ends with
    a closing sleep. Calls are told apart by position, so a trace of another length is not read.
    kernel_ms: the durations of the call's own kernels summed (what Nsight and tritonbench's
    profiler latency mode report; the clear, the sleep and the gaps between kernels are not in it).
    period_ms: from the start of one call's block (its clear, else its first kernel) to the next
    one's, within a chunk: the per-call time of the back-to-back stream, gaps included.
    by_kernel: each kernel name's summed duration (us) over all calls, for its share of a call.
    sleep_clock_mhz (with `read_clocks`: a platform whose sleep counts SM cycles, and a closing
    sleep): per chunk, the SM clock of the sleep right after it, that sleep's cycles over its own
    duration: the clock the chunk's load held the GPU at. A power-capped kernel's clock moves from
    chunk to chunk and its time with it; the clock read by NVML once after a trial's loop does not
    follow that (on an H200 the cycles it gave spread more than the times). fabench.analysis.entry
    turns both into the clock-normalised figure of a capped cell."""
    block = per_call + (1 if cleared else 0)
    closing = sleep_cycles is not None and len(sleep_cycles) == len(counts) + 1
    expected = sum(1 + count * block for count in counts) + (1 if closing else 0)
    if len(kernels) != expected:
        return None, (f"the trace holds {len(kernels)} kernels, not the {expected} expected ({len(counts)} chunk(s) "
                      f"of a sleep, then per call {'an L2 clear and ' if cleared else ''}{per_call} kernel(s)"
                      f"{', then a closing sleep' if closing else ''})")
    kernel_ms, period_ms, by_kernel, sleeps, at = [], [], {}, [], 0
    for count in counts:
        sleeps.append(kernels[at])
        at += 1  # the sleep
        starts = []
        for _ in range(count):
            starts.append(kernels[at]["ts"])
            ours = kernels[at + block - per_call: at + block]
            kernel_ms.append(sum(k["dur"] for k in ours) / 1000.0)
            for k in ours:
                by_kernel[k.get("name")] = by_kernel.get(k.get("name"), 0.0) + k["dur"]
            at += block
        period_ms += [(b - a) / 1000.0 for a, b in zip(starts, starts[1:])]
    figures = {"kernel_ms": kernel_ms, "period_ms": period_ms, "by_kernel": by_kernel}
    if closing and read_clocks:
        after = [(cycles, sleep.get("dur", 0)) for cycles, sleep in zip(sleep_cycles[1:], sleeps[1:] + [kernels[at]])]
        if all(dur > 0 for _, dur in after):
            figures["sleep_clock_mhz"] = [round(cycles / dur, 1) for cycles, dur in after]  # cycles per us: MHz
    return figures, None


def kernel_shares(by_kernel: dict, calls: int) -> list[dict]:
    """Each kernel's mean time per call (us) and share of the call's kernel time, longest first."""
    total = sum(by_kernel.values()) or 1.0
    return [{"name": name, "us_per_call": round(us / calls, 4), "share": round(us / total, 4)}
            for name, us in sorted(by_kernel.items(), key=lambda item: -item[1])]


def _kernel_events(prof) -> list[dict]:
    """The profile's device work as chrome-trace-like dicts (ts and dur in us). Read from Kineto's
    events directly (ten times faster than writing and parsing the chrome trace: 0.01 s against
    0.1 s for 11,000 events on a CPU, and a kernel loop reads one trace per batch); from the chrome
    trace where that reads no device work (an older torch, another naming): the same categories."""
    try:
        work = device_work([{"cat": _category(e), "name": e.name(), "ts": e.start_ns() / 1000.0,
                             "dur": e.duration_ns() / 1000.0, "args": {}} for e in prof.profiler.kineto_results.events()])
    except (AttributeError, RuntimeError, TypeError):
        work = []
    return work or device_work(_chrome_trace_events(prof))


def _category(event) -> str | None:
    """A Kineto event's trace category: its activity type where torch exposes it; else, for work on
    the device, what its name says (Kineto names memsets and copies so), else a kernel."""
    activity = getattr(event, "activity_type", None)
    if activity is not None:
        return activity()
    if "cuda" not in str(event.device_type()).lower():
        return None
    name = event.name()
    return "gpu_memset" if name.startswith("Memset") else "gpu_memcpy" if name.startswith("Memcpy") else "kernel"


def _chrome_trace_events(prof) -> list[dict]:
    """The profile's chrome trace events. A profile can be exported once only ("Trace is already
    saved" on the second export), so the events are kept on the profile for any later reader."""
    cached = getattr(prof, "_fabench_trace_events", None)
    if cached is not None:
        return cached
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as handle:
            events = json.load(handle).get("traceEvents", [])
    prof._fabench_trace_events = events
    return events


# The trace's categories of a call's own device work: kernels, and the memsets and copies a library
# issues as such rather than as kernels (a cuDNN call's memset may be either, by version).
DEVICE_WORK = ("kernel", "gpu_memset", "gpu_memcpy")


def device_work(events: list[dict]) -> list[dict]:
    """The trace events that are device work (DEVICE_WORK), in start order."""
    work = [e for e in events if e.get("cat") in DEVICE_WORK and e.get("dur") is not None]
    work.sort(key=lambda e: e.get("ts", 0))
    return work


def _launch(event: dict) -> dict:
    args = event.get("args", {})
    return {"name": event.get("name"), "duration_us": event.get("dur"), "grid": args.get("grid"),
            "block": args.get("block"), "registers_per_thread": args.get("registers per thread"),
            "shared_memory": args.get("shared memory")}


def kernel_names(launches: list[dict]) -> list[str]:
    """Distinct names in launch order."""
    return list(dict.fromkeys(launch["name"] for launch in launches))


class InductorModules:
    """Inductor's generated modules loaded during a `with` block (the first, compiling call).

    Disabled for backends that compile nothing, so they do not import Inductor at all.
    """

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.modules: list = []

    def __enter__(self) -> "InductorModules":
        self.before = {id(m) for m in _loaded_modules()} if self.enabled else set()
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.modules = [m for m in _loaded_modules() if id(m) not in self.before]


def _loaded_modules() -> list:
    try:
        from torch._inductor.codecache import PyCodeCache
    except ImportError:
        return []
    return list(PyCodeCache.modules)


def inductor_kernels(modules: list) -> dict[str, object]:
    """Name -> Inductor's kernel object (a CachingAutotuner) in the generated modules."""
    found = {}
    for module in modules:
        for name, value in vars(module).items():
            if hasattr(value, "launchers") and hasattr(value, "configs") and hasattr(value, "fn"):
                found[getattr(value, "inductor_meta", {}).get("kernel_name") or name] = value
    return found


def inductor_launch(autotuner) -> dict:
    """The launch settings Inductor chose for one kernel, and how many it chose among.

    Pointwise kernels get their block sizes as config kwargs; templates (FlexAttention) bake them
    into the source as constexpr constants, so both are read.
    """
    launcher = autotuner.launchers[0] if autotuner.launchers else None
    config = getattr(launcher, "config", None) or (autotuner.configs[0] if autotuner.configs else None)
    sizes = dict(_source_constants(kernel_source(autotuner) or ""))
    sizes.update(dict(getattr(config, "kwargs", {}) or {}))
    return {
        "block_sizes": {k: v for k, v in sizes.items() if k.startswith(("BLOCK", "SPARSE", "XBLOCK", "YBLOCK",
                                                                         "RBLOCK", "R0_BLOCK"))},
        "num_warps": getattr(config, "num_warps", None),
        "num_stages": getattr(config, "num_stages", None),
        # None once Inductor has dropped its config list after compiling (it does): unknown then.
        "candidate_configs": len(autotuner.configs) if autotuner.configs else None,
        "registers": getattr(launcher, "n_regs", None),
        "spills": getattr(launcher, "n_spills", None),
        "shared_memory": getattr(launcher, "shared", None),
        "launcher": type(launcher).__name__ if launcher is not None else None,
    }


def _source_constants(source: str) -> list[tuple[str, int]]:
    """NAME : tl.constexpr = 64 lines of a generated Triton kernel."""
    return [(name, int(value)) for name, value in
            re.findall(r"^\s*([A-Z][A-Z0-9_]*)\s*:\s*tl\.constexpr\s*=\s*(-?\d+)\s*$", source, re.MULTILINE)]


def kernel_source(autotuner) -> str | None:
    fn = getattr(autotuner, "fn", None)
    return getattr(fn, "src", None) or getattr(getattr(fn, "fn", None), "src", None)


def describe(launches: list[dict] | None, modules: list | None) -> dict:
    """The backend entry's `kernels`: names, the main kernel's launch settings, source hashes.

    `launches` None: the process did not profile (only a job's first process does); names and
    launch are then None, and only `generated_sha256` (every kernel the compiling call generated)
    is known, which every process records so that the merge can compare them.

    The main kernel is the one that ran longest in the profiled call. For Inductor kernels its
    settings come from the generated module (plus grid and block from the trace) and the hash is
    of the Triton source of every generated kernel launched; otherwise launch holds what the
    trace shows and there is no source to hash.
    """
    if launches is None:  # not profiled in this process: what Inductor generated still tells
        return {"names": None, "launch": None, "source_sha256": None,
                "generated_sha256": _source_digest(inductor_kernels(modules or []))}
    names = kernel_names(launches)
    if not launches:
        return {"names": [], "launch": None, "source_sha256": None}
    main = max(launches, key=lambda launch: launch.get("duration_us") or 0)
    launch = {"kernel": main["name"], **{k: main[k] for k in ("grid", "block", "registers_per_thread",
                                                               "shared_memory")}}
    generated = inductor_kernels(modules or [])
    # Matched by name; Inductor's naming has changed between releases, so when no name matches,
    # every kernel the compiling call generated is taken as the backend's.
    ours = {name: generated[name] for name in names if name in generated} or generated
    chosen = ours.get(main["name"]) or (next(iter(ours.values())) if len(ours) == 1 else None)
    if chosen is not None:
        try:
            launch.update(inductor_launch(chosen))
        except Exception as err:  # Inductor's internals move between releases: say so, go on
            launch["inductor_error"] = f"{type(err).__name__}: {err}"
    return {"names": names, "launch": launch, "source_sha256": _source_digest(ours),
            "generated_sha256": _source_digest(generated)}


def _source_digest(generated: dict) -> str | None:
    """sha256 of the Triton source of the generated kernels, by name; None without (all) sources."""
    sources = [kernel_source(generated[name]) for name in sorted(generated)]
    if not generated or not all(sources):
        return None
    return hashlib.sha256("\n".join(sources).encode()).hexdigest()
