"""The tuning sweep on a CPU: its space and strategies, the memory model that prunes, the objective
over shapes, a real sweep job timing a stand-in kernel whose times are known, and the winner
written as aiter's config, accepted by the patch step and read back by aiter's own loader."""

import copy
import importlib.util
import json
import sys
import types

import pytest
import yaml

from fabench.config import ConfigError
from fabench.workflow_config import check_config
from fabench.aiter_config import file_sha256, patch_local
from fabench.measure.spec import job_settings
from fabench.measure.sweep_spec import SweepSpec
from fabench.tune import job, memory, objective, pick, settings, space
from support import mha_standin
from workflow_util import REPO, default_config, tiny_config

SCHEMAS = REPO / "workflow" / "schemas"
H200_SHARED_MEMORY = 232_448
TUNED = default_config()["variants"]["tuned"]["triton"]


# --- the space and the strategies ------------------------------------------------------------

def test_the_default_space_is_72_candidates_and_contains_the_tuned_config():
    config = default_config()
    found = space.candidates("sweep", config["sweep"]["space"], TUNED)
    assert len(found) == 72 and len({c["id"] for c in found}) == 72
    reference = [c for c in found if c["reference"]]
    assert [c["id"] for c in reference] == ["M64-N32-w4-s1-pv1"]  # the published tuning is one of them
    assert all(c["config"]["waves_per_eu"] == 2 and c["config"]["num_ctas"] == 1 for c in found)


def test_a_reference_outside_the_space_is_timed_as_one_more_candidate():
    found = space.candidates("sweep", {"BLOCK_M": [32, 128]}, TUNED)
    assert [c["id"] for c in found] == ["M32", "M128", "reference"]
    assert found[-1]["config"] == TUNED and found[-1]["reference"]


def test_keys_the_platform_refuses_leave_the_space_with_the_reason():
    kept, dropped = space.platform_space({"BLOCK_M": [64], "waves_per_eu": [1, 2]},
                                         {"waves_per_eu": "unrecognised", "num_ctas": "other"})
    assert kept == {"BLOCK_M": [64]} and dropped == {"waves_per_eu": "unrecognised"}


def test_coarse_then_refine_varies_tiles_and_warps_first_then_the_rest_of_the_survivors():
    grid = {"BLOCK_M": [32, 64], "BLOCK_N": [32, 64], "num_warps": [4, 8], "num_stages": [2, 1],
            "PRELOAD_V": [False, True]}
    coarse = space.stage_values("coarse", grid)
    assert len(coarse) == 8 and all(v["num_stages"] == 2 and v["PRELOAD_V"] is False for v in coarse)
    survivors = [coarse[3], coarse[5]]
    refine = space.stage_values("refine", grid, survivors)
    assert len(refine) == 2 * 4
    assert {(v["BLOCK_M"], v["BLOCK_N"], v["num_warps"]) for v in refine} == \
        {(s["BLOCK_M"], s["BLOCK_N"], s["num_warps"]) for s in survivors}
    with pytest.raises(ValueError, match="shortlist"):
        space.stage_values("refine", grid)


# --- the memory model --------------------------------------------------------------------------

def test_cuda_model_gives_the_figure_triton_refused_on_an_h200():
    """128/128 with 2 stages at head_dim 256: Triton asked for 327,680 bytes (232,448 available)."""
    config = {"BLOCK_M": 128, "BLOCK_N": 128, "num_stages": 2, "PRELOAD_V": True}
    assert memory.estimate(config, 256, "float16", "cuda")["bytes"] == 327_680
    published = {**TUNED, "BLOCK_M": 128, "BLOCK_N": 64, "PRELOAD_V": False}
    for fits in (TUNED, published):
        assert memory.estimate(fits, 256, "float16", "cuda")["bytes"] <= H200_SHARED_MEMORY


def test_model_counts_bytes_not_elements():
    """The report's 128x256 + 64x256 = 49,152 counts fp16 elements; on the MI300X the published
    default's largest tile is 128 x 256 x 2 bytes: exactly its 64 KiB of LDS."""
    published = {"BLOCK_M": 128, "BLOCK_N": 64, "num_stages": 1, "PRELOAD_V": False}
    assert memory.estimate(published, 256, "float16", "rocm")["bytes"] == 65_536
    assert memory.estimate(published, 256, "float32", "rocm")["bytes"] == 131_072


