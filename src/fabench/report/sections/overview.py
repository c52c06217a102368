"""The report's title and opening lines, Environment Setup (what the jobs ran on, from their
provenance) and Benchmark Configuration (what was asked for, from the config).
"""

from __future__ import annotations

from fabench.report.format import md_code, md_text, value_text
from fabench.report.model import Run
from fabench.results.collect import shape_key

# "gpu.<key>" reads the GPU's identity (provenance.gpu): which card, and the power limit it ran
# under; results written before it was recorded lack it, and the line is then left out.
HARDWARE_FIELDS = (("Device", "device"), ("GPU UUID", "gpu.uuid"), ("Power limit", "gpu.power_limit_w"),
                   ("Architecture", "arch"), ("Host", "host"), ("Driver", "driver"))
UNITS = {"gpu.power_limit_w": " W"}
# os, python and cudnn are extras the runner records beyond the design's list; shown when present.
SOFTWARE_FIELDS = (("OS", "os"), ("Python", "python"), ("CUDA", "cuda"), ("cuDNN", "cudnn"), ("HIP", "hip"),
                   ("PyTorch", "torch"), ("Triton", "triton"),
                   ("aiter", "aiter"), ("aiter commit", "aiter_commit"), ("Runtime", "runtime"),
                   ("Image", "image"), ("Image ID", "image_id"), ("Project commit", "project_commit"),
                   ("Config SHA-256", "config_sha256"))


def values(run: Run, key: str) -> list:
    """A provenance field's distinct recorded values; "gpu.uuid" is the uuid in provenance.gpu."""
    if not key.startswith("gpu."):
        return run.provenance_values(key)
    found = ((r["provenance"].get("gpu") or {}).get(key[4:]) for r in run.results)
    return [v for v in dict.fromkeys(found) if v is not None]


def fields(run: Run, names) -> list[dict]:
    """The recorded provenance fields; several values mean the jobs did not all run alike."""
    found = []
    for name, key in names:
        recorded = values(run, key)
        if recorded:
            shown = [md_text(f"{v:g}{UNITS[key]}" if key in UNITS else v) for v in recorded]
            found.append({"name": name, "shown": shown, "differs": len(recorded) > 1})
    return found


def reduced(run: Run, published: dict | None) -> dict | None:
    """Jobs that ran fewer iterations than asked (the runner's CPU counts), and the counts they
    fell short of: the published method's when there is one, else the config's."""
    jobs = [r for r in run.results if r["method"].get("reduced")]
    if not jobs:
        return None
    reference = published["method"] if published else run.config
    return {"jobs": len(jobs), "total": len(run.results),
            "used": list(dict.fromkeys((r["method"]["warmup"], r["method"]["iters"]) for r in jobs)),
            "warmup": reference.get("warmup"), "iters": reference.get("iters")}


def shape_lines(shapes: list[dict]) -> list[str]:
    """Shapes as the published parameter block writes them, fields aligned."""
    cells = [[f"batch={s['batch']},", f"seq={s['seq']},", f"heads={s['heads']},", f"d_k={s['head_dim']}"]
             for s in shapes]
    widths = [max(len(c[i]) for c in cells) for i in range(3)]
    return ["(" + " ".join([*(c[i].ljust(widths[i]) for i in range(3)), c[3]]) + ")," for c in cells]


def configuration(run: Run) -> dict:
    config = run.config
    shapes = config.get("shapes") or [r["shape"] for r in run.results]
    shapes = list({shape_key(s): s for s in shapes}.values())
    variants = [[md_text(v), md_text(run.title(v)),
                 md_text(", ".join(f"{k}={value_text(x)}" for k, x in run.kernel_values(v).items()))]
                for v in run.variants]
    return {
        "shape_lines": shape_lines(shapes),
        "dtype": config.get("dtype", run.first["dtype"]),
        "causal": config.get("causal", run.first["causal"]),
        "warmup": config.get("warmup", run.first["method"]["warmup"]),
        "iters": config.get("iters", run.first["method"]["iters"]),
        "cpu": config.get("cpu"),
        "seed": config.get("seed"),
        "backends": [md_text(b) for b in config.get("backends") or list(run.first["backends"])],
        "roles": {role: md_code(name) for role, name in run.first["roles"].items()},
        "platform": md_text(run.first["platform"]),
        "tolerance": config.get("tolerance") or run.first["tolerance"],
        "variants": variants,
    }


def context(run: Run, published: dict | None) -> dict:
    started, finished = run.provenance_values("started"), run.provenance_values("finished")
    return {
        "published": bool(published),
        "run": md_code(run.name),
        "platforms": md_text(", ".join(run.platforms())),
        "device": md_text(", ".join(run.provenance_values("device"))),
        "arch": md_text(", ".join(run.provenance_values("arch"))),
        "runtime": md_text(", ".join(run.provenance_values("runtime"))),
        "hardware": fields(run, HARDWARE_FIELDS),
        "software": fields(run, SOFTWARE_FIELDS),
        "period": md_text(f"{min(started)} to {max(finished)}") if started and finished else None,
        "reduced": reduced(run, published),
        "configuration": configuration(run),
    }
