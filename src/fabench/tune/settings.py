"""The sweep's part of the config: the rules across keys that the schema cannot state, and what
one sweep job depends on (its spec)."""

from __future__ import annotations

import importlib.util

from fabench.shapes import main_head_dim, shape_id

# What a sweep job measures with besides the run's shared settings; the objective and the variant
# it becomes only change the host steps after the jobs.
JOB_KEYS = ("strategy", "keep", "space", "reference", "memory_limit", "check_pruned", "timing", "kernel_module")


def config_error(config: dict) -> str | None:
    """One line naming the sweep key that cannot work, or None (also when there is no sweep).
    Whether the reference names one of the run's variants is asked only of a run that sweeps
    (usage_error): a config file of one's own variants need not keep config.yaml's `tuned`."""
    sweep = config.get("sweep")
    if not sweep:
        return None
    name = (sweep.get("variant") or {}).get("name", "swept")
    if name == sweep["reference"]:
        return f"sweep.variant.name: {name!r} is the reference variant; the winner needs a name of its own"
    module = sweep.get("kernel_module")
    if module and importlib.util.find_spec(module.split(".")[0]) is None:
        return f"sweep.kernel_module: no module {module!r} can be imported here (expected a module on sys.path)"
    return None


def usage_error(config: dict) -> str | None:
    """What stops this config from sweeping (the tune target, or a report of the sweep's variant)."""
    sweep, variants = config.get("sweep"), config["variants"]
    if not sweep:
        return "sweep: the config has no sweep (config.yaml has one to copy)"
    if sweep["reference"] not in variants:
        return (f"sweep.reference: {sweep['reference']!r} is not a variant ({', '.join(variants)}); "
                "name the variant whose config the candidates start from")
    return None


def sweep_shapes(config: dict) -> dict[str, dict]:
    """shape id -> shape for every shape the sweep times: sweep.shapes, else the experiment's shapes
    of its main head_dim (the one most of them share, the report's subject: the published 256).
    Each other head_dim compiles every candidate once more (the kernel is specialised on it)."""
    shapes = config["sweep"]["shapes"]
    if not shapes:
        main = main_head_dim(config["shapes"])
        shapes = [shape for shape in config["shapes"] if shape["head_dim"] == main]
    return {shape_id(shape): shape for shape in shapes}


def sweep_job_spec(config: dict, job_settings: dict, stage: str, shape: dict) -> dict:
    """Everything one sweep job measures, and nothing else: a job re-runs exactly when this changes."""
    sweep = {key: config["sweep"][key] for key in JOB_KEYS}
    return {"stage": stage, "shape": dict(shape), "sweep": sweep, "settings": job_settings,
            "reference_triton": dict(config["variants"][sweep["reference"]]["triton"])}