def test_default_space_on_an_h200_prunes_the_128_wide_key_tiles_with_two_stages():
    config = default_config()
    found = space.candidates("sweep", config["sweep"]["space"], TUNED)
    pruned = [c["id"] for c in found
              if memory.estimate(c["config"], 256, "float16", "cuda")["bytes"] > H200_SHARED_MEMORY]
    assert len(pruned) == 12 and all("-N128-" in cid and "-s2-" in cid for cid in pruned)


@pytest.mark.parametrize("head_dim, padded", [(64, 64), (80, 128), (256, 256), (8, 16)])
def test_head_dim_is_padded_to_a_power_of_two(head_dim, padded):
    assert memory.padded_head_dim(head_dim) == padded


def test_required_bytes_are_read_from_tritons_message():
    text = "out of resource: shared memory, Required: 327680, Hardware limit: 232448. Reducing block sizes"
    assert memory.required_bytes(text) == 327_680 and memory.required_bytes("other error") is None


# --- the objective -------------------------------------------------------------------------------

def record(cid, ms, status="ok", reference=False, reason=None, kind=None):
    return {"id": cid, "values": {"BLOCK_M": cid}, "config": {}, "reference": reference, "status": status,
            "ms": ms, "ci95": [ms * 0.99, ms * 1.01] if ms else None, "reason": reason, "failure_kind": kind}


def stage_jobs(times: dict, statuses: dict | None = None) -> list[dict]:
    """times: candidate -> (ms at shape a, ms at shape b); 'ref' is the reference."""
    statuses = statuses or {}
    return [{"stage": "sweep", "shape_id": shape, "candidates": [
        record(cid, ms[i], reference=cid == "ref", **statuses.get((cid, shape), {})) for cid, ms in times.items()]}
        for i, shape in enumerate(("a", "b"))]


def test_geomean_and_worst_case_can_pick_different_winners():
    jobs = stage_jobs({"ref": (1.0, 1.0), "A": (0.5, 1.1), "B": (0.77, 0.77)})  # A: 2.0x and 0.91x
    assert objective.ranking(jobs, "geomean")[0]["id"] == "A"
    assert objective.ranking(jobs, "worst")[0]["id"] == "B"
    top = objective.ranking(jobs, "geomean")[0]
    assert top["speedups"] == {"a": 2.0, "b": pytest.approx(1 / 1.1)}
    assert top["score"] == pytest.approx((2.0 / 1.1) ** 0.5)


def test_a_candidate_must_run_correctly_at_every_shape_to_be_ranked():
    jobs = stage_jobs({"ref": (1.0, 1.0), "fast_but_wrong": (0.1, 0.1), "ok": (0.9, 0.9)},
                      {("fast_but_wrong", "b"): {"status": "failed", "kind": "correctness",
                                                 "reason": "wrong numbers: max abs err 0.5"}})
    ranked = objective.ranking(jobs, "geomean")
    assert [e["id"] for e in ranked] == ["ok", "ref", "fast_but_wrong"]
    assert ranked[-1]["score"] is None and ranked[-1]["dropped"] == "b: wrong numbers: max abs err 0.5"
    assert objective.per_shape_best(jobs)["a"]["id"] == "fast_but_wrong"  # fastest there, still shown


def test_the_shortlist_keeps_the_best_k():
    jobs = stage_jobs({"ref": (1.0, 1.0), "A": (0.5, 0.5), "B": (0.6, 0.6), "C": (0.7, 0.7)})
    assert objective.shortlist(jobs, "geomean", 2) == [{"BLOCK_M": "A"}, {"BLOCK_M": "B"}]


def test_a_reference_that_did_not_run_stops_the_sweep_with_the_reason():
    jobs = stage_jobs({"ref": (1.0, 1.0), "A": (0.5, 0.5)},
                      {("ref", "b"): {"status": "failed", "reason": "out of shared memory"}})
    with pytest.raises(objective.SweepError, match="reference config ref did not run at b .*out of shared memory"):
        objective.ranking(jobs, "geomean")


