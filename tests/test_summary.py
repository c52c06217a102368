"""The summary at the top of a report and of compare's page (issue 31.1): each line the comparison
policy's answer, at most 8 lines, each linking to an anchor the page has. Tested on the committed
GPU runs (analysed again from their raw trials, as tools/render_examples.py renders them), a
realistic CPU run with and without a second process per job, and a real CPU run of schema 1."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from fabench.analysis import analyse_run
from fabench.analysis.policy import Rule
from fabench.report.compare_markdown import render_markdown
from fabench.report.model import Run
from fabench.report.render import render
from fabench.report.sections import compare_summary, summary
from fabench.results.archive_read import list_entries
from fabench.results.compare import compare_entries
from fabench.results.published import load_published
from support.runs import CPU, make_run, read_results

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = load_published(ROOT / "report" / "published" / "mi300x-2025-12-30.yaml")
H200 = ROOT / "examples" / "h200" / "archive"
H100 = ROOT / "examples" / "h100-2026-11-25" / "archive"
CPU_RUN = ROOT / "tests" / "fixtures" / "cpu-run"


def newest(archive: Path) -> tuple[dict, dict]:
    entry = list_entries(archive)[-1]
    return analyse_run(entry.results()), json.loads((entry.path / "config.json").read_text())


@pytest.fixture(scope="module")
def h200() -> tuple[dict, dict]:
    return newest(H200)


@pytest.fixture(scope="module")
def h100() -> tuple[dict, dict]:
    return newest(H100)


def cpu_run(tmp_path: Path, processes: int) -> tuple[dict, dict]:
    """A realistic CPU run (support.runs), its trials kept from the first `processes` processes."""
    run_dir = make_run(tmp_path, "cpu", versions=CPU)
    collected = read_results(run_dir)
    for result in collected["results"]:
        for backend in result["backends"].values():
            if backend.get("trials"):
                backend["trials"] = [t for t in backend["trials"] if t["process"] < processes]
    return analyse_run(collected), json.loads((run_dir / "config.json").read_text())


def context(collected: dict, config: dict) -> dict:
    return summary.context(Run(collected, config), PUBLISHED)


# ---------------------------------------------------------------- anchors and length

def anchors(markdown: str) -> set[str]:
    """Every heading's anchor, a repeated one numbered as GitHub numbers it (-1, -2, ...)."""
    found: set[str] = set()
    in_code = False
    for line in markdown.splitlines():
        in_code ^= line.startswith("```")
        match = None if in_code else re.match(r"#{1,6} (.*)", line)
        if match:
            base = name = summary.anchor(match[1])
            number = 0
            while name in found:
                number += 1
                name = f"{base}-{number}"
            found.add(name)
    return found


