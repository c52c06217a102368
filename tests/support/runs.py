"""Realistic finished runs for tests: results/<run>/ as the workflow leaves it, in result format v2.

    from support.runs import make_run, edit_backend
    run_dir = make_run(tmp_path / "results", "mi300x", versions=ROCM_7_0)

A run has two variants (default, tuned), four shapes at head_dim 256 and one at 64, and per backend
six trials (three processes x two). The numbers start from the published MI300X table; each trial
deviates by a small deterministic noise. Every figure derived from the trials is the analysis
stage's (fabench.analysis), as in a real run: this module computes no statistics. `edit_backend`
changes one backend's trials (a regression, wider noise, a failure) and derives the run again,
the way a rerun would have recorded it.

Everything written is what the runner, the collector and the renderer write: per-job files under
<variant>/, the collected results.json, report.md, config.json, report-config.json and
aiter-config/<variant>.json with its .meta.json.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
from pathlib import Path

from fabench.analysis import analyse_run
from fabench.analysis.entry import analyse_result
from fabench.results.collect import result_schema
from fabench.results.contract import SCHEMA_VERSION
from fabench.shapes import shape_id

SHAPES = [
    {"batch": 4, "seq": 512, "heads": 8, "head_dim": 256},
    {"batch": 4, "seq": 1024, "heads": 8, "head_dim": 256},
    {"batch": 4, "seq": 2048, "heads": 8, "head_dim": 256},
    {"batch": 4, "seq": 4096, "heads": 8, "head_dim": 256},
    {"batch": 4, "seq": 1024, "heads": 8, "head_dim": 64},
]

VARIANTS = {
    "default": {"title": "Before Tuning (Default Triton Config)", "label": "Default config",
                "triton": {"BLOCK_M": 128, "BLOCK_N": 64, "PRELOAD_V": False, "waves_per_eu": 2, "num_warps": 4,
                           "num_ctas": 1, "num_stages": 1}},
    "tuned": {"title": "After Tuning (Optimized Triton Config)", "label": "Tuned config",
              "triton": {"BLOCK_M": 64, "BLOCK_N": 32, "PRELOAD_V": True, "waves_per_eu": 2, "num_warps": 4,
                         "num_ctas": 1, "num_stages": 1}},
}

# Wall-clock milliseconds per (variant, seq, head_dim): the published MI300X numbers
# (report/published/mi300x-2025-12-30.yaml) where it printed them, plausible values elsewhere.
BASE_MS = {
    ("default", 512, 256): {"native": 0.274, "ck": 0.183, "triton": 0.436},
    ("default", 1024, 256): {"native": 0.897, "ck": 0.232, "triton": 0.546},
    ("default", 2048, 256): {"native": 3.077, "ck": 0.450, "triton": 1.040},
    ("default", 4096, 256): {"native": 10.303, "ck": 1.002, "triton": 2.672},
    ("default", 1024, 64): {"native": 0.512, "ck": 0.153, "triton": 0.196},
    ("tuned", 512, 256): {"native": 0.278, "ck": 0.181, "triton": 0.162},
    ("tuned", 1024, 256): {"native": 0.900, "ck": 0.228, "triton": 0.235},
    ("tuned", 2048, 256): {"native": 3.073, "ck": 0.447, "triton": 0.511},
    ("tuned", 4096, 256): {"native": 10.267, "ck": 1.008, "triton": 1.368},
    ("tuned", 1024, 64): {"native": 0.511, "ck": 0.154, "triton": 0.152},
}

LABELS = {"native": "Native", "ck": "CK", "triton": "Triton", "sdpa": "SDPA", "sdpa_cudnn": "SDPA (cuDNN)",
          "sdpa_flash": "SDPA (flash)", "flex": "FlexAttention"}
ROLES = {"rocm": {"baseline": "native", "vendor": "ck", "triton": "triton"},
         "cuda": {"baseline": "native", "vendor": "sdpa_cudnn", "triton": "flex"},
         "cpu": {"baseline": "native", "vendor": "sdpa", "triton": "flex"}}

ROCM_6_4 = {"platform": "rocm", "device": "AMD Instinct MI300X", "arch": "gfx942", "driver": "6.10.5",
            "hip": "6.4.43482", "cuda": None, "cudnn": None, "torch": "2.7.1+rocm6.4", "triton": "3.3.1",
            "aiter": "0.1.4", "aiter_commit": "4e2f8b1c0d9a7e6f5b4c3d2e1f0a9b8c7d6e5f4a"}
ROCM_7_0 = {**ROCM_6_4, "driver": "6.12.12", "hip": "7.0.51831", "torch": "2.8.0+rocm7.0.2", "triton": "3.5.0",
            "aiter": "0.1.5", "aiter_commit": "bfe8107fa6c0ebf90f365e0c992a59afd73875ee"}
CUDA_13_0 = {"platform": "cuda", "device": "NVIDIA H200", "arch": "sm_90", "driver": "580.159.04", "hip": None,
             "cuda": "13.0", "cudnn": 91900, "torch": "2.11.0+cu130", "triton": "3.6.0", "aiter": None,
             "aiter_commit": None, "gpu_uuid": "GPU-4c4c66c3-764a-4e84-d5b9-ced8f82aea6f"}
CPU = {"platform": "cpu", "device": "cpu", "arch": "x86_64", "driver": None, "hip": None, "cuda": None,
       "cudnn": None, "torch": "2.13.0+cpu", "triton": None, "aiter": None, "aiter_commit": None}

PROCESSES, TRIALS_PER_PROCESS = 3, 2
DEVICE_SHARE = 0.94  # device time / wall-clock time of a trial: the rest is launch overhead
WALL = "perf_counter around the timed loop, device synchronize after every iteration; mean ms per iteration"


def v2_schema() -> dict:
    """The checkout's result schema (kept for the tests that write it beside a run)."""
    return copy.deepcopy(result_schema())


