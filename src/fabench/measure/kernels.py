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


def profile_call(fn: Callable[[], object], calls: int = 1) -> list[dict]:
    """Every device kernel `calls` calls of fn launch, in launch order, with its launch settings."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CUDA]
    with warnings.catch_warnings(), profile(activities=activities) as prof:
        warnings.simplefilter("ignore")  # the profiler warns about its cycles on every use
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return [_launch(e) for e in _kernel_events(prof)]


def call_spans_ms(fn: Callable[[], object], calls: int, launches_per_call: int | None,
                  timer) -> tuple[list[float] | None, str | None]:
    """The profiler's figures for `calls` calls in the device loop's conditions, or why there are none.

    As the device loop times it (fabench.measure.timing.DeviceTimer): the L2 cleared before each
    call, every call queued behind a GPU sleep long enough for the host to stay ahead, and the time
    from the call's first kernel's start to its last kernel's end (the gaps between its kernels
    included, as events include them). Summing kernel durations instead, with a warm L2, read 3-44%
    below the device medians on an H200. Each call's kernels are told apart by position: the trace
    holds the sleep, then per call the L2 clear and the call's `launches_per_call` kernels; a trace
    of another length is not read (the reason says so). The analysis stage takes their median.
    """
    if not launches_per_call:
        return None, "the kernels one call launches were not counted"
    from torch.profiler import ProfilerActivity, profile

    def queued_calls():
        timer.sleep_ahead(calls)
        for _ in range(calls):
            timer.clear_cache()
            fn()
        torch.cuda.synchronize()

    with warnings.catch_warnings(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        warnings.simplefilter("ignore")
        queued_calls()
    return spans_from_trace(_kernel_events(prof), calls, launches_per_call, timer.cache is not None)


def spans_from_trace(kernels: list[dict], calls: int, per_call: int, cleared: bool) -> tuple[list[float] | None, str | None]:
    """Each call's span (ms) from the trace's kernels in start order (see call_span_ms)."""
    per_block = per_call + (1 if cleared else 0)
    expected = 1 + calls * per_block
    if len(kernels) != expected:
        return None, (f"the trace holds {len(kernels)} kernels, not the {expected} expected (a sleep, then "
                      f"{calls} x ({'an L2 clear and ' if cleared else ''}{per_call} kernels))")
    spans = []
    for call in range(calls):
        first = 1 + call * per_block + (1 if cleared else 0)
        ours = kernels[first:first + per_call]
        spans.append((max(k["ts"] + k["dur"] for k in ours) - ours[0]["ts"]) / 1000.0)
    return spans, None


def _kernel_events(prof) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as handle:
            events = json.load(handle).get("traceEvents", [])
    kernels = [e for e in events if e.get("cat") == "kernel" and e.get("dur") is not None]
    kernels.sort(key=lambda e: e.get("ts", 0))
    return kernels


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