def summary_lines(markdown: str, heading: str) -> list[str]:
    block = markdown.split(heading + "\n", 1)[1].split("\n---", 1)[0].split("\n## ", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def assert_linked_and_short(markdown: str, heading: str) -> list[str]:
    lines = summary_lines(markdown, heading)
    assert 1 <= len(lines) <= summary.MAX_LINES, lines
    targets = anchors(markdown)
    for line in lines:
        links = re.findall(r"\]\(#([^)]+)\)", line)
        assert links and all(link in targets for link in links), (line, sorted(targets))
    return lines


def test_anchor_follows_the_heading_rule_of_rendered_markdown():
    assert summary.anchor("The Published Claims, Re-tested") == "the-published-claims-re-tested"
    assert summary.anchor("Where the run's time went") == "where-the-runs-time-went"
    assert summary.anchor("After Tuning (Optimized Triton Config)") == "after-tuning-optimized-triton-config"
    assert summary.anchor("a \\*b\\* &lt;c&gt;") == "a-b-c"


def answers(summary: dict) -> int:
    """How many answers the summary's context holds: the template writes one line per answer."""
    return (len(summary["fastest"]["groups"]) + bool(summary["fastest"]["more_groups"])
            + sum(1 for key in ("tuning", "claims", "precision", "time") if summary[key])
            + bool(summary["decided"]["asked"]))


@pytest.mark.parametrize("name", ["h200", "h100"])
def test_the_committed_gpu_runs_open_with_a_short_summary_whose_links_exist(name, request):
    collected, config = request.getfixturevalue(name)
    report = render(collected, config, PUBLISHED)
    assert report.index("### Summary") < report.index("### Environment Setup")
    lines = assert_linked_and_short(report, "### Summary")
    assert answers(context(collected, config)) == len(lines)


def test_a_cpu_run_of_one_process_per_job_and_an_old_cpu_run_have_short_linked_summaries(tmp_path):
    for collected, config in (cpu_run(tmp_path / "one", 1),
                              (json.loads((CPU_RUN / "results.json").read_text()),
                               json.loads((CPU_RUN / "config.json").read_text()))):
        assert_linked_and_short(render(collected, config, PUBLISHED), "### Summary")


# ---------------------------------------------------------------- the answers, by the policy

def test_on_the_h200_the_vendor_kernel_leads_and_the_tuned_config_gains_beyond_the_noise(h200):
    found = context(*h200)
    main = found["fastest"]["groups"][0]
    assert main["head_dim"] == 256 and main["code"] == "winner"
    assert "SDPA (cuDNN)" in main["leaders"] and "Triton" not in main["leaders"]
    assert main["ratios"][0] > 1.3  # ahead of the next by the policy, well beyond its margin
    tuning = found["tuning"]
    assert tuning["code"] == "compared" and tuning["claim"] == "faster" and tuning["faster"] == "b"
    assert tuning["shape"] == "seq=4096" and 2.0 < tuning["gain"] < 2.7  # 2.36 -> 1.01 ms device time
    assert sum(tuning["counts"].values()) == tuning["shapes"] == 5


@pytest.mark.parametrize("name", ["h200", "h100"])
def test_every_published_claim_gets_a_verdict_and_every_untold_one_a_cause(name, request):
    found = context(*request.getfixturevalue(name))["claims"]
    assert found["total"] == 6 and sum(found["counts"].values()) == 6
    assert sum(found["causes"].values()) == found["counts"]["cannot tell"]
    assert set(found["causes"]) <= {"too noisy", "no interval", "not measured", "other config"}  # a GPU tests all


def test_on_a_cpu_run_without_flexattention_the_claims_are_untestable_here():
    collected = json.loads((CPU_RUN / "results.json").read_text())
    found = context(collected, json.loads((CPU_RUN / "config.json").read_text()))
    assert found["claims"]["counts"] == {"holds": 0, "fails": 0, "cannot tell": 6}
    assert found["claims"]["causes"] == {"untestable here": 6}
    # Said once (newcomer point 9), not per claim.
    report = render(collected, json.loads((CPU_RUN / "config.json").read_text()), PUBLISHED)
    claims = report.split("### The Published Claims, Re-tested", 1)[1].split("\n---", 1)[0]
    assert claims.count("None of these claims can be tested on this host: each needs FlexAttention") == 1
    assert "\n- " not in claims
    assert found["tuning"]["code"] == "not measured"  # FlexAttention, the Triton role there, did not run
    assert found["precision"] is None  # schema 1: no trials, no interval to state
    assert found["time"]["jobs"] == 10 and found["time"]["span_s"] > 0


def test_one_process_per_job_gives_no_interval_and_no_claim(tmp_path):
    found = context(*cpu_run(tmp_path, 1))
    assert found["precision"]["code"] == "one process"
    assert found["precision"]["one_process"] == found["precision"]["cells"] == 30
    assert {g["code"] for g in found["fastest"]["groups"]} == {"untold"}
    # The first screen says which setting gives the paired test (newcomer review, finding 1) ...
    assert {g["setting"] for g in found["fastest"]["groups"]} == {"cpu: {repeats: 2}"}
    # ... and names no backend whose paired trials lead by less than the margin (FlexAttention's 0.7-1.1%).
    assert [g["trials_lead"] for g in found["fastest"]["groups"]] == [None, None]
    assert found["tuning"]["claim"] == "cannot tell" and found["tuning"]["reason_code"] == "one_process"
    assert found["tuning"]["counts"] == {"cannot tell": 5}


def test_one_process_per_job_names_the_backend_every_paired_trial_put_ahead_untested(tmp_path):
    """SDPA made 3x faster in every trial of one process: the line names it as ahead in every paired
    trial, says it is untested, and gives the setting that tests it."""
    collected, config = cpu_run(tmp_path, 1)
    for result in collected["results"]:
        for trial in result["backends"]["sdpa"]["trials"]:
            trial["wall_mean_ms"] /= 3
    found = context(analyse_run(collected), config)
    leads = [g["trials_lead"] for g in found["fastest"]["groups"]]
    assert all(lead and lead["leader"] == "SDPA" and lead["least"] > 1.5 for lead in leads), leads
    text = render(collected, config, PUBLISHED)
    assert "was ahead of the next in every paired trial at every shape" in text and "untested" in text
    assert "`cpu: {repeats: 2}` (two processes a job) gives the paired test" in text


def test_the_summary_counts_the_kernel_time_checks_and_the_claims_carry_a_disagreement():
    """A real H100 x2 run (examples/h100-x2-2026-11-25): every ok cell's graph check is counted as
    agree, differ or could not judge; native fp32 at seq 4096 differs (+1.5-2.1% in every run), and
    a claim on that cell says so."""
    import tarfile

    with tarfile.open(ROOT / "examples" / "h100-x2-2026-11-25" / "archive-0001.tar.gz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/results.json"))
        collected = analyse_run(json.load(tar.extractfile(member)))
        config = json.load(tar.extractfile(next(m for m in tar.getmembers() if m.name.endswith("/config.json"))))
    run = Run(collected, config)
    checked = summary.precision(run)["checked"]
    assert sum(checked.values()) == summary.precision(run)["cells"] and checked["differ"] >= 1
    result = next(r for r in run.results if r["variant"] == "default" and r["shape"]["seq"] == 4096)
    native = result["backends"]["native"]
    assert native["cross_check"]["kernel_time"]["agrees"] is False  # +1.5%, tolerance +-0.9% (its run's figure)
    claim = run.claim(result["backends"]["sdpa_cudnn"], native, ("cuDNN", "Native"))
    assert claim["checked"] == "differs" and "differs for Native (+1.6%" in claim["why"]


