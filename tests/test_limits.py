"""How close each cell comes to the hardware's limit (issue 38.2), and FlashAttention-4 among the
backends the report compares (38.1): on the committed H100 and H200 runs (examples/, analysed again
from their raw trials), copies of them made to look like another GPU, and a real CPU run.

Blind side: the peaks are the vendors' published numbers (peaks.yaml), not measured here; a
FlashAttention-4 cell here is a copy of the cuDNN cell made faster, not a measurement.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml

from fabench.analysis import analyse_run, roofline
from fabench.config import ConfigError, check_roles
from fabench.report.model import Run
from fabench.report.render import render
from fabench.report.roofline_plot import has_roofline, roofline_figure
from fabench.report.sections import limits, published_claims, summary
from fabench.results.archive_read import list_entries
from fabench.results.published import load_published

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = load_published(ROOT / "report" / "published" / "mi300x-2025-12-30.yaml")
ARCHIVES = {"h100": ROOT / "examples" / "h100-2026-11-25" / "archive", "h200": ROOT / "examples" / "h200" / "archive"}
CPU_RUN = ROOT / "tests" / "fixtures" / "cpu-run"
HEADING = "### How close to the hardware's limit"


def raw_run(name: str) -> tuple[dict, dict]:
    """The archive's newest run as collected (raw trials, no figures) and its config."""
    entry = list_entries(ARCHIVES[name])[-1]
    return entry.results(), json.loads((entry.path / "config.json").read_text())


@pytest.fixture(scope="module", params=sorted(ARCHIVES))
def gpu_run(request) -> tuple[str, dict, dict]:
    results, config = raw_run(request.param)
    return request.param, analyse_run(results), config


def cpu_run() -> tuple[dict, dict]:
    return (json.loads((CPU_RUN / "results.json").read_text()), json.loads((CPU_RUN / "config.json").read_text()))


def section_text(report: str) -> str:
    return report.split(HEADING, 1)[1].split("\n---", 1)[0]


# ---------------------------------------------------------------- the peaks

def test_every_peak_names_its_public_source_and_the_issues_figures():
    by_model = {p["model"]: p for p in roofline.peaks()}
    assert by_model["NVIDIA H100 SXM5 80GB"]["tensor_tflops"]["float16"] == 989.4
    assert by_model["NVIDIA H100 SXM5 80GB"]["memory_tb_s"] == 3.35
    assert by_model["NVIDIA H200 SXM 141GB"]["tensor_tflops"]["float16"] == 989.4
    assert by_model["NVIDIA H200 SXM 141GB"]["memory_tb_s"] == 4.8
    assert by_model["AMD Instinct MI300X"]["tensor_tflops"]["float16"] == 1307.4
    assert by_model["AMD Instinct MI300X"]["memory_tb_s"] == 5.3
    for peak in roofline.peaks():
        assert re.search(r"https://www\.(nvidia|amd)\.com/", peak["source"]), peak["model"]


def test_the_bytes_a_cell_must_move_are_q_k_v_and_o_once():
    shape = {"batch": 4, "seq": 4096, "heads": 8, "head_dim": 256}
    assert roofline.attention_bytes(shape, "float16") == 4 * (4 * 4096 * 8 * 256) * 2
    assert roofline.attention_bytes(shape, "bfloat16") == roofline.attention_bytes(shape, "float16")


# ---------------------------------------------------------------- a GPU run

def test_each_cell_is_its_flops_and_bytes_over_its_device_time_against_the_peak(gpu_run):
    name, collected, config = gpu_run
    peak_tflops, peak_tb_s = 989.4, {"h100": 3.35, "h200": 4.8}[name]
    result = next(r for r in collected["results"] if r["shape"]["seq"] == 4096 and r["variant"] == "tuned")
    entry = result["backends"]["sdpa_cudnn"]
    median = entry["stats"]["device_ms"]["median"]
    # By hand, from the job's recorded FLOPs and the shape: not by the module under test.
    compute = 100 * result["flops"] / (median / 1000) / 1e12 / peak_tflops
    bandwidth = 100 * 4 * (4 * 4096 * 8 * 256) * 2 / (median / 1000) / 1e12 / peak_tb_s
    peak, why = roofline.run_peak(collected["results"])
    assert why is None and peak["tb_s"] == peak_tb_s
    found = roofline.cell_limits(result, entry, peak)
    assert found["compute_pct"] == pytest.approx(compute) and found["bandwidth_pct"] == pytest.approx(bandwidth)
    low, high = found["compute_pct_ci95"]
    assert low < found["compute_pct"] < high  # the time's interval, carried through
    assert 40 < compute < 70  # cuDNN at seq 4096: about 55% of the H100's peak (facts.md)


