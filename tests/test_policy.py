"""The comparison policy (fabench.analysis.policy): its config key, its verdicts at the default
rule, and the code, hardware and experiment identities every caller shares; on known cells and
on the real archived runs (the committed H200 runs and the shared H100 runs). No torch needed."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fabench.analysis import analyse_run, policy
from fabench.analysis.policy import Code, Rule, RuleError
from fabench.config import schema_error
from fabench.results.archive_read import list_entries
from fabench.results.compare import compare_entries
from support.shared_runs import h100_archive

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "examples" / "h200" / "archive"
NOISE = {"sigma": 0.002, "df": 16, "replicates": 2}
DEFAULTS = Rule.of({})  # the policy's defaults, what a config without `comparison` gets
# The margin a verdict without hardware is judged by: the fallback fit's same-card margin.
SAME_CARD_MARGIN = DEFAULTS.for_pair("same card").margin


def cell(median: float, noise: dict = NOISE, stable: bool = True, **entry) -> dict:
    return {"status": "ok", "stats": {"stable": stable, "device_ms": {"median": median, "noise": noise}}, **entry}


def runs_of(root: Path) -> dict[str, list[dict]]:
    return {p.name: analyse_run(json.loads((p / "results.json").read_text()))["results"]
            for p in sorted((root / "cuda-13.0").glob("0*"))}


# ---------------------------------------------------------------- the rule and its config key

def test_the_rule_comes_from_one_config_key_and_the_cli_and_workflow_share_its_defaults():
    assert Rule.of({}) == Rule.of({"comparison": {}}) == Rule.of(None) == Rule()
    # An archived run's config may hold the retired keys: its rule is still its `comparison`.
    assert Rule.of({"archive": {"threshold": 0.05}, "comparison": {"margin": 0.03}}).margin == 0.03
    assert Rule.of({"comparison": {"margin": 0.02}}).margin == 0.02
    # The project's config.yaml, as the workflow reads it after the schema's defaults: the default rule,
    # which is what `fabench compare` applies without options.
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    assert schema_error(config, schema) is None
    assert Rule.of(config) == DEFAULTS
    assert all("default" not in spec for spec in schema["properties"]["comparison"]["properties"].values())


@pytest.mark.parametrize("config, message", [
    ({"archive": {"threshold": 0.05}}, "archive.threshold is no longer read: set comparison.margin instead"),
    ({"archive": {"tolerance": 0.05}}, "archive.tolerance is no longer read: set comparison.published_margin"),
    ({"comparison": {"margn": 0.02}}, "comparison.margn: unknown key; expected one of margin, alpha"),
    ({"comparison": {"margin": 2}}, "comparison.margin: 2; expected a fraction between 0 and 1"),
    ({"comparison": {"alpha": "5%"}}, "comparison.alpha: '5%'; expected a fraction"),
])
def test_a_bad_comparison_setting_is_refused_on_one_line_naming_the_key(config, message):
    with pytest.raises(RuleError) as err:
        policy.refuse_retired(config)  # what the workflow and the CLI ask of a config before using it
        Rule.of(config)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_schema_refuses_a_bad_comparison_value_naming_the_key():
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    problem = schema_error({**config, "comparison": {"margin": 1.5}}, schema)
    assert problem and "comparison.margin" in problem


# ---------------------------------------------------------------- verdicts at the default rule

def test_the_default_rule_answers_same_small_change_or_changed():
    same = policy.judge(cell(1.0), cell(1.002), DEFAULTS)
    assert (same["verdict"], same["code"]) == ("same", Code.SAME) and same["interval"][1] < 1 + SAME_CARD_MARGIN
    assert 0.01 < SAME_CARD_MARGIN < 0.02
    small = policy.judge(cell(1.0), cell(1.01), DEFAULTS)  # beyond the 0.2% noise, within the same card's margin
    assert (small["verdict"], small["code"]) == ("same", Code.SMALL_CHANGE)
    assert small["interval"][0] > 1 and small["ratio"] == pytest.approx(1.01)
    assert small["values"]["margin"] == SAME_CARD_MARGIN and small["values"]["pair"]["kind"] == "same card"
    slower = policy.judge(cell(1.0), cell(1.02), DEFAULTS)
    assert (slower["verdict"], slower["code"]) == ("changed", Code.REGRESSION)
    faster = policy.judge(cell(1.0), cell(0.97), DEFAULTS)
    assert (faster["verdict"], faster["code"]) == ("changed", Code.IMPROVEMENT)
    noisy = {"sigma": 0.02, "df": 16, "replicates": 2}
    hidden = policy.judge(cell(1.0, noisy), cell(1.01, noisy), DEFAULTS)
    assert (hidden["verdict"], hidden["code"]) == ("cannot tell", Code.NOISY) and hidden["values"]["hides"] > SAME_CARD_MARGIN
    shaky = policy.judge(cell(1.0), cell(1.2, stable=False), DEFAULTS)
    assert (shaky["verdict"], shaky["code"]) == ("cannot tell", Code.UNSTABLE)
    assert list(shaky["values"]["unstable"]) == ["new"]
    assert policy.judge(cell(1.0), cell(1.02), Rule(margin=0.05))["code"] == Code.SMALL_CHANGE


def test_every_code_implies_one_verdict_and_has_words():
    from fabench.analysis import verdict_text

    assert {policy.VERDICT.get(code, "cannot tell") for code in Code} == {"changed", "same", "cannot tell"}
    verdict = policy.judge(cell(1.0), cell(1.01), DEFAULTS)
    for code in (Code.SAME, Code.SMALL_CHANGE, Code.REGRESSION, Code.NO_INTERVAL, Code.NO_FIGURE, Code.MISSING):
        assert verdict_text.why({**verdict, "code": code})  # a code without words would raise
    assert json.loads(json.dumps(verdict))["code"] == "small_change"  # a code is JSON as it stands


def test_a_backend_newly_available_is_news_not_an_improvement():
    was = {"status": "unavailable", "reason": "needs ROCm and AMD's aiter (this host: cuda)"}
    now = policy.judge(was, cell(1.0), DEFAULTS)
    assert (now["verdict"], now["code"]) == ("changed", Code.NOW_AVAILABLE)
    assert now["values"]["old"]["status"] == "unavailable"
    fixed = policy.judge({"status": "failed", "reason": "OOM"}, cell(1.0), DEFAULTS)
    assert fixed["code"] == Code.IMPROVEMENT and fixed["values"]["old"]["reason"] == "OOM"
    assert policy.judge(cell(1.0), {"status": "failed", "reason": "OOM"}, DEFAULTS)["code"] == Code.REGRESSION


def test_another_experiment_or_other_code_is_judged_nowhere():
    got = policy.judge(cell(1.0), cell(1.5), DEFAULTS, experiment=["dtype: float16 -> bfloat16"])
    assert (got["verdict"], got["code"]) == ("cannot tell", Code.OTHER_EXPERIMENT)
    assert got["values"]["differences"] == ["dtype: float16 -> bfloat16"]
    a = cell(1.0, implementation={"kernel": "aiter", "package": "amd-aiter 0.1.7"})
    b = cell(1.5, implementation={"kernel": "aiter", "package": "amd-aiter 0.1.8"})
    assert policy.judge(a, b, DEFAULTS)["code"] == Code.REGRESSION  # versions are what compare compares
    repeat = policy.judge(a, b, DEFAULTS, expect_same_code=True)  # detector-check: two repeats of one code
    assert (repeat["code"], repeat["values"]["differences"]) == (Code.OTHER_CODE, ["implementation"])


def test_a_step_must_clear_the_margin_too():
    quiet = {"sigma": 0.0005, "df": 16, "replicates": 2}
    series = [(f"run{i}", {"median": m, "noise": quiet}) for i, m in enumerate([1.0, 1.0, 1.0, 1.008, 1.008])]
    assert policy.find_step(series, Rule(margin=0.005))["after"] == "run3"
    assert policy.find_step(series, DEFAULTS) is None  # +0.8%: beyond the noise, within the 1.35% margin


# ---------------------------------------------------------------- identities

def test_identical_software_has_one_code_identity_whatever_the_paths_and_caches():
    runs = runs_of(h100_archive())
    first, second = (next(r for r in run if r["variant"] == "default" and r["shape_id"] == "b4-s1024-h8-d256")
                     for run in runs.values())
    for name in ("triton", "flex", "sdpa", "native"):
        a, b = first["backends"][name], second["backends"][name]
        assert policy.same_code(a, b), (name, policy.code_differences(a, b))
    triton = first["backends"]["triton"]
    assert triton["kernel_config"]["configs_dir"] != second["backends"]["triton"]["kernel_config"]["configs_dir"]
    assert "configs_dir" not in json.dumps(policy.code_identity(triton))
    flex = first["backends"]["flex"]
    assert flex["kernels"]["generated_sha256"] != second["backends"]["flex"]["kernels"]["generated_sha256"]


def test_another_aiter_version_config_value_or_kernel_is_other_code():
    triton = next(r for r in runs_of(h100_archive())["0004-9181bb76"] if r["variant"] == "default")["backends"]["triton"]

    def changed(edit) -> dict:
        other = copy.deepcopy(triton)
        edit(other)
        return other

    versions = changed(lambda e: e["implementation"].update(package="amd-aiter 0.1.8"))
    config = changed(lambda e: e["kernel_config"]["values"].update(BLOCK_N=128))
    kernel = changed(lambda e: e["kernels"]["launch"].update(kernel="_attn_fwd_v2"))
    paths = changed(lambda e: e["kernel_config"].update(configs_dir="/tmp/elsewhere"))
    assert policy.code_differences(triton, versions) == ["implementation"]
    assert policy.code_differences(triton, config) == ["kernel_config"]
    assert policy.code_differences(triton, kernel) == ["launched"]
    assert policy.same_code(triton, paths)


def test_hardware_identity_two_cpu_runs_on_one_host_are_the_same_card():
    def cpu_result(host):
        return {"platform": "cpu", "provenance": {"host": host, "device": "AMD EPYC 9654", "arch": "x86_64"}}

    a, b, c = (policy.hardware_identity([cpu_result(h)]) for h in ("ci-1", "ci-1", "ci-2"))
    assert policy.same_card(a, b) and policy.same_hardware(a, c) and not policy.same_card(a, c)
    h200 = runs_of(H200)
    cards = {name: policy.hardware_identity(results) for name, results in h200.items()}
    assert policy.same_card(cards["0001-d37d7e44"], cards["0002-7a004542"])
    assert not policy.same_card(cards["0002-7a004542"], cards["0003-25eb76a9"])
    assert policy.same_hardware(cards["0002-7a004542"], cards["0003-25eb76a9"])


def test_experiment_differences_are_named_and_the_archived_runs_are_one_experiment():
    runs = runs_of(H200)
    first, second = runs["0001-d37d7e44"], runs["0003-25eb76a9"]
    assert policy.experiment_differences(first, second) == []  # the analysis's wording is no setting
    other = copy.deepcopy(second)
    for result in other:
        result["method"]["iters"] = 50
    assert policy.experiment_differences(first, other) == ["method.iters: 100 -> 50"]


# ---------------------------------------------------------------- compare, from the CLI and the workflow

def test_fabench_compare_without_options_gives_the_workflows_verdicts(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    out = tmp_path / "c.json"
    done = subprocess.run([sys.executable, "-m", "fabench.cli", "compare", "--root", str(H200), "--out-md",
                           str(tmp_path / "c.md"), "--out-json", str(out)], env=env, capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    workflow = compare_entries(list_entries(H200), Rule.of(config))  # what the compare rule calls
    cli = json.loads(out.read_text())
    verdicts = [[(c.get("vs_previous") or {}).get("code") for c in row["cells"]] for row in cli["rows"]]
    assert verdicts == [[(c.get("vs_previous") or {}).get("code") for c in row["cells"]] for row in workflow["rows"]]
    assert cli["rule"]["margin"] == DEFAULTS.margin
    flags = [f["code"] for f in cli["flags"]]
    assert "regression" not in flags and "improvement" not in flags  # no speed-up from a backend newly available
    assert flags.count("now_available") == 20  # aiter's Triton ran in 0003 only: 10 cells, vs previous and baseline
    # Judgements of cells measured stable in both runs (vs previous and vs baseline): those on one
    # card answer; 0003 ran on a card of another host, judged at that kind of pair's noise and
    # margin (calibrations.yaml): any it leaves unanswered are against it, too noisy.
    judged = [c[kind] for row in cli["rows"] for c in row["cells"] for kind in ("vs_previous", "vs_baseline")
              if c.get(kind) and c[kind]["code"] not in ("unstable", "now_available", "not_ok")]
    answered = [v for v in judged if v["verdict"] in ("same", "changed")]
    missed = [v for v in judged if v not in answered]
    assert len(answered) >= 0.95 * len(judged)
    assert all("cuda-13.0/0003-25eb76a9" in v["values"]["runs"] for v in missed)  # every one against the other card
    assert {v["code"] for v in missed} <= {"noisy"}
    assert all(v["values"]["pair"]["kind"] == "other host" for v in missed)


@pytest.mark.parametrize("key, value, expected", [
    ("archive", {"threshold": 0.05}, "invalid config: archive.threshold is no longer read: set comparison.margin "
                                     "instead (default fitted per kind of pair, calibrations.yaml)"),
    ("comparison", {"margin": 1.5}, "invalid config: comparison.margin: 1.5"),
])
def test_the_workflow_refuses_a_retired_or_bad_comparison_key_on_one_line_before_any_job(tmp_path, key, value,
                                                                                          expected):
    from workflow_util import default_config, snakemake

    proc = snakemake(tmp_path, "-n", "compare", config={**default_config(), key: value}, timeout=300)
    assert proc.returncode != 0
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("invalid config:")]
    assert len(lines) == 1 and lines[0].startswith(expected), proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()


def test_a_run_of_one_process_per_job_predicts_nothing_and_compare_cannot_tell():
    """One process per job (a CPU run) cannot see the noise between processes, which is what
    separates two runs: no prediction interval is given, and two such runs are never judged."""

    def one_process(collected: dict) -> dict:
        for result in collected["results"]:
            for entry in result["backends"].values():
                entry["trials"] = [t for t in entry.get("trials") or [] if t.get("process", 0) == 0]
        return analyse_run(collected)

    runs = runs_of(h100_archive())
    old, new = (one_process({"results": copy.deepcopy(runs[name])}) for name in ("0004-9181bb76", "0005-1ae7ded7"))
    figures = [(e["stats"] or {}).get(e["stats"]["judged"]) for r in old["results"] for e in r["backends"].values()
               if e["status"] == "ok"]
    assert figures and all(f["ci95"] and f["pi95"] is None for f in figures)
    assert all("no prediction interval" in e["stats"]["ci_method"] for r in old["results"]
               for e in r["backends"].values() if e["status"] == "ok")
    pairs = [(a["backends"][b], n["backends"][b]) for a, n in zip(old["results"], new["results"])
             for b in a["backends"] if a["backends"][b]["status"] == "ok" == n["backends"][b]["status"]]
    verdicts = [policy.judge(a, b, DEFAULTS)["code"] for a, b in pairs if a["stats"].get("stable") and b["stats"].get("stable")]
    assert verdicts and set(verdicts) == {Code.ONE_PROCESS}


def compare_cli(tmp_path, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "fabench.cli", "compare", *args, "--out-md", str(tmp_path / "c.md")],
                          env=env, capture_output=True, text=True, cwd=tmp_path, timeout=300)


def test_a_ci_gate_fails_where_it_judged_too_few_cells(tmp_path):
    """`--fail-on regression` on two runs of which no cell could be judged (another experiment:
    every cell `other_experiment`) exits 4, not 0; `--min-answered` sets the share, alone too."""
    import tarfile

    with tarfile.open(REPO / "examples" / "h200-x2-2026-11-27" / "archive.tgz") as tar:
        for name in tar.getnames():
            if name.startswith("archive/cuda-13.0/0001-3878ea69/"):
                tar.extract(name, tmp_path, filter="data")
    other = tmp_path / "archive" / "cuda-13.0" / "0001-3878ea69"
    pair = [str(H200 / "cuda-13.0" / "0002-7a004542"), str(other)]
    gated = compare_cli(tmp_path, *pair, "--fail-on", "regression", "--out-json", str(tmp_path / "c.json"))
    answers = json.loads((tmp_path / "c.json").read_text())["answers"]
    assert answers["answered"] == 0 and answers["judged"] >= 20
    assert gated.returncode == 4, gated.stderr
    assert gated.stderr.strip().splitlines()[-1] == (
        f"fabench compare: 0 of {answers['judged']} ok cells compared got an answer (0%), fewer than --min-answered 50%")
    assert compare_cli(tmp_path, *pair).returncode == 0  # a report, no gate asked for
    # The committed H200 runs: 109 of 110 ok cells answered vs previous (99.1%; 10 failed in both: not counted).
    assert compare_cli(tmp_path, "--root", str(H200), "--min-answered", "0.99").returncode == 0
    assert compare_cli(tmp_path, "--root", str(H200), "--min-answered", "99.5%").returncode == 4
    refused = compare_cli(tmp_path, "--root", str(H200), "--min-answered", "1.5")
    assert refused.returncode == 2 and "--min-answered: '1.5': give a share between 0 and 1" in refused.stderr