def test_jobs_that_timed_other_candidates_are_refused():
    jobs = stage_jobs({"ref": (1.0, 1.0), "A": (0.5, 0.5)})
    jobs[1]["candidates"].pop()
    with pytest.raises(objective.SweepError, match="timed other candidates"):
        objective.ranking(jobs, "geomean")


# --- the config ----------------------------------------------------------------------------------

@pytest.mark.parametrize("change, message", [
    (lambda s: s.update(variant={"name": "tuned"}), "sweep.variant.name: 'tuned' is the reference variant"),
    (lambda s: s.update(kernel_module="no_such_module.mha"), "sweep.kernel_module: no module 'no_such_module.mha'"),
    (lambda s: s["space"].update(BLOCK_K=[16]), "sweep.space: Additional properties are not allowed"),
    (lambda s: s["space"].update(BLOCK_M=[]), r"sweep.space.BLOCK_M: \[\] should be non-empty"),
    (lambda s: s["space"].update(BLOCK_N=[48]), "sweep.space.BLOCK_N.0: 48 is not one of"),
    (lambda s: s.update(strategy="random"), "sweep.strategy: 'random' is not one of"),
    (lambda s: s.update(objective="mean"), "sweep.objective: 'mean' is not one of"),
])
def test_a_bad_sweep_key_is_named_in_one_line(change, message):
    config = default_config()
    change(config["sweep"])
    with pytest.raises(ConfigError, match=message) as err:
        check_config(config, REPO, SCHEMAS)
    assert "\n" not in str(err.value)


def test_a_reference_that_is_no_variant_stops_a_sweep_but_not_a_run_without_one():
    config = default_config()
    config["sweep"]["reference"] = "best"
    check_config(config, REPO, SCHEMAS)  # a run of its own variants need not sweep
    assert settings.usage_error(config) == ("sweep.reference: 'best' is not a variant (default, tuned); "
                                            "name the variant whose config the candidates start from")
    assert settings.usage_error({**config, "sweep": None}).startswith("sweep: the config has no sweep")


def test_the_sweep_times_the_main_head_dims_shapes_unless_told_otherwise():
    config = default_config()
    config["sweep"]["shapes"] = None
    assert list(settings.sweep_shapes(config)) == [f"b4-s{s}-h8-d256" for s in (512, 1024, 2048, 4096)]
    config["sweep"]["shapes"] = [config["shapes"][-1]]
    assert list(settings.sweep_shapes(config)) == ["b4-s1024-h8-d64"]


def test_a_sweep_jobs_spec_leaves_out_what_only_the_pick_reads():
    config = tiny_config()
    config["sweep"].update(timing={}, keep=5, memory_limit=None, check_pruned=True, kernel_module=None)
    spec = settings.sweep_job_spec(config, job_settings(config), "sweep", config["shapes"][0])
    changed = copy.deepcopy(config)
    changed["sweep"]["objective"] = "worst"
    assert settings.sweep_job_spec(changed, job_settings(changed), "sweep", config["shapes"][0]) == spec
    changed["sweep"]["space"]["BLOCK_M"] = [64]
    assert settings.sweep_job_spec(changed, job_settings(changed), "sweep", config["shapes"][0]) != spec


# --- a real sweep job on the stand-in -----------------------------------------------------------

STANDIN_SPACE = {"BLOCK_M": [32, 128], "BLOCK_N": [32, 64], "num_warps": [2, 4], "num_stages": [1, 2],
                 "PRELOAD_V": [False, True], "waves_per_eu": [1, 2]}


def standin_spec(shape: dict, stage: str = "sweep", space_=None) -> dict:
    config = tiny_config()
    config["sweep"].update(space=space_ or STANDIN_SPACE, kernel_module="support.mha_standin",
                           memory_limit=mha_standin.HARDWARE_LIMIT, check_pruned=True, keep=2,
                           timing={"warmup": 1, "iters": 1, "trials": 2, "min_trial_ms": 0, "min_warmup_ms": 0,
                                   "max_warmup_ms": 0})
    return json.loads(json.dumps(settings.sweep_job_spec(config, job_settings(config), stage, shape)))