def test_a_gpu_report_shows_the_percent_table_beside_the_published_one(gpu_run):
    name, collected, config = gpu_run
    report = render(collected, config, PUBLISHED)
    assert report.index("### Results") < report.index(HEADING) < report.index("### Correctness")
    text = section_text(report)
    memory = {"h100": "3.35 TB/s HBM3 bandwidth", "h200": "4.8 TB/s HBM3e bandwidth"}[name]
    assert f"989.4 TFLOP/s dense fp16/bf16 tensor peak and {memory}" in text and "Source: NVIDIA H" in text
    rows = [line for line in text.splitlines() if line.startswith("| seq=4096 | 1024 |")]  # FLOP/byte: S/4
    assert len(rows) == len(collected["results"]) // 5  # a row per variant at seq 4096
    assert re.search(r"\| \d+\.\d% (\[\d+\.\d-\d+\.\d\]|\(unstable\)) · \d+\.\d% \|", rows[0]), rows[0]


def test_the_roofline_draws_every_cell_with_a_device_time_under_the_limits(gpu_run):
    _, collected, _ = gpu_run
    assert has_roofline(collected)
    fig = roofline_figure(collected)
    try:
        panels = [ax for ax in fig.axes if ax.get_title()]
        assert [ax.get_title() for ax in panels] == list(dict.fromkeys(r["variant"] for r in collected["results"]))
        for ax in panels:
            variant = ax.get_title()
            cells = [(r, e) for r in collected["results"] if r["variant"] == variant for e in r["backends"].values()
                     if e["status"] == "ok" and ((e.get("stats") or {}).get("device_ms") or {}).get("median")]
            limit = ax.get_lines()[0]  # the roofline itself: the bandwidth slope, then the peak
            assert max(limit.get_ydata()) == pytest.approx(989.4)
            drawn = len(ax.containers) + sum(1 for line in ax.get_lines()[2:] if line.get_markerfacecolor() == "white")
            assert drawn == len(cells)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_a_gpu_without_a_known_peak_says_so_and_draws_no_roofline():
    results, config = raw_run("h100")
    for result in results["results"]:
        result["provenance"]["gpu"]["name"] = "NVIDIA H100 PCIe"
    collected = analyse_run(results)
    text = section_text(render(collected, config, PUBLISHED))
    assert "No percent of peak for this run (NVIDIA H100 PCIe): no peak is known for the NVIDIA H100 PCIe" in text
    assert "%" not in text.split(")", 1)[1].split("\n")[0] and "| seq=" not in text
    assert not has_roofline(collected)


# ---------------------------------------------------------------- a CPU run

def test_a_cpu_run_shows_no_percentage_and_no_roofline():
    collected, config = cpu_run()
    assert limits.context(Run(collected, config), PUBLISHED) is None
    report = render(collected, config, PUBLISHED, figures=[("Latency", "plots/latency.png")])
    assert HEADING not in report and "of peak" not in report
    assert not has_roofline(collected)
    assert roofline.peak_for(collected["results"][0]) == (None, "it ran on a CPU, which has no tensor peak to hold it against")


# ---------------------------------------------------------------- FlashAttention-4 among the backends

def with_fa4(collected: dict, factor: float) -> dict:
    """Each result with a FlashAttention-4 cell: cuDNN's raw trials, every time scaled by `factor`."""
    collected = copy.deepcopy(collected)
    for result in collected["results"]:
        entry = copy.deepcopy(result["backends"]["sdpa_cudnn"])
        entry["label"] = "FlashAttention-4"
        for trial in entry["trials"]:
            for key, value in trial.items():
                if key.endswith("_ms") and isinstance(value, (int, float)):
                    trial[key] = value * factor
                elif key.endswith("_ms") and isinstance(value, list):
                    trial[key] = [v * factor for v in value]
        result["backends"]["fa4"] = entry
    return collected


def test_where_flash_attention_4_is_fastest_the_summary_names_it():
    results, config = raw_run("h100")
    collected = analyse_run(with_fa4(results, 0.8))
    groups = summary.context(Run(collected, config), PUBLISHED)["fastest"]["groups"]
    main = next(g for g in groups if g["head_dim"] == 256)
    assert main["code"] == "winner" and main["leaders"] == ["FlashAttention-4"], main
    assert "SDPA (cuDNN)" in main["beaten"] or "SDPA" in main["beaten"]


def test_where_flash_attention_4_is_slower_the_summary_does_not_name_it():
    results, config = raw_run("h100")
    collected = analyse_run(with_fa4(results, 1.5))
    groups = summary.context(Run(collected, config), PUBLISHED)["fastest"]["groups"]
    assert all("FlashAttention-4" not in g["leaders"] for g in groups)


def test_flash_attention_4_can_fill_a_published_role_and_the_claims_say_so():
    results, config = raw_run("h100")
    results = with_fa4(results, 0.8)
    for result in results["results"]:
        result["roles"] = {**result["roles"], "vendor": "fa4"}
    context = published_claims.context(Run(analyse_run(results), config), PUBLISHED)
    assert "FlashAttention-4 fills CK's role (vendor)" in context["roles"]
    config = {**yaml.safe_load((ROOT / "config.yaml").read_text())}
    config["roles"] = {**config["roles"], "cuda": {**config["roles"]["cuda"], "vendor": "fa4"}}
    check_roles(config, "cuda")  # a config may name it in a role: it is a listed backend
    config["backends"] = [b for b in config["backends"] if b != "fa4"]
    with pytest.raises(ConfigError, match="roles.cuda.vendor: 'fa4' is not in backends"):
        check_roles(config, "cuda")
