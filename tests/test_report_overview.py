"""The report's opening on real runs: its title names only the columns that ran, and where the
variants ran the same code on this host (as the results record it), it says so at the top."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from fabench.report.render import render

ROOT = Path(__file__).resolve().parents[1]
CPU_RUN = ROOT / "tests" / "fixtures" / "cpu-run"  # the default experiment on a CPU host, as measured
H200_ENTRIES = sorted(p.parent for p in (ROOT / "examples" / "h200" / "archive").glob("*/*/results.json"))  # real runs
SAME_CODE = "**On this host the variants run the same code.**"


def load(folder: Path) -> tuple[dict, dict]:
    return (json.loads((folder / "results.json").read_text()), json.loads((folder / "config.json").read_text()))


def opening(text: str) -> str:
    """The report above its first section."""
    return text.split("### Environment Setup")[0]


def test_on_a_cpu_the_title_names_what_ran_and_the_top_says_the_variants_run_the_same_code():
    text = opening(render(*load(CPU_RUN)))
    assert "## AMD EPYC - SDPA vs Native\n" in text  # FlexAttention, the Triton role, did not run
    assert SAME_CODE in text
    assert "Native and SDPA ran the same kernel, package and config in every variant" in text
    assert "read by the FlexAttention column only, which did not run here" in text


def test_a_variant_that_changed_a_backends_code_takes_the_sentence_away():
    """Derived from the cells' recorded code, not from the platform: one CPU cell whose recorded
    config differs in the last variant is a variant's effect."""
    collected, config = load(CPU_RUN)
    collected = copy.deepcopy(collected)
    tuned = next(r for r in collected["results"] if r["variant"] == list(config["variants"])[-1])
    tuned["backends"]["sdpa"]["kernel_config"] = {"values": {"BLOCK_M": 64}}
    assert SAME_CODE not in opening(render(collected, config))


@pytest.mark.parametrize("entry", H200_ENTRIES, ids=lambda p: p.name)
def test_on_a_gpu_where_the_variants_change_the_triton_kernel_nothing_is_said(entry):
    collected, config = load(entry)
    text = opening(render(collected, config))
    ran = {b["label"] for r in collected["results"] for b in r["backends"].values() if b["status"] == "ok"}
    title = next(line for line in text.splitlines() if line.startswith("## "))
    assert all(column in ran for column in title.split(" - ", 1)[1].split(" vs "))
    assert SAME_CODE not in text