@pytest.fixture(scope="module")
def standin_job(tmp_path_factory):
    """One sweep job at (1,128,2,64): 32 candidates and the reference, timed for real."""
    reference = tmp_path_factory.mktemp("sweep") / "tuned.json"
    reference.write_text(json.dumps({"fwd": {"default": TUNED}}))
    shape = {"batch": 1, "seq": 128, "heads": 2, "head_dim": 64}
    return job.run(SweepSpec.from_dict(standin_spec(shape)), reference)


def by_id(job_record: dict) -> dict:
    return {r["id"]: r for r in job_record["candidates"]}


def test_the_job_times_every_candidate_and_the_known_fastest_is_fastest(standin_job):
    records = by_id(standin_job)
    assert len(records) == 33 and standin_job["not_applied"] == {"waves_per_eu": mha_standin.REFUSED}
    timed = {cid: r["ms"] for cid, r in records.items() if r["status"] == "ok"}
    # Known: 50 ms for the fastest at seq 128, 100 for the best overall, 200 for the reference, 300 else
    # (steps of 50 ms or more: this host's noise under load reached tens of ms per call).
    fastest, best, ref = timed.pop("M32-N32-w4-s1-pv1"), timed.pop("M128-N64-w4-s1-pv1"), timed.pop("reference")
    assert fastest < best < ref < min(timed.values())
    best = records["M128-N64-w4-s1-pv1"]
    assert best["figure"] == "wall" and best["n"] == 2 and best["ci95"][0] <= best["ms"] <= best["ci95"][1]
    assert all("waves_per_eu" not in r["launch"]["applied"] for r in records.values())


def test_wrong_numbers_are_recorded_and_cannot_win(standin_job):
    wrong = [r for r in standin_job["candidates"]  # those refused for memory never got to compute
             if mha_standin.wrong_numbers(r["config"]) and r["failure_kind"] != "out_of_resources"]
    assert len(wrong) == 6 and all(r["status"] == "failed" and r["failure_kind"] == "correctness" for r in wrong)
    assert all(r["ms"] is not None for r in wrong)  # timed all the same: how fast the wrong answer was


def test_pruning_and_the_models_misses_are_recorded_with_the_models_figure(standin_job):
    records = by_id(standin_job)
    pruned = [r for r in records.values() if r["status"] == "pruned"]
    assert {r["id"] for r in pruned} == {f"M128-N64-w{w}-s2-pv{p}" for w in (2, 4) for p in (0, 1)}
    for r in pruned:  # never timed; compiled once to check, and the device agreed
        assert r["ms"] is None and r["memory"]["bytes"] == 49_152 > r["memory"]["limit"] == 40_000
        assert r["pruned_check"]["failure_kind"] == "out_of_resources"
        assert r["pruned_check"]["required_bytes"] == int(49_152 * 1.2)
    missed = records["M32-N64-w4-s2-pv1"]  # fits by the model (36,864), the stand-in needs 1.2x
    assert missed["status"] == "failed" and missed["failure_kind"] == "out_of_resources"
    assert missed["memory"]["fits"] and missed["required_bytes"] == int(36_864 * 1.2)
    check = pick.model_check([standin_job])
    assert check["pruned"] == check["checked"] == check["confirmed"] == 4 and not check["compiled_anyway"]
    assert {r["id"] for r in check["refused_within_model"]} == {f"M32-N64-w{w}-s2-pv{p}" for w in (2, 4)
                                                                for p in (0, 1)}


def test_a_kernel_that_cannot_load_leaves_every_candidate_unavailable_with_the_reason(tmp_path):
    reference = tmp_path / "tuned.json"
    reference.write_text(json.dumps({"fwd": {"default": TUNED}}))
    spec = standin_spec({"batch": 1, "seq": 64, "heads": 2, "head_dim": 32}, space_={"BLOCK_M": [32]})
    spec["sweep"]["kernel_module"] = "support.no_such_kernel"
    records = job.run(SweepSpec.from_dict(spec), reference)["candidates"]
    assert {r["status"] for r in records} == {"unavailable"}
    assert "could not be loaded: ModuleNotFoundError" in records[0]["reason"]


