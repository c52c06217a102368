"""The report's words say what is true (issue 32, item 7), each class over its members, on the
committed H100 and H200 runs rendered by the real renderer:

- the time line: a Snakemake that measured none, some or all of the processes says which;
- the note on config keys a backend did not use names every key FlexAttention received, in every
  variant, and every key it ignored, in one note;
- a backend in two roles is named once in the title and gets one column, its roles named."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from fabench.measure.backends.registry import flex_kernel_options
from fabench.report.render import render

REPO = Path(__file__).resolve().parents[1]
H100 = REPO / "examples" / "h100-2026-11-25" / "archive" / "cuda-13.0" / "0004-9181bb76"
H200_FLEX = REPO / "examples" / "h200" / "archive" / "cuda-13.0" / "0002-7a004542"


def load(entry: Path) -> tuple[dict, dict]:
    return json.loads((entry / "results.json").read_text()), json.loads((entry / "config.json").read_text())


# ---------------------------------------------------------------- the time line

def time_line(report: str) -> str:
    return report.split("### Where the run's time went", 1)[1].split("\n\n", 2)[1]


def process_starts(collected: dict) -> list[float]:
    return sorted(min(p["start"] for p in t["phases"]) for r in collected["results"] for t in r["timelines"])


@pytest.mark.parametrize("earlier", ["none", "one", "all but one", "all"])
def test_the_time_line_says_how_many_processes_this_snakemake_measured(earlier):
    collected, config = load(H100)
    starts = process_starts(collected)
    count = {"none": 0, "one": 1, "all but one": len(starts) - 1, "all": len(starts)}[earlier]
    started_at = starts[count - 1] + 0.001 if count else starts[0] - 5.0
    text = time_line(render(collected, config, None, started_at=started_at))
    rendered_only = "only rendered the report" in text
    assert rendered_only == (count == len(starts)), text
    if 0 < count < len(starts):
        assert f"{count} of the {len(starts)} measuring processes are an earlier Snakemake's" in text, text
        assert f"this one measured the other {len(starts) - count}" in text, text
    if count == 0:
        assert "before the first measuring process" in text, text


# ---------------------------------------------------------------- the note on config keys

# Variants' Triton configs, as a config gives them: (default, tuned).
VARIANT_KEYS = {
    "the same keys": ({"BLOCK_M": 128, "BLOCK_N": 64, "PRELOAD_V": False, "waves_per_eu": 2, "num_warps": 4,
                       "num_ctas": 1, "num_stages": 1},
                      {"BLOCK_M": 64, "BLOCK_N": 32, "PRELOAD_V": True, "waves_per_eu": 2, "num_warps": 4,
                       "num_ctas": 1, "num_stages": 1}),
    "a variant that ignores nothing": ({"BLOCK_M": 128, "BLOCK_N": 64, "PRELOAD_V": False},
                                       {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}),
    "variants that ignore different keys": ({"BLOCK_M": 128, "BLOCK_N": 64, "waves_per_eu": 2},
                                            {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 8, "PRELOAD_V": True}),
}


def with_flex_given(collected: dict, config: dict, member: str) -> tuple[dict, dict, dict]:
    """The H200 run (FlexAttention in the Triton role) as if its variants set these keys: what each
    cell's FlexAttention then received and ignored, by fabench's own rule; and per variant, that."""
    collected, config = copy.deepcopy(collected), copy.deepcopy(config)
    given = dict(zip(("default", "tuned"), VARIANT_KEYS[member]))
    for variant, keys in given.items():
        config["variants"][variant]["triton"] = keys
    received = {v: flex_kernel_options(keys) for v, keys in given.items()}
    for result in collected["results"]:
        options, ignored = received[result["variant"]]
        result["kernel_config"]["values"] = given[result["variant"]]
        result["backends"]["flex"]["kernel_config"] = {"kernel_options": options, "ignored": ignored}
    return collected, config, received


@pytest.mark.parametrize("member", list(VARIANT_KEYS))
def test_the_config_keys_note_names_everything_flex_received_and_ignored(member):
    collected, config, received = with_flex_given(*load(H200_FLEX), member)
    report = render(collected, config, None)
    notes = [line for line in report.splitlines() if line.startswith("**Config keys not used on this platform**")]
    assert len(notes) == 1, notes
    [note] = notes
    given_part = note.split("did not use the config keys", 1)[1]
    ignored_part, _, received_part = given_part.partition("; it was given")
    for options, ignored in received.values():
        assert all(key in ignored_part for key in ignored), (ignored, note)
        assert all(key in received_part for key in options), (options, note)
    if len({tuple(o) for o, _ in received.values()}) > 1:  # the variants' keys differ: said per variant
        assert "Default config" in received_part and "Tuned" in received_part, note


# ---------------------------------------------------------------- one backend in two roles

def with_roles(collected: dict, config: dict, roles: dict) -> tuple[dict, dict]:
    collected, config = copy.deepcopy(collected), copy.deepcopy(config)
    for result in collected["results"]:
        result["roles"] = dict(roles)
    config["roles"] = {platform: dict(roles) for platform in config["roles"]}
    return collected, config


def title(report: str) -> str:
    return next(line for line in report.splitlines() if line.startswith("## "))


def table_header(report: str) -> list[str]:
    results = report.split("### Results", 1)[1]
    header = next(line for line in results.splitlines() if line.startswith("| Config"))
    return [cell.strip() for cell in header.strip("|").split("|")]


CUDNN = "SDPA (cuDNN)"
# roles -> the title's backends (vendor, Triton, baseline order), the columns naming two roles.
SHARED_ROLES = {
    "vendor and Triton": ({"baseline": "native", "vendor": "sdpa_cudnn", "triton": "sdpa_cudnn"},
                          [CUDNN, "Native"], [f"{CUDNN} as vendor and Triton"]),
    "baseline and vendor": ({"baseline": "sdpa_cudnn", "vendor": "sdpa_cudnn", "triton": "flex"},
                            [CUDNN, "FlexAttention"], [f"{CUDNN} as baseline and vendor"]),
    "all three": ({"baseline": "native", "vendor": "native", "triton": "native"},
                  ["Native"], ["Native as baseline and vendor and Triton"]),
    "none shared": ({"baseline": "native", "vendor": "sdpa_cudnn", "triton": "flex"},
                    [CUDNN, "FlexAttention", "Native"], []),
}


@pytest.mark.parametrize("member", list(SHARED_ROLES))
def test_a_backend_in_several_roles_is_named_once_and_has_one_column(member):
    roles, title_words, shared = SHARED_ROLES[member]
    collected, config = with_roles(*load(H200_FLEX), roles)
    report = render(collected, config, None)
    words = re.split(r" - ", title(report), maxsplit=1)[1].split(" vs ")
    assert words == title_words, title(report)
    header = table_header(report)
    times = [h for h in header if h.endswith("(ms)")]
    assert len(times) == len(set(roles.values())) and len(set(times)) == len(times), header
    assert len([h for h in header if h.endswith("Speedup")]) == len(set(roles.values()) - {roles["baseline"]})
    for label in shared:
        assert f"{label} (ms)" in header, header


@pytest.mark.parametrize("member", [m for m in SHARED_ROLES if m != "none shared"])
def test_a_backend_in_two_roles_is_never_set_against_itself(member):
    """No "SDPA vs SDPA", "faster of SDPA and SDPA", "SDPA beats SDPA" and no column printed twice, in
    any section, the appendix's printout included (issue 40, the tester's words)."""
    roles, _, _ = SHARED_ROLES[member]
    collected, config = with_roles(*load(H200_FLEX), roles)
    report = render(collected, config, None)
    labels = {collected["results"][0]["backends"][name]["label"] for name in roles.values()}
    for label in labels:
        name = re.escape(label)
        against_itself = re.compile(rf"{name}\)? (vs|and|beats|or) \**{name}(?![\w (])")
        assert not [line for line in report.splitlines() if against_itself.search(line)], label
        appendix = report.split("### Appendix", 1)[1]
        header = next(line for line in appendix.splitlines() if line.startswith("Config "))
        assert header.count(f"{label} (ms)") <= 1 and header.count(f"{label} Speedup") <= 1, header


# ---------------------------------------------------------------- lines true of this run (issue 40)

def test_the_iteration_line_and_the_cpu_banner_say_what_this_run_did(tmp_path):
    """"benchmark = 1 iterations" where trials ran 2, and the project's own host figures under "every
    number was measured in this run": each line now holds this run's numbers only."""
    from support.runs import CPU, make_run, read_results

    run_dir = make_run(tmp_path, "cpu", versions=CPU)
    collected, config = read_results(run_dir), json.loads((run_dir / "config.json").read_text())
    for result in collected["results"]:
        result["method"]["iters"] = 1
        for backend in result["backends"].values():
            for i, trial in enumerate(backend.get("trials") or []):
                trial["iters"] = 1 + i % 2
    report = render(collected, config, None)
    [line] = [line for line in report.splitlines() if line.startswith("benchmark = ")]
    assert line == "benchmark = 1 iterations  # at least: each trial ran 1 to 2, to last cpu.min_trial_ms", line
    banner = report.split("**A CPU run cannot judge between runs", 1)[1].split("\n", 1)[0]
    assert not re.search(r"\d+(\.\d+)?-\d+(\.\d+)?(x|%)", banner), banner  # no figure of another run
    for result in collected["results"]:
        for backend in result["backends"].values():
            for trial in backend.get("trials") or []:
                trial["iters"] = 1
    assert "benchmark = 1 iterations\n" in render(collected, config, None)
