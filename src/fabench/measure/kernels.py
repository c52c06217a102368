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
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as handle:
            events = json.load(handle).get("traceEvents", [])
    kernels = [e for e in events if e.get("cat") == "kernel"]
    kernels.sort(key=lambda e: e.get("ts", 0))
    return [_launch(e) for e in kernels]


def kernel_time_ms(fn: Callable[[], object], calls: int) -> float | None:
    """The kernels' own device time per call (their trace durations summed, over `calls` calls),
    None when the trace holds no kernel durations."""
    durations = [launch["duration_us"] for launch in profile_call(fn, calls) if launch["duration_us"]]
    return sum(durations) / calls / 1000.0 if durations else None


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


def describe(launches: list[dict], modules: list | None) -> dict:
    """The backend entry's `kernels`: names, the main kernel's launch settings, source hash.

    The main kernel is the one that ran longest in the profiled call. For Inductor kernels its
    settings come from the generated module (plus grid and block from the trace) and the hash is
    of the Triton source of every generated kernel launched; otherwise launch holds what the
    trace shows and there is no source to hash.
    """
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
    sources = [kernel_source(ours[name]) for name in sorted(ours)]
    digest = None
    if ours and all(sources):
        digest = hashlib.sha256("\n".join(sources).encode()).hexdigest()
    return {"names": names, "launch": launch, "source_sha256": digest}