# --- the winner, as aiter's config ---------------------------------------------------------------

def aiter_loader(monkeypatch, configs_dir):
    """aiter's own _get_config (the installed amd-aiter), reading `configs_dir` as on an MI300X:
    the package root (which needs ROCm) is not run."""
    found = importlib.util.find_spec("aiter")
    if "aiter" not in sys.modules:
        root = types.ModuleType("aiter")
        root.__path__ = list(found.submodule_search_locations)
        monkeypatch.setitem(sys.modules, "aiter", root)
    from aiter.ops.triton._triton_kernels import mha
    from aiter.ops.triton.utils._triton import arch_info

    monkeypatch.setattr(arch_info, "get_arch", lambda: "gfx942")
    monkeypatch.setattr(mha, "AITER_TRITON_CONFIGS_PATH", str(configs_dir))
    mha._get_config.cache_clear()
    monkeypatch.delattr(mha._get_config, "_config_dict", raising=False)
    return mha._get_config


def test_the_winner_is_aiters_config_accepted_by_the_patch_step_and_read_by_aiters_loader(
        tmp_path, monkeypatch):
    config = default_config()
    sweep = {**config["sweep"], "variant": {"name": "swept", "title": "Swept", "label": "Swept config"}}
    times = {"ref": (1.0, 1.0), "A": (0.5, 0.6)}
    jobs = stage_jobs(times)
    for shape_job in jobs:
        shape_job.update(platform="cuda", device="H200", memory_limit=H200_SHARED_MEMORY, not_applied={},
                         timing={}, elapsed_s=1.0)
        for r in shape_job["candidates"]:
            r.update(values={"BLOCK_M": 128, "BLOCK_N": 64} if r["id"] == "A" else {"BLOCK_M": 64},
                     memory={"bytes": 1, "limit": H200_SHARED_MEMORY, "fits": True}, pruned_check=None,
                     kernel_shared_memory=None, required_bytes=None)
    outputs = {"summary": tmp_path / "sweep.json", "config": tmp_path / "swept.json",
               "meta": tmp_path / "swept.meta.json", "variants": tmp_path / "variants.yaml"}
    summary = pick.write_winner({"sweep": jobs}, sweep, config["variants"], outputs, manifest=None)
    assert summary["winner"]["id"] == "A" and json.loads(outputs["summary"].read_text())["winner"]["id"] == "A"

    variants = yaml.safe_load(outputs["variants"].read_text())["variants"]
    assert list(variants) == ["default", "tuned", "swept"]
    assert variants["swept"]["triton"] == {**TUNED, "BLOCK_M": 128, "BLOCK_N": 64}
    # The patch step, given the swept variant's overrides, makes the very file the sweep wrote.
    patched = tmp_path / "patched" / "swept.json"
    patch_local(variants["swept"]["triton"], patched, tmp_path / "patched" / "swept.meta.json")
    assert file_sha256(patched) == file_sha256(outputs["config"])
    assert json.loads(outputs["config"].read_text())["fwd"]["default"] == variants["swept"]["triton"]
    # aiter's own loader reads the winner back, under the name it asks for.
    (tmp_path / "aiter-configs").mkdir()
    (tmp_path / "aiter-configs" / "MI300X-MHA-DEFAULT.json").write_bytes(outputs["config"].read_bytes())
    get_config = aiter_loader(monkeypatch, tmp_path / "aiter-configs")
    import torch

    assert get_config(False, torch.float16) == variants["swept"]["triton"]
    # The config check accepts the variants file as a --configfile.
    check_config({**config, "variants": variants}, REPO, SCHEMAS)


# --- the report ----------------------------------------------------------------------------------

