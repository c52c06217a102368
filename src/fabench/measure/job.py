"""One benchmark job: one (variant, shape), every configured backend in turn, one JSON result.

    python -m fabench.measure --spec '<job spec JSON>' \
        --aiter-config results/<run>/aiter-config/tuned.json --out OUT.json

The job spec (fabench.config.job_spec) holds the run name, the variant and its Triton config, the
shape and the run's shared settings: all the job measures, and nothing else.

A backend that cannot run here is recorded as unavailable, one that breaks as failed with its
reason; neither stops the job. Only bad arguments or an unwritable output fail the process.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
from pathlib import Path

import torch

from fabench.measure import metrics, provenance
from fabench.measure import platform as plat
from fabench.container.aiter_config import file_sha256, forward_config
from fabench.measure.backends import BACKENDS, Backend, ConfigMismatchError, FallbackError, Problem
from fabench.config import sha256_json
from fabench.results.contract import FLOP_CONVENTION, SCHEMA_VERSION, WALL_METHOD, backend_entry
from fabench.shapes import shape_id
from fabench.watchdog import watch_workflow


def make_inputs(shape: dict, dtype: torch.dtype, seed: int, device: str) -> tuple[torch.Tensor, ...]:
    """q, k, v in (batch, seq, heads, head_dim); drawn on the CPU so every platform gets the same."""
    gen = torch.Generator().manual_seed(seed)
    dims = (shape["batch"], shape["seq"], shape["heads"], shape["head_dim"])
    return tuple(torch.randn(dims, generator=gen).to(dtype).to(device) for _ in range(3))


def reference_output(q, k, v, causal: bool) -> torch.Tensor:
    """fp32 attention by torch's math SDPA (not our native code), one batch entry at a time."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    outs = []
    with sdpa_kernel([SDPBackend.MATH]):
        for b in range(q.size(0)):
            qb, kb, vb = (t[b : b + 1].transpose(1, 2).float() for t in (q, k, v))
            outs.append(torch.nn.functional.scaled_dot_product_attention(qb, kb, vb, is_causal=causal))
    return torch.cat(outs).transpose(1, 2).contiguous()


def classify_failure(err: BaseException) -> tuple[str, str]:
    """(failure_kind, reason) for an exception raised by a backend."""
    text = " ".join(str(err).split()) or type(err).__name__
    text = text.split(" Set TORCHDYNAMO_VERBOSE")[0]  # Inductor's advice on debugging, not the reason
    lowered = text.lower()
    if isinstance(err, FallbackError):
        return "fallback", text
    if isinstance(err, ConfigMismatchError):
        return "config_mismatch", text
    if isinstance(err, torch.cuda.OutOfMemoryError) or "out of memory" in lowered:
        return "oom", f"out of memory: {text[:240]}"
    if "out of resource" in lowered:
        start = lowered.find("out of resource")
        detail = text[start : start + 200]
        return "out_of_resources", f"out of {_exhausted_resource(err)}: {detail}"
    if isinstance(err, NotImplementedError) or any(
        s in lowered for s in ("no available kernel", "not supported", "unsupported", "head_dim", "headdim")
    ):
        return "unsupported", text[:300]
    return "error", f"{type(err).__name__}: {text[:300]}"


def _exhausted_resource(err: BaseException) -> str:
    """Which resource ran out: Triton's OutOfResources names it, but Inductor re-raises the message
    with the kernel's name in its place, so a limit equal to the device's shared memory per block
    identifies it too."""
    limit = re.search(r"hardware limit:\s*(\d+)", str(err), re.IGNORECASE)
    if limit and int(limit.group(1)) == _shared_memory_per_block():
        return "shared memory"
    seen = err
    while seen is not None:
        name = getattr(seen, "name", None)
        if isinstance(name, str) and getattr(seen, "limit", None) is not None:
            return name
        if "shared memory" in str(seen).lower():
            return "shared memory"
        seen = seen.__cause__ or seen.__context__
    return "resources"


def _shared_memory_per_block() -> int | None:
    if not torch.cuda.is_available():
        return None
    return getattr(torch.cuda.get_device_properties(0), "shared_memory_per_block_optin", None)


def measure_backend(backend: Backend, problem: Problem, reference: torch.Tensor, job: dict) -> dict:
    entry = backend_entry(backend.label)
    reason = backend.unavailable(problem.platform)
    if reason:
        entry.update(status="unavailable", reason=reason)
        return entry
    try:
        prepared = backend.prepare(problem)
        entry["kernel_config"] = prepared.kernel_config
        with prepared.context():
            out = prepared.fn()  # warm-up 1 (and compilation): its output is the one checked
            plat.synchronize(problem.platform)
            if prepared.verify:
                prepared.verify()
            if prepared.layout == "bhsd":
                out = out.transpose(1, 2)
            entry["correctness"] = metrics.compare(out, reference, job["tolerance"])
            del out
            timed(entry, prepared.fn, problem.platform, job)
        if not entry["correctness"]["passed"]:
            c = entry["correctness"]
            tol = job["tolerance"]
            entry.update(status="failed", failure_kind="correctness",
                         reason=f"wrong numbers: max abs err {c['max_abs_err']:.3g} (tolerance {tol['max_abs_err']:g}), "
                                f"cosine {c['cosine']:.6f} (at least {tol['min_cosine']:g})"
                         if c["finite"] else "wrong numbers: output has inf or nan")
    except Exception as err:  # a backend's failure is a result, never the job's end
        kind, why = classify_failure(err)
        entry.update(status="failed", failure_kind=kind, reason=why)
    finally:
        prepared = None
        gc.collect()
        if problem.platform != "cpu":
            torch.cuda.empty_cache()
    return entry


