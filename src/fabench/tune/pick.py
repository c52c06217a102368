"""The sweep's host steps: the coarse stage's shortlist, and the winner.

The winner is the best-ranked candidate of the last stage (objective.ranking). It is written
three ways: the sweep's record (sweep.json: every candidate per shape, the ranking, the per-shape
best, the memory model's check), aiter's own config file (the patch step's code, over aiter's
packaged file: the same file the benchmark's patch step makes for the variant), and a config file
that adds it as a variant beside the config's own (variants.yaml), so that it is measured by the
normal benchmark jobs: `snakemake --cores 1 report --configfile results/<run>/tune/variants.yaml`.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from fabench import aiter_config
from fabench.container import aiter_image
from fabench.files import write_atomic, write_json
from fabench.tune import objective


def load_jobs(paths: list) -> dict[str, list[dict]]:
    """stage -> the stage's job records, in the order given."""
    stages: dict[str, list[dict]] = {}
    for path in paths:
        job = json.loads(Path(path).read_text())
        stages.setdefault(job["stage"], []).append(job)
    return stages


def write_shortlist(paths: list, sweep: dict, out: Path) -> list[dict]:
    jobs = load_jobs(paths)["coarse"]
    values = objective.shortlist(jobs, sweep["objective"], sweep["keep"])
    write_json(out, {"objective": sweep["objective"], "keep": sweep["keep"], "values": values})
    return values


def summarize(stages: dict[str, list[dict]], sweep: dict) -> dict:
    """sweep.json: the stages with their candidates and ranking, the winner, the per-shape best and
    the memory model's check."""
    last = list(stages)[-1]
    ranked = objective.ranking(stages[last], sweep["objective"])
    if ranked[0]["score"] is None:
        raise objective.SweepError(f"no candidate of stage {last} ran correctly at every shape; the first one "
                                   f"dropped: {ranked[0]['id']} at {ranked[0]['dropped']}")
    first = stages[last][0]
    return {
        "strategy": sweep["strategy"], "objective": sweep["objective"], "reference_variant": sweep["reference"],
        "variant": sweep["variant"], "space": sweep["space"], "platform": first["platform"],
        "device": first["device"], "memory_limit": first["memory_limit"], "not_applied": first["not_applied"],
        "timing": first["timing"],
        "stages": [stage_summary(name, jobs, sweep["objective"]) for name, jobs in stages.items()],
        "winner": ranked[0], "per_shape_best": objective.per_shape_best(stages[last]),
        "model_check": model_check([job for jobs in stages.values() for job in jobs]),
        "elapsed_s": sum(job["elapsed_s"] for jobs in stages.values() for job in jobs),
    }


def stage_summary(name: str, jobs: list[dict], goal: str) -> dict:
    return {"stage": name, "shapes": [job["shape_id"] for job in jobs],
            "ranking": objective.ranking(jobs, goal), "records": objective.by_candidate(jobs),
            "elapsed_s": {job["shape_id"]: job["elapsed_s"] for job in jobs}}


def model_check(jobs: list[dict]) -> dict:
    """The memory model against what the device did: pruned candidates that compiled anyway (the
    model overestimates), candidates within the model's limit that were refused (it
    underestimates), and the shared memory the kernels that ran used, over the model's figure."""
    records = [(job["shape_id"], record) for job in jobs for record in job["candidates"]]
    pruned = [(s, r) for s, r in records if r["status"] == "pruned"]
    checked = [(s, r) for s, r in pruned if r["pruned_check"]]
    refused = [(s, r) for s, r in records if r["status"] != "pruned" and r["failure_kind"] == "out_of_resources"]
    used = [(s, r) for s, r in records if r["kernel_shared_memory"]]
    ratios = [r["kernel_shared_memory"] / r["memory"]["bytes"] for _, r in used]
    return {
        "limit": jobs[0]["memory_limit"], "pruned": len(pruned), "checked": len(checked),
        **_pruned_checks(checked),
        "refused_within_model": [_row(s, r, r["required_bytes"]) for s, r in refused if r["memory"]["fits"]],
        "ran_over_model": [_row(s, r, None) for s, r in records if r["status"] == "ok" and not r["memory"]["fits"]],
        "kernels_measured": len(used),
        "kernel_over_model": [min(ratios), max(ratios)] if ratios else None,
    }


def _row(shape_id: str, record: dict, required: int | None) -> dict:
    """A candidate in model_check's lists: the model's bytes against those the device required."""
    return {"id": record["id"], "shape_id": shape_id, "model_bytes": record["memory"]["bytes"],
            "required_bytes": required, "reason": (record["pruned_check"] or {}).get("reason") or record["reason"]}


def _pruned_checks(checked: list[tuple[str, dict]]) -> dict:
    """What compiling the pruned candidates showed: refused as the model said (confirmed), compiled
    anyway, or failed for another reason."""
    return {
        "confirmed": sum(1 for _, r in checked if r["pruned_check"]["failure_kind"] == "out_of_resources"),
        "compiled_anyway": [_row(s, r, None) for s, r in checked if r["pruned_check"]["compiled"]],
        "failed_otherwise": [_row(s, r, r["pruned_check"]["required_bytes"]) for s, r in checked
                             if not r["pruned_check"]["compiled"]
                             and r["pruned_check"]["failure_kind"] != "out_of_resources"],
    }


def winner_overrides(summary: dict, variants: dict) -> dict:
    """The swept variant's Triton overrides: the reference variant's, with the winner's values."""
    return {**variants[summary["reference_variant"]]["triton"], **summary["winner"]["values"]}


def variants_file(summary: dict, variants: dict, overrides: dict, summary_path: str) -> str:
    """The config's variants and the winner as one more: a --configfile for the benchmark."""
    name = summary["variant"]["name"]
    swept = {"title": summary["variant"]["title"], "label": summary["variant"]["label"], "triton": overrides}
    data = {"variants": {**{k: v for k, v in variants.items() if k != name}, name: swept}}
    header = (f"# Written by the sweep (fabench.tune.pick) from {summary_path}: the config's variants and the\n"
              f"# sweep's winner as variant {name!r}. Measure it with the benchmark's jobs:\n"
              f"#   snakemake --cores 1 report --configfile <this file>\n")
    return header + yaml.safe_dump(data, sort_keys=False)


def write_winner(stages: dict[str, list[dict]], sweep: dict, variants: dict, outputs: dict,
                 manifest: str | None) -> dict:
    """sweep.json, aiter's config file (+ its sidecar) and variants.yaml; the summary."""
    summary = summarize(stages, sweep)
    overrides = winner_overrides(summary, variants)
    summary["winner"]["overrides"] = overrides
    config, meta = Path(outputs["config"]), Path(outputs["meta"])
    if manifest:
        aiter_image.patch_from_image(Path(manifest), overrides, config, meta)
    else:
        aiter_config.patch_local(overrides, config, meta)
    write_json(outputs["summary"], summary)
    write_atomic(outputs["variants"], variants_file(summary, variants, overrides, str(outputs["summary"])))
    return summary
