"""What the report claims, checked against the comparison policy on real archived runs.

Reports are rendered from real runs: the committed H200 entries (examples/h200/archive) and the two
H100 runs of examples/h100-2026-11-25. Each claim the report
makes (bold winners, the winner table, speedup marks, Key Improvements, the appendix line, the
published claims re-tested) is checked against fabench.analysis.policy.judge applied to the same
two cells here, independently of the report's code.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml

from fabench.analysis import analyse_run, claims
from fabench.analysis.figures import cell_metric
from fabench.analysis.pairs import PairNoise
from fabench.analysis.policy import Code, Rule, judge
from fabench.analysis.within_run import paired, processes_apart
from fabench.report.model import Run, role_backend
from fabench.results.published import PublishedError, load_published
from support.published_run import as_collected
from fabench.report.render import render
from fabench.report.sections import published_claims

ROOT = Path(__file__).resolve().parents[1]
H200 = sorted((ROOT / "examples" / "h200" / "archive" / "cuda-13.0").glob("0*"))
H100_ROOT = ROOT / "examples" / "h100-2026-11-25" / "archive" / "cuda-13.0"
H100 = sorted(H100_ROOT.glob("0*"))
ENTRIES = H200 + H100
PUBLISHED_YAML = ROOT / "report" / "published" / "mi300x-2025-12-30.yaml"
RULE = Rule.of({})  # the policy's defaults: the rule the example runs' configs set (they set no `comparison`)


def entry_run(entry: Path) -> tuple[dict, dict]:
    return json.loads((entry / "results.json").read_text()), json.loads((entry / "config.json").read_text())


def one_process(collected: dict) -> dict:
    """The run as if each job had run one process: process 0's trials only, analysed again."""
    run = copy.deepcopy(collected)
    for result in run["results"]:
        for entry in result["backends"].values():
            entry["trials"] = [t for t in entry.get("trials") or [] if t.get("process", 0) == 0]
    return analyse_run(run)