def write_v2_schema(path: Path) -> Path:
    path.write_text(json.dumps(v2_schema(), indent=2))
    return path


def make_trials(ms: float, rng: random.Random, noise: float, has_device: bool, iters: int) -> list[dict]:
    trials = []
    for i in range(PROCESSES * TRIALS_PER_PROCESS):
        wall = ms * (1 + rng.uniform(-noise, noise))
        trials.append({"process": i // TRIALS_PER_PROCESS, "index": i % TRIALS_PER_PROCESS, "iters": iters,
                       "wall_mean_ms": wall, "device_ms": wall * DEVICE_SHARE if has_device else None,
                       "warmup_iters": 10,
                       "gpu_state": {"start": {"temperature_c": 46 + i % 3, "sm_clock_mhz": 2100},
                                     "end": {"temperature_c": 47 + i % 3, "sm_clock_mhz": 2100}}})
    return trials


# ---------------------------------------------------------------- one result

def _ok_backend(name: str, ms: float, rng: random.Random, noise: float, has_device: bool, iters: int,
                kernel_config=None, notes: list[str] = ()) -> dict:
    """The raw entry a measuring process records; fabench.analysis fills the figures."""
    return {
        "label": LABELS[name], "status": "ok", "reason": None, "failure_kind": None,
        "wall_mean_ms": None, "device_ms": None, "tflops": None,
        "correctness": {"max_abs_err": 0.0009765625, "cosine": 0.9999996, "finite": True, "passed": True},
        "kernel_config": kernel_config, "trials": make_trials(ms, rng, noise, has_device, iters), "stats": None,
        "host_overhead_ms": None, "cross_check": None,
        "kernels": {"names": [f"{name}_fwd_kernel"], "launch": None, "source_sha256": None}, "compile_s": None,
        "observations": {"notes": list(notes), "do_bench_reason": None},
    }


def not_ok_backend(name: str, status: str, reason: str, failure_kind: str | None = None) -> dict:
    return {"label": LABELS[name], "status": status, "reason": reason, "failure_kind": failure_kind,
            "wall_mean_ms": None, "device_ms": None, "tflops": None, "correctness": None, "kernel_config": None,
            "trials": [], "stats": None, "host_overhead_ms": None, "cross_check": None, "kernels": None,
            "compile_s": None, "observations": {"notes": [], "do_bench_reason": None}}