def test_with_processes_to_compare_a_cpu_run_states_its_interval_and_reaches_verdicts(tmp_path):
    found = context(*cpu_run(tmp_path, 3))
    assert found["precision"]["code"] == "intervals" and found["precision"]["one_process"] == 0
    assert 0 < found["precision"]["half_width"] < 0.05
    assert found["tuning"]["claim"] == "faster"
    assert all(g["code"] in ("winner", "no clear winner") for g in found["fastest"]["groups"])


def test_a_backend_the_policy_cannot_tell_from_the_fastest_shares_the_lead(h200):
    collected, config = copy.deepcopy(h200[0]), h200[1]
    # Native made the fastest at every main shape of the last variant, its trials spread (unstable):
    # paired with cuDNN's trials they point both ways, so the policy cannot tell it from the next
    # ones (the noise hides a difference beyond the margin) and it leads with them; the next the
    # policy puts behind a leader is still named.
    for result in collected["results"]:
        if result["variant"] == "tuned" and result["shape"]["head_dim"] == 256:
            native, cudnn = result["backends"]["native"], result["backends"]["sdpa_cudnn"]
            stats = native["stats"]
            stats["stable"], stats["unstable_reason"], stats["unstable_codes"] = False, "made unstable", ["spread"]
            stats["device_ms"]["median"] = cudnn["stats"]["device_ms"]["median"] * 0.95
            # Its trials straddle cuDNN's (10% below and 5% above in turn): not every one apart.
            for trial, other, factor in zip(native["trials"], cudnn["trials"], [0.9, 1.05] * 10):
                trial["device_ms"] = other["device_ms"] * factor
    main = context(collected, config)["fastest"]["groups"][0]
    assert main["code"] == "winner" and main["leaders"][0] == "Native" and "SDPA (cuDNN)" in main["leaders"]
    assert main["reasons"] == ["noise wider than the margin"] and len(main["untold"]) == 4
    assert "Triton" not in main["leaders"]


# ---------------------------------------------------------------- compare's page

def test_compare_opens_with_what_changed_between_the_newest_two_runs():
    comparison = compare_entries(list_entries(H200), Rule.of(None))
    found = compare_summary.compare_context(comparison)
    assert (found["old"], found["new"]) == ("cuda-13.0/0002-7a004542", "cuda-13.0/0003-25eb76a9")
    assert found["cells"] == sum(found["counts"].values()) > 0
    assert found["counts"].get("now_available") == 10  # aiter's Triton kernel, installed for 0003
    assert sum(found["untold"].values()) == found["counts"].get("cannot tell", 0)
    assert found["largest"] is None or found["largest"]["code"] in ("regression", "improvement")
    page = render_markdown(comparison)
    assert page.index("## Summary") < page.index("## Runs")
    lines = assert_linked_and_short(page, "## Summary")
    # the third line: aiter was installed for 0003 under the same label (issue 40)
    assert len(lines) == 3 and lines[2].startswith("- **Software differs under one label** `cuda-13.0`")


def test_compare_of_one_run_has_no_summary(tmp_path):
    comparison = compare_entries(list_entries(H200)[:1], Rule.of(None))
    assert compare_summary.compare_context(comparison) is None
    assert "## Summary" not in render_markdown(comparison)


def test_a_precision_wider_than_the_median_is_called_not_precise_not_given_as_a_plus_minus(tmp_path):
    """Issue 40: "±163.81% of the median" reads as a negative lower bound. A half-width of 100% or
    more is said in words; a narrower one keeps its ±."""
    lines = {}
    for noise in (0.6, 0.004):
        run_dir = make_run(tmp_path / str(noise), "cpu", versions=CPU, noise=noise)
        collected = analyse_run(read_results(run_dir))
        markdown = render(collected, json.loads((run_dir / "config.json").read_text()), None)
        [lines[noise]] = [line for line in markdown.splitlines() if line.startswith("- **Precision**")]
    assert "not precise" in lines[0.6] and "±" not in lines[0.6], lines[0.6]
    assert re.search(r"half-width 1\d\d% of it", lines[0.6]), lines[0.6]
    assert re.search(r"is ±0\.\d\d% of the median", lines[0.004]) and "not precise" not in lines[0.004]
