"""Figures the docs state, checked against what they speak of (issue 48): docs/design.md's arrows
against the packages' imports, the preview's settings in docs/usage.md against
config/preview.yaml, its measured time stated once, and the README's words about the committed
examples against their data (processes per job, the compile-ahead times, the judged comparison
it points a new user to).

Blind side: a figure measured on a machine (a wall time) is checked for being stated once and
alike everywhere, not for being what a rerun would measure."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "fabench"
README = (REPO / "README.md").read_text()
USAGE = (REPO / "docs" / "usage.md").read_text()


# ---------------------------------------------------------------- design.md's arrows

def drawn_arrows() -> dict[str, set[str]]:
    """design.md's layout: {package: the packages it is drawn importing}, from its "a --> b c" lines
    (the top line, workflow/, and the bottom line, the shared modules, are not packages' lines)."""
    design = (REPO / "docs" / "design.md").read_text()
    block = design.split("## The layout", 1)[1].split("```", 2)[1]
    arrows = {}
    for line in block.splitlines():
        if "-->" not in line or line.startswith(("workflow/", "all of them")):
            continue
        left, right = line.split("-->")
        arrows[name(left.strip())] = {name(word) for word in right.split()}
    return arrows


def name(word: str) -> str:
    return word.removesuffix("/").removesuffix(".py")


def imported(names: set[str]) -> dict[str, set[str]]:
    """{package or top module: the others of `names` it imports}, every import read (those inside
    functions too)."""
    found: dict[str, set[str]] = {n: set() for n in names}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        me = parts[0]
        if me not in names:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            modules = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                       [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if isinstance(node, ast.ImportFrom) and node.module == "fabench":
                modules = [f"fabench.{a.name}" for a in node.names]
            for module in modules:
                parts = module.split(".")
                if parts[0] == "fabench" and len(parts) > 1 and parts[1] in names and parts[1] != me:
                    found[me].add(parts[1])
    return found


def test_design_md_draws_the_packages_imports_no_more_no_fewer():
    arrows = drawn_arrows()
    assert {"cli", "plan", "report", "results", "analysis"} <= set(arrows)
    names = set(arrows) | {target for targets in arrows.values() for target in targets}
    real = imported(names)
    assert arrows == {k: v for k, v in real.items() if v}, (arrows, real)


def test_the_arrow_check_sees_a_wrong_arrow():
    arrows = drawn_arrows()
    assert "measure" not in arrows  # measure imports no stage: drawn with no arrow of its own
    assert "measure" in imported({"results", "measure"})["results"]  # results reads what measure defines


# ---------------------------------------------------------------- the preview

def test_usage_md_states_the_previews_trials_as_config_preview_yaml_sets_them():
    preview = yaml.safe_load((REPO / "config" / "preview.yaml").read_text())
    gpu, cpu = preview["timing"], preview["cpu"]
    said = USAGE.split("## A quick look", 1)[1].split("\n## ", 1)[0]
    processes = {1: "one process"}.get(gpu["repeats"], f"each of {gpu['repeats']} processes")
    assert f"on a GPU {gpu['trials']} trials in {processes}" in " ".join(said.split())
    cpu_processes = {1: "one process"}.get(cpu["repeats"], f"each of {cpu['repeats']} processes")
    assert f"on a CPU {cpu['trials']} trials in {cpu_processes} of at least {cpu['min_trial_ms']} ms each" in " ".join(said.split())


def preview_times(text: str) -> set[str]:
    """Every wall time the text gives the CPU preview, as "<n> s"."""
    text = " ".join(text.split())
    found = set()
    for sentence in re.split(r"(?<=\.) ", text):
        if "preview" in sentence and ("2-core" in sentence or "CPU machine" in sentence):
            found |= set(re.findall(r"\b(\d+(?:\.\d)?) s\b", sentence))
    return found


def test_the_cpu_previews_time_is_one_figure_wherever_it_is_given():
    readme, usage = preview_times(README), preview_times(USAGE.split("## A quick look", 1)[1].split("\n## ", 1)[0])
    assert readme and readme == usage, (readme, usage)


# ---------------------------------------------------------------- the README's examples

def repeats_of(archive: Path) -> set[int]:
    return {r["method"].get("repeats") for path in archive.glob("*/*/results.json")
            for r in json.loads(path.read_text())["results"]}


def test_the_readme_says_how_many_processes_per_job_the_h100_example_ran():
    (repeats,) = repeats_of(REPO / "examples" / "h100-2026-11-25" / "archive")
    words = {1: "one process per job", 2: "two processes per job", 3: "three processes per job"}[repeats]
    assert f"`examples/h100-2026-11-25/`: two H100 runs ({words})" in " ".join(README.split())


def test_the_readmes_compile_ahead_times_are_the_examples_own_and_name_the_setting():
    example = (REPO / "examples" / "h200-x2-compile-ahead-2026-11-27" / "README.md").read_text()
    rows = {row.split("|")[1].strip(): row for row in example.splitlines() if row.startswith("| ")}
    seconds = lambda run: re.findall(r"\*{0,2}(\d+\.\d) s\*{0,2} \| [\d.]+ s \|$", rows[run])[0]  # noqa: E731
    cold, warm, never = (round(float(seconds(r))) for r in ("c8", "w9", "w9n"))
    line = " ".join(README.split())
    assert (f"the default run on one H200 in {cold} s cold and {warm} s warm ({never} s warm with compiling "
            "ahead off)") in line


def test_the_judged_example_the_readme_points_to_gives_the_verdicts_it_quotes(tmp_path):
    command = re.search(r"^(fabench compare --root examples/h200/archive[^#\n]*?)\s+# (.+)$", README, re.MULTILINE)
    assert command, "the README's pointer to the judged example"
    args = command[1].split()[1:]
    done = subprocess.run([sys.executable, "-m", "fabench.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    for part in command[2].split(", "):
        assert part in done.stderr.splitlines()[-1], (part, done.stderr)