def make_result(run: str, variant: str, shape: dict, versions: dict, seed: int = 0, noise: float = 0.004,
                started: str = "2026-01-05T10:00:00+00:00") -> dict:
    platform = versions["platform"]
    rng = random.Random(f"{seed}-{variant}-{shape_id(shape)}")
    base = BASE_MS.get((variant, shape["seq"], shape["head_dim"]),
                       {"native": 0.001 * shape["seq"], "ck": 0.0004 * shape["seq"], "triton": 0.0005 * shape["seq"]})
    flops = 2.0 * shape["batch"] * shape["heads"] * shape["seq"] ** 2 * shape["head_dim"]
    has_device = platform != "cpu"
    iters = 100 if has_device else 2
    triton_config = {"path": f"results/{run}/aiter-config/{variant}.json", "sha256": "0" * 64,
                     "values": dict(VARIANTS[variant]["triton"])}
    roles = ROLES[platform]
    backends = {}
    for name in ("native", "ck", "triton", "sdpa", "sdpa_cudnn", "sdpa_flash", "flex"):
        ms = {"native": base["native"], roles["vendor"]: base["ck"], roles["triton"]: base["triton"]}.get(name)
        if ms is None:
            backends[name] = not_ok_backend(name, "unavailable", f"not a role on {platform} in this fixture")
        elif name in ("ck", "triton") and platform != "rocm":
            backends[name] = not_ok_backend(name, "unavailable", f"needs ROCm and AMD's aiter (this host: {platform})")
        else:
            config = triton_config["values"] if name == roles["triton"] else None
            backends[name] = _ok_backend(name, ms, rng, noise, has_device, iters, config)
    provenance = {
        "started": started, "finished": started.replace("10:00:00", "10:00:09"), "host": "bench-01",
        "os": "Linux-6.8.0-x86_64-with-glibc2.39", "python": "3.12.3", "platform": platform,
        "device": versions["device"], "arch": versions["arch"], "device_count": 1, "visible_devices": None,
        "driver": versions["driver"], "cuda": versions["cuda"], "hip": versions["hip"], "cudnn": versions["cudnn"],
        "torch": versions["torch"], "triton": versions["triton"], "aiter": versions["aiter"],
        "aiter_commit": versions["aiter_commit"], "runtime": "docker" if platform == "rocm" else "local",
        "image": "fabench:3f2a9c1b" if platform == "rocm" else None,
        "image_id": "sha256:" + "ab" * 32 if platform == "rocm" else None,
        "project_commit": "50a5654c3b1f0e2d4a6b8c9d0e1f2a3b4c5d6e7f",
        "config_sha256": hashlib.sha256(run.encode()).hexdigest(),
        "command": ["python", "-m", "fabench.measure", "--spec", "..."],
        # Only some fixtures name their card, as archives made before provenance.gpu do not.
        **({"gpu": {"uuid": versions["gpu_uuid"], "power_limit_w": 700.0}} if versions.get("gpu_uuid") else {}),
    }
    return analyse_result({
        "schema_version": SCHEMA_VERSION, "run": run, "variant": variant, "shape": dict(shape), "shape_id": shape_id(shape),
        "dtype": "float16", "causal": True, "platform": platform, "roles": dict(roles),
        "method": {"warmup": 10, "iters": iters, "reduced": not has_device, "wall": WALL,
                   "device_timer": {"rocm": "hip-events", "cuda": "cuda-events"}.get(platform),
                   "processes": PROCESSES, "trials_per_process": TRIALS_PER_PROCESS, "stable_spread": 0.2,
                   "trials": TRIALS_PER_PROCESS, "repeats": PROCESSES, "min_trial_ms": 20 if has_device else 0,
                   "device_time": "eager calls queued behind a GPU sleep" if has_device else None,
                   "clear_l2": has_device},
        "flops": flops, "flop_convention": "causal: half of the dense 4*B*H*S^2*D (non-causal: the dense count)",
        "tolerance": {"max_abs_err": 0.02, "min_cosine": 0.999}, "kernel_config": triton_config,
        "backends": backends, "provenance": provenance,
    })