def table_after(text: str, heading: str) -> list[list[str]]:
    lines = text.splitlines()
    start = lines.index(heading)
    row = next(i for i in range(start, len(lines)) if lines[i].startswith("|"))
    rows = []
    for line in lines[row + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def policy_says(a: dict, b: dict, run: Run | None = None) -> str:
    """The policy's verdict on two cells of one run in the report's words, derived here from the
    policy alone: faster-a / faster-b / same / below margin / cannot tell. Two backends of one job
    (`run` given: both in one of its results) by the paired test over processes with the run's
    pooled noise (within_run.paired), others by judge and, for an unstable cell, processes_apart."""
    if a is None or b is None or a["status"] != "ok" or b["status"] != "ok":
        return "not measured"
    same_job = run is not None and any(a in r["backends"].values() and b in r["backends"].values()
                                       for r in run.results)
    if same_job:
        metric = cell_metric(a, b)
        verdict = paired(a, b, metric, RULE, PairNoise.of(run.results, metric))
    else:
        verdict = judge(a, b, RULE)
        noise = [((e["stats"] or {}).get(verdict["metric"] or "") or {}).get("noise") or {} for e in (a, b)]
        if verdict["code"] == Code.UNSTABLE and not any(n.get("between") == "trials" for n in noise):
            apart = processes_apart(a, b, verdict["metric"], RULE)
            if apart:
                return "faster-" + apart["faster"]
        if any(n.get("between") == "trials" for n in noise):
            return "cannot tell"
    if verdict["verdict"] == "cannot tell":
        return "cannot tell"
    if verdict["verdict"] == "changed":
        return "faster-b" if verdict["ratio"] < 1 else "faster-a"
    return "below margin" if verdict["code"] == Code.SMALL_CHANGE else "same"


# ------------------------------------------------------------ every claim of a real report

@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
@pytest.mark.parametrize("processes", ["as run", "one process"])
def test_no_claim_in_a_report_of_a_real_run_contradicts_the_policy(entry, processes):
    collected, config = entry_run(entry)
    if processes == "one process":
        collected = one_process(collected)
    published = load_published(PUBLISHED_YAML)
    text = render(collected, config, published)
    run = Run(collected, config)
    tuned = run.variants[-1]
    vendor_label, triton_label = run.label("vendor"), run.label("triton")
    winners = {row[0]: row for row in table_after(text, f"#### {vendor_label} vs {triton_label}: winner per "
                                                        f"sequence length ({run.variant_label(tuned)})")}
    beats = [line for line in text.splitlines() if f"**beats {vendor_label}**" in line]
    told, untold = 0, 0
    for result in run.results:
        shape = "({}, {}, {}, {})".format(*(result["shape"][k] for k in ("batch", "seq", "heads", "head_dim")))
        says = policy_says(role_backend(result, "vendor"), role_backend(result, "triton"), run)
        told += says.startswith("faster")
        title = run.title(result["variant"])
        head_dim = result["shape"]["head_dim"]
        heading = f"#### {title}"
        rows = table_after(text, heading) if head_dim == run.main_head_dim else \
            table_after(text[text.index(heading):], f"At d_k={head_dim}:")
        row = next(r for r in rows if r[0] == shape)
        # Speedups: a mark wherever the policy does not tell the role from the baseline.
        for column, role in ((4, "vendor"), (5, "triton")):
            base = policy_says(role_backend(result, "baseline"), role_backend(result, role), run)
            mark = {"cannot tell": " ~", "same": " =", "below margin": " ="}.get(base, "")
            assert row[column].replace("**", "").endswith(f"x{mark}"), (result["variant"], shape, role, row)
        # Bold: only the cell the policy finds faster, and only in the later variants' tables.
        bold = [i for i in (2, 3) if row[i].startswith("**")]
        expected = {"faster-a": [2], "faster-b": [3]}.get(says, []) if result["variant"] != run.variants[0] else []
        assert bold == expected, (result["variant"], shape, says, row)
        if result["variant"] != tuned:
            continue
        winner = winners[shape][1]
        assert winner == {"faster-a": f"**{vendor_label}**", "faster-b": f"**{triton_label}**", "same":
                          "same within the margin", "cannot tell": "no claim"}.get(says, winner), (shape, says)
        if says == "below margin":
            assert winner.endswith("below the margin")
        untold += says == "cannot tell"
        beaten = any(run.shape_name(result["shape"]) in line for line in beats)
        assert beaten == (says == "faster-b"), (shape, says, beats)
    if untold:  # "beats at no measured shape" would claim more than the run knows
        assert "at no measured shape" not in text
    if processes == "one process":
        assert told == 0  # one process per job: nothing the run shows is a claim
        assert "**No prediction interval**" in text
    check_appendix(text, run)
    check_published_claims(text, run, published)
    check_published_ratios(text, run)


def check_published_ratios(text: str, run: Run) -> None:
    """A published-vs-reproduced factor is marked wherever this run's figure supports no claim."""
    for row in table_after(text, "### Published vs Reproduced"):
        variant = next(v for v in run.variants if run.variant_label(v) == row[0])
        result = next(r for r in run.of(variant) if "({}, {}, {}, {})".format(
            *(r["shape"][k] for k in ("batch", "seq", "heads", "head_dim"))) == row[1])
        entry = role_backend(result, row[2])
        if entry is None or entry["status"] != "ok":
            continue
        stats = entry["stats"]
        noise = stats["wall_mean_ms"].get("noise") or {}
        untold = not stats["stable"] or noise.get("between", "trials") == "trials"
        assert row[7].endswith(" ~") == untold, row


def check_appendix(text: str, run: Run) -> None:
    """The appendix's "X is N x faster than Y" line only where the policy names the faster cell."""
    appendix = text.split("### Appendix: Full Benchmark Output")[1]
    for result in run.of(run.variants[-1]):
        if result["shape"]["head_dim"] == run.main_head_dim:
            continue
        says = policy_says(role_backend(result, "vendor"), role_backend(result, "triton"), run)
        ratio_line = re.search(r"^  .+ is \d+\.\d\dx (faster|slower) than ", appendix, re.MULTILINE)
        if says.startswith("faster"):
            assert ratio_line and ratio_line.group(1) == ("faster" if says == "faster-a" else "slower")
        else:
            assert ratio_line is None
            assert ("take the same time" if says == "same" else "No claim on which is faster") in appendix


def check_published_claims(text: str, run: Run, published: dict) -> None:
    """Each published claim's verdict is what the policy says of its two cells."""
    rows = {r[0]: r for r in table_after(text, "### The Published Claims, Re-tested")}
    for claim in published["claims"]:
        cells = published_claims.claim_cells(claim)
        results = [run.find(c["variant"], claim["shape"]) for c in cells]
        entries = [role_backend(r, c["role"]) if r else None for r, c in zip(results, cells)]
        if "faster" in claim:
            says = policy_says(entries[1], entries[0], run)  # a = the cell claimed slower, b = claimed faster
            expected = {"faster-b": "holds", "cannot tell": "cannot tell", "not measured": "cannot tell"}.get(
                says, "fails")
        else:
            says = policy_says(*entries, run)
            expected = {"same": "holds", "below margin": "holds", "cannot tell": "cannot tell",
                        "not measured": "cannot tell"}.get(says, "fails")
        row = rows[claim["published"].replace("|", "\\|")]
        assert row[2] == f"**{expected}**", (claim["id"], says, row)


# ------------------------------------------------------------ the published claims on the H100

def test_the_published_claims_on_the_h100_say_which_hold_which_role_and_which_figure():
    collected, config = entry_run(H100[-1])
    text = render(collected, config, load_published(PUBLISHED_YAML))
    rows = {r[0].split(":")[0].split(" (")[0]: r for r in
            table_after(text, "### The Published Claims, Re-tested")}
    verdicts = {key: row[2] for key, row in rows.items()}
    # Measured on the H100 (device medians): aiter tuned 0.056 ms vs default 0.098 ms at seq 512;
    # cuDNN 0.027 ms beats aiter's 0.056 ms there; cuDNN's cell at seq 4096 is unstable (4.7% spread),
    # but every one of its trials is 95% or more below every one of aiter's: told apart all the same.
    assert verdicts == {"Triton at seq=512": "**holds**", "Triton now beats CK at seq=512": "**fails**",
                        "CK wins at seq=1024": "**holds**", "CK wins at seq=2048": "**holds**",
                        "CK wins at seq=4096": "**holds**", "d_k=64": "**fails**"}
    assert all(row[3].startswith("device time") for row in rows.values())
    # Told apart by the paired test over its processes: cuDNN's spread is noise both partners share.
    assert "paired test over 2 processes (all 6 paired trials on this side" in rows["CK wins at seq=4096"][5]
    notes = text.split("### The Published Claims, Re-tested")[1].split("\n---\n")[0]
    assert "- CK wins at seq=2048 (0.447ms vs 0.511ms): SDPA (cuDNN) fills CK's role (vendor).\n" in notes
    # aiter's Python wrapper: 0.165 ms of host time per call against its 0.056 ms kernel at seq 512.
    assert ("The published method's wall clock is host-bound here (Tuned config Triton: host 0.165 ms per call, "
            "kernel 0.056 ms; Default config Triton: host 0.152 ms per call, kernel 0.098 ms)") in notes
    assert rows["Triton at seq=512"][3] == "device time; its wall clock host-bound"
    assert rows["CK wins at seq=2048"][3] == "device time"


def test_a_run_of_one_process_per_job_tells_no_published_claim():
    collected, config = entry_run(H100[-1])
    text = render(one_process(collected), config, load_published(PUBLISHED_YAML))
    rows = table_after(text, "### The Published Claims, Re-tested")
    assert {row[2] for row in rows} == {"**cannot tell**"}
    assert all("one process per job: the noise between processes is not estimated" in row[5]
               or "trials unstable" in row[5] for row in rows)
    assert sum("one process per job" in row[5] for row in rows) >= 4
    assert "the comparison policy cannot tell the two times apart (" in text
    assert "one process per job: the noise between processes is not estimated" in text


def test_a_claim_on_another_config_than_the_published_cannot_be_told():
    collected, config = entry_run(H200[-1])
    changed = copy.deepcopy(collected)
    for result in changed["results"]:
        if result["variant"] == "tuned":
            result["kernel_config"]["values"]["BLOCK_M"] = 128
    rows = table_after(render(changed, config, load_published(PUBLISHED_YAML)), "### The Published Claims, Re-tested")
    tuned_rows = [r for r in rows if "this run's config is not the published one" in r[5]]
    assert tuned_rows and all(r[2] == "**cannot tell**" for r in tuned_rows)
    assert "tuned BLOCK_M=128 (published 64)" in tuned_rows[0][5]


def test_published_numbers_alone_re_test_no_claim():
    collected, config = as_collected(load_published(PUBLISHED_YAML))
    assert "Published Claims, Re-tested" not in render(collected, config, load_published(PUBLISHED_YAML))


# ------------------------------------------------------------ the claims file

def broken(tmp_path: Path, change) -> Path:
    data = yaml.safe_load((ROOT / "report" / "published" / "mi300x-2025-12-30.yaml").read_text())
    change(data)
    path = tmp_path / "published.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path


@pytest.mark.parametrize("change, message", [
    (lambda d: d["claims"][0]["faster"].update(variant="nope"),
     "claims[0] (tuning-seq512): variant 'nope' is not one of the variants (default, tuned)"),
    (lambda d: d["claims"][1].update(id="tuning-seq512"), "claims[1] (tuning-seq512): the id is used twice"),
    (lambda d: d["claims"][0].pop("slower"),
     "claims[0] (tuning-seq512): give either faster and slower (one cell claimed faster) or same (two cells), "
     "not faster"),
    (lambda d: d["claims"][0]["faster"].update(role="ck"), "claims.0.faster.role: 'ck' is not one of"),
])
def test_a_broken_claim_is_one_clear_line(tmp_path, change, message):
    with pytest.raises(PublishedError) as err:
        load_published(broken(tmp_path, change))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_claims_are_the_published_reports_own_words():
    text = (ROOT.parent / "shared" / "reference" / "published-mi300x-report.md")
    claims_file = load_published(PUBLISHED_YAML)["claims"]
    assert len({c["id"] for c in claims_file}) == len(claims_file) == 6
    if text.is_file():  # the numbers each claim quotes are the report's
        report = text.read_text()
        for number in ("0.436ms → 0.162ms", "0.162ms vs 0.181ms", "0.154 ms", "0.152 ms"):
            assert number in report
        for claim in claims_file:
            for ms in re.findall(r"\d\.\d{3}", claim["published"]):
                assert ms in report, (claim["id"], ms)


# ------------------------------------------------------------ claims.compare is the policy's verdict

def test_compare_is_the_policys_verdict_in_a_claims_words():
    collected, _ = entry_run(H200[-1])
    result = next(r for r in collected["results"] if r["variant"] == "tuned" and r["shape"]["seq"] == 2048)
    vendor, triton = role_backend(result, "vendor"), role_backend(result, "triton")
    claim = claims.compare(vendor, triton, RULE, names=("cuDNN", "aiter"))
    verdict = judge(vendor, triton, RULE)
    assert verdict["verdict"] == "changed" and claim["claim"] == "faster" and claim["faster"] == "a"
    assert claim["ratio"] == pytest.approx(verdict["ratio"]) and claim["metric"] == "device_ms"
    assert claim["code"] == verdict["code"] == Code.REGRESSION  # the second cell, aiter, is the slower
    same = claims.compare(vendor, copy.deepcopy(vendor), RULE, names=("x", "y"))
    assert (same["claim"], same["faster"], same["code"]) == ("same", None, Code.SAME)
    shaky = copy.deepcopy(triton)
    shaky["stats"]["stable"] = False
    # Unstable, but every trial of aiter's 2x slower kernel beyond every one of cuDNN's: told apart.
    apart = claims.compare(vendor, shaky, RULE)
    assert (apart["claim"], apart["faster"], apart["code"]) == ("faster", "a", claims.SEPARATED)
    close = copy.deepcopy(shaky)
    assert (claims.compare(close, shaky, RULE)["claim"], claims.compare(close, shaky, RULE)["code"]) == (
        "cannot tell", Code.UNSTABLE)
    assert claims.compare(vendor, {"status": "failed"}, RULE)["code"] == Code.MISSING
    # A publication's numbers carry no analysis: as published only when the caller says they are.
    plain = {"status": "ok", "wall_mean_ms": 0.4, "stats": None}
    quicker = {**plain, "wall_mean_ms": 0.3}
    assert claims.compare(plain, quicker, RULE, published=True)["claim"] == "as published"
    assert claims.compare(plain, quicker, RULE)["claim"] == "cannot tell"


# ------------------------------------------------------------ the speedup figure

def bar_labels(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


@pytest.mark.parametrize("entry", ENTRIES[-1:], ids=[e.name for e in ENTRIES[-1:]])
def test_the_speedup_figure_names_code_no_variant_touches_and_marks_what_the_policy_cannot_tell(entry):
    import matplotlib.pyplot as plt

    from fabench.report.speedup_plot import UNSTABLE_BAR, speedup_figure

    collected, _ = entry_run(entry)
    fig = speedup_figure(collected, RULE)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    # cuDNN reads no variant config (the same code in both variants): a bar per variant all the same,
    # their difference the run's noise (issue 40: "every variant" drew one), and a note says so.
    assert {"SDPA (cuDNN), default", "SDPA (cuDNN), tuned", "Triton, default", "Triton, tuned"} <= set(legend)
    assert any("SDPA (cuDNN) ran the same code in every variant" in t.get_text().replace("\n", " ") for t in fig.texts)
    unstable = [r for r in collected["results"] if r["variant"] == "tuned"
                and not role_backend(r, "vendor")["stats"]["stable"]]
    within = claims.WithinRun(collected["results"], RULE)  # the figure's claims are the report's, paired
    untold = [r for r in collected["results"] if r["variant"] == "tuned" and within.claim(role_backend(r, "baseline"), role_backend(r, "vendor"),
                                                              ("b", "v"))["claim"] == "cannot tell"]
    assert len([t for t in bar_labels(fig) if t.endswith(" ~")]) >= len(untold) and unstable
    assert legend[-1] == UNSTABLE_BAR  # unstable cells' bars are drawn hollow, and the legend says so
    plt.close(fig)
    fig = speedup_figure(one_process(collected), RULE)
    assert all(t.endswith(" ~") for t in bar_labels(fig) if t != "did not run")
    assert any("cannot tell it from the baseline" in t.get_text() for t in fig.texts)
    plt.close(fig)


# ------------------------------------------------------------ a CPU run: the Triton role left out

def test_a_role_that_ran_nowhere_is_said_once_not_in_every_winner_row():
    fixture = ROOT / "tests" / "fixtures" / "cpu-run"  # a real default CPU run: FlexAttention unavailable
    collected, config = (json.loads((fixture / name).read_text()) for name in ("results.json", "config.json"))
    text = render(collected, config, load_published(PUBLISHED_YAML))
    analysis = text.split("### Analysis")[1].split("\n---\n")[0]
    assert "only SDPA measured" not in text and "| (4, " not in analysis
    assert analysis.count("No winner to name: FlexAttention did not run at any shape (unavailable: ") == 1
    assert "- FlexAttention vs SDPA: not compared (FlexAttention unavailable)" in text
    assert "at no measured shape" not in text
    # Results from before trials carry no noise estimate: every speedup is marked, none is a claim.
    assert "the comparison policy cannot tell the two times apart (no noise estimate)" in text
    rows = table_after(text, "#### After Tuning (Optimized Triton Config)")
    assert [row[4] for row in rows] == ["0.83x ~", "2.48x ~", "2.66x ~", "2.97x ~"]
    claims_rows = table_after(text, "### The Published Claims, Re-tested")
    assert {row[2] for row in claims_rows} == {"**cannot tell**"}
    assert "SDPA fills CK's role (vendor)" in text


def _cell(values_by_process, stable=False):
    trials = [{"process": p, "index": i, "device_ms": v, "wall_mean_ms": v * 1.2}
              for p, vs in values_by_process.items() for i, v in enumerate(vs)]
    return {"status": "ok", "trials": trials}


def test_an_unstable_cell_of_another_job_beaten_at_every_process_is_still_told_apart():
    """Blind side: the numbers are a real H100 case's shape (cuDNN power-capped against aiter 2x
    slower), not a real run; tests/test_paired.py holds the process unit's false-claim rate."""

    rule = Rule()
    capped = _cell({0: [0.49, 0.465, 0.466], 1: [0.487, 0.47, 0.468]})  # 5% spread: unstable
    slower = _cell({0: [1.01, 1.012, 1.009], 1: [1.004, 1.007, 1.011]})
    found = processes_apart(capped, slower, "device_ms", rule)
    assert (found["faster"], found["processes"]) == ("a", [2, 2])
    assert found["p"] < rule.alpha and found["gap"] > 1.0
    close = _cell({0: [0.495, 0.50, 0.498], 1: [0.497, 0.499, 0.50]})  # beyond every process, but by ~1.5%
    assert processes_apart(capped, close, "device_ms", rule) is None
    one_process = _cell({0: [0.49, 0.465, 0.466, 0.487, 0.47, 0.468]})
    assert processes_apart(one_process, slower, "device_ms", rule) is None  # no noise between processes seen
    # Two processes a cell whose medians overlap less than they spread: beyond every one, yet not beyond chance.
    wide = _cell({0: [0.40], 1: [0.52]}), _cell({0: [0.60], 1: [0.75]})
    assert processes_apart(*wide, "device_ms", rule) is None