def swept_copy(result: dict, scale: float) -> dict:
    """The tuned job's result as the swept variant's, its Triton figure scaled (a faster config)."""
    swept = copy.deepcopy(result)
    swept["variant"] = "swept"
    stats = swept["backends"][swept["roles"]["triton"]]["stats"]["device_ms"]
    stats["median"] *= scale
    stats["ci95"] = [stats["median"] * 0.99, stats["median"] * 1.01]
    return swept


def sweep_record(config: dict) -> dict:
    jobs = stage_jobs({"ref": (1.0, 1.0), "A": (0.8, 0.8)})
    for shape_job, shape_id in zip(jobs, ("b4-s512-h8-d256", "b4-s4096-h8-d256")):
        shape_job.update(shape_id=shape_id, platform="cuda", device="NVIDIA H200", memory_limit=H200_SHARED_MEMORY,
                         not_applied={"waves_per_eu": "Triton's CUDA backend refuses it"}, timing={
                             "trials": 2, "iters": 10, "min_trial_ms": 5, "min_warmup_ms": 20}, elapsed_s=60.0)
        for r in shape_job["candidates"]:
            r.update(id="M64-N32-w4-s1-pv1" if r["id"] == "ref" else "M128-N64-w8-s2-pv1",
                     memory={"bytes": 196_608, "limit": H200_SHARED_MEMORY, "fits": True, "formula": "..."},
                     pruned_check=None, kernel_shared_memory=200_000, required_bytes=None, stable=True,
                     values={"BLOCK_M": 128, "BLOCK_N": 64} if r["id"] == "A" else {})
    sweep = {**config["sweep"], "variant": {"name": "swept", "title": "After Sweep", "label": "Swept config"}}
    summary = pick.summarize({"sweep": jobs}, sweep)
    summary["winner"]["overrides"] = pick.winner_overrides(summary, config["variants"])
    return summary


@pytest.mark.parametrize("scale, verdict", [(0.8, "faster by more than the intervals allow"),
                                            (0.995, "not faster by more than the intervals allow")])
def test_the_report_shows_before_after_and_swept_and_the_sweeps_table(scale, verdict):
    from fabench.report.render import render
    from fabench.results.collect import collect

    fixtures = REPO / "tests" / "fixtures" / "h200-run"
    config = json.loads((REPO / "tests" / "fixtures" / "config.json").read_text())
    config["sweep"] = default_config()["sweep"]
    config["variants"]["swept"] = {"title": "After Sweep", "label": "Swept config", "triton": {"BLOCK_M": 128}}
    collected = collect([fixtures / "default-512.json", fixtures / "tuned-512.json"], list(config["variants"]))
    # One job a variant: the run's pooled noise has too few cells for an interval; give the tuned
    # cell one of 1%, as swept_copy gives the swept cell.
    tuned = collected["results"][1]["backends"]["flex"]["stats"]["device_ms"]
    tuned["ci95"] = [tuned["median"] * 0.99, tuned["median"] * 1.01]
    collected["results"].append(swept_copy(collected["results"][1], scale))
    report = render(collected, config, sweep=sweep_record(config))
    assert "#### After Sweep" in report.split("### Tuning Sweep")[0]  # the third variant's own table
    sweep = report.split("### Tuning Sweep")[1]
    tuned_ms = collected["results"][1]["backends"]["flex"]["stats"]["device_ms"]["median"]
    assert "| Config (B,S,H,D) | Default config | Tuned config | Swept config | Swept config vs Tuned config |" in sweep
    row = next(line for line in sweep.splitlines() if line.startswith("| (4, 512, 8, 256) | 0.213"))
    assert f"{tuned_ms:.3f} [{tuned_ms * 0.99:.3f}, {tuned_ms * 1.01:.3f}]" in row and f"{1 / scale:.2f}x" in row
    assert verdict in sweep
    assert "**Winner**: `M128-N64-w8-s2-pv1`" in sweep and "1.25x over tuned" in sweep
    assert "| `M64-N32-w4-s1-pv1` (reference) | 1.00x | 1.000 [0.990, 1.010] |" in sweep
    assert "`waves_per_eu`: Triton's CUDA backend refuses it" in sweep
    assert "over the model's figure: 1.02 to 1.02" in sweep