# ---------------------------------------------------------------- a run directory

def config_for(run: str, shapes: list[dict], variants: list[str]) -> dict:
    return {"run": run, "runtime": "auto", "dtype": "float16", "causal": True, "seed": 0, "warmup": 10, "iters": 100,
            "cpu": {"warmup": 1, "iters": 2}, "shapes": shapes,
            "backends": ["native", "ck", "triton", "sdpa", "sdpa_cudnn", "sdpa_flash", "flex"],
            "roles": ROLES, "tolerance": {"max_abs_err": 0.02, "min_cosine": 0.999},
            "variants": {v: VARIANTS[v] for v in variants},
            "published": "report/published/mi300x-2025-12-30.yaml"}


def dump(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2) + "\n")


def make_run(results_root: Path, run: str = "mi300x", versions: dict = ROCM_7_0, seed: int = 0,
             shapes: list[dict] | None = None, variants: tuple[str, ...] = ("default", "tuned"),
             noise: float = 0.004, report: bool = True) -> Path:
    """results_root/<run>/ holding a finished run; returns that directory."""
    shapes = copy.deepcopy(shapes or SHAPES)
    run_dir = Path(results_root) / run
    results = [make_result(run, v, s, versions, seed=seed, noise=noise) for v in variants for s in shapes]
    for result in results:
        dump(run_dir / result["variant"] / f"{result['shape_id']}.json", result)
    write_results(run_dir, analyse_run({"run": run, "results": copy.deepcopy(results)}))
    config = config_for(run, shapes, list(variants))
    dump(run_dir / "config.json", config)
    dump(run_dir / "report-config.json", config)
    for variant in variants:
        dump(run_dir / "aiter-config" / f"{variant}.json", {"fwd": {"default": VARIANTS[variant]["triton"]}})
        dump(run_dir / "aiter-config" / f"{variant}.meta.json",
             {"base_path": None, "base_sha256": None, "patched_sha256": "0" * 64,
              "overrides": VARIANTS[variant]["triton"], "mount_target": None})
    if report:
        (run_dir / "report.md").write_text(f"# Flash Attention Kernel Benchmark Report\n\nRun `{run}` on "
                                           f"{versions['device']}.\n")
    return run_dir


def read_results(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "results.json").read_text())


def write_results(run_dir: Path, collected: dict) -> None:
    dump(Path(run_dir) / "results.json", collected)


def find(collected: dict, variant: str, shape: str) -> dict:
    return next(r for r in collected["results"] if r["variant"] == variant and r["shape_id"] == shape)


def edit_backend(run_dir: Path, variant: str, shape: str, backend: str, factor: float = 1.0,
                 noise: float | None = None, unstable_reason: str | None = None, status: str | None = None,
                 reason: str | None = None, failure_kind: str | None = None, seed: int = 1) -> dict:
    """Change one backend of a stored run as a rerun would have: every trial scaled by `factor`
    (and given a relative noise of ±`noise` around the new median when given; `unstable_reason`
    recorded as a note of the measuring process), the run derived again by the analysis; or the
    backend turned failed/unavailable. Returns the new backend entry."""
    collected = read_results(run_dir)
    result = find(collected, variant, shape)
    entry = result["backends"][backend]
    if status is not None and status != "ok":
        entry.update(not_ok_backend(backend, status, reason or "failed in the fixture", failure_kind))
    else:
        rng = random.Random(seed)
        center = entry["stats"][entry["stats"]["judged"]]["median"]  # the figure the comparison reads
        for trial in entry["trials"]:
            if noise is None:
                device = (trial["device_ms"] or trial["wall_mean_ms"]) * factor
            else:  # redrawn around the scaled median
                device = center * factor * (1 + rng.uniform(-noise, noise))
            has_device = trial["device_ms"] is not None
            trial["wall_mean_ms"] = device / DEVICE_SHARE if has_device else device
            if has_device:
                trial["device_ms"] = device
        if unstable_reason:
            entry["observations"]["notes"].append(unstable_reason)
    write_results(run_dir, analyse_run(collected))
    return entry