def timed(entry: dict, fn, platform: str, job: dict) -> None:
    """Time after the remaining warm-ups: the checked first call was warm-up 1."""
    remaining_warmup = max(job["warmup"] - 1, 0)
    entry["wall_mean_ms"] = metrics.wall_mean_ms(fn, platform, remaining_warmup, job["iters"])
    tflops = {"wall": metrics.tflops(job["flops"], entry["wall_mean_ms"]), "device_median": None}
    if platform != "cpu":
        entry["device_ms"] = metrics.summarize(metrics.device_samples_ms(fn, job["iters"]))
        tflops["device_median"] = metrics.tflops(job["flops"], entry["device_ms"]["median"])
    entry["tflops"] = tflops


def job_settings(config: dict, platform: str, shape: dict) -> dict:
    iterations = config["cpu"] if platform == "cpu" else config
    return {
        "warmup": iterations["warmup"],
        "iters": iterations["iters"],
        "reduced": (iterations["warmup"], iterations["iters"]) != (config["warmup"], config["iters"]),
        "tolerance": config["tolerance"],
        "flops": metrics.attention_flops(shape["batch"], shape["seq"], shape["heads"], shape["head_dim"],
                                         config["causal"]),
    }


def run_job(spec: dict, kernel_config_path: Path | None, project_commit: str | None) -> dict:
    started = provenance.now()
    config, variant, shape = spec["settings"], spec["variant"], spec["shape"]
    platform = plat.detect()
    job = job_settings(config, platform, shape)
    kernel_config = _kernel_config(spec["triton"], kernel_config_path)

    device = "cpu" if platform == "cpu" else "cuda"
    q, k, v = make_inputs(shape, getattr(torch, config["dtype"]), config["seed"], device)
    reference = reference_output(q, k, v, config["causal"])
    problem = Problem(q, k, v, config["causal"], platform, kernel_config["values"])
    results = {}
    for name in config["backends"]:
        print(f"[fabench] {variant} {shape_id(shape)} {name} ...", flush=True)
        results[name] = measure_backend(BACKENDS[name], problem, reference, job)
        print(f"[fabench]   {_summary(results[name])}", flush=True)

    return {
        "schema_version": SCHEMA_VERSION,
        "run": spec["run"],
        "variant": variant,
        "shape": shape,
        "shape_id": shape_id(shape),
        "dtype": config["dtype"],
        "causal": config["causal"],
        "platform": platform,
        "roles": config["roles"][platform],
        "method": {"warmup": job["warmup"], "iters": job["iters"], "reduced": job["reduced"],
                   "wall": WALL_METHOD, "device_timer": None if platform == "cpu" else f"{platform}-events"},
        "flops": job["flops"],
        "flop_convention": FLOP_CONVENTION,
        "tolerance": config["tolerance"],
        "kernel_config": kernel_config,
        "backends": results,
        "provenance": {"started": started, "finished": provenance.now(),
                       **provenance.collect(platform, sha256_json(config), project_commit)},
    }


def _kernel_config(triton: dict, path: Path | None) -> dict:
    """The Triton-role config this job measures: from the patched file when given (what aiter reads)."""
    if path is None:
        return {"path": None, "sha256": None, "values": dict(triton)}
    return {"path": str(path), "sha256": file_sha256(path), "values": forward_config(json.loads(path.read_text()))}


def _summary(entry: dict) -> str:
    if entry["status"] == "unavailable":
        return f"unavailable: {entry['reason']}"
    if entry["status"] == "failed" and entry["wall_mean_ms"] is None:
        return f"failed: {entry['reason']}"
    return f"{entry['status']}: {entry['wall_mean_ms']:.3f} ms" + (f" ({entry['reason']})" if entry["reason"] else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fabench.measure", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, type=json.loads, help="the job spec, JSON (fabench.config.job_spec)")
    parser.add_argument("--aiter-config", type=Path, help="the variant's patched aiter MHA config JSON")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--project-commit", help="git commit of this project (the workflow passes it)")
    args = parser.parse_args(argv)
    watch_workflow()

    result = run_job(args.spec, args.aiter_config, args.project_commit or provenance.git_commit(Path(__file__).parent))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(args.out)  # a reader never sees half a result
    return 0

