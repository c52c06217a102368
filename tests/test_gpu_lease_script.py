"""tools/gpu-lease.sh on a CPU host: its syntax, its plan as a dry run writes it (every command with
its environment, nothing run), the GPU tests' steps as pytest selects them, and its comparisons and
packing run for real on archived runs. Blind side: the GPU runs themselves, their times and whether
the GPU tests pass within their limits are a GPU lease's to show (docs/testing.md)."""

from __future__ import annotations

import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from support.runs import make_run
from workflow_util import REPO

SCRIPT = REPO / "tools" / "gpu-lease.sh"
DEFAULT_RUNS = {"c1", "w1", "w2", "k1", "m1", "m2", "w3", "k2"}


def script_env(tmp_path: Path, **extra: str) -> dict:
    """This checkout's fabench first, its `fabench` command on the path, the lease's folders in tmp_path."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")])),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
            "STAGE": str(tmp_path / "stage"), "SCRATCH": str(tmp_path / "scratch"), **extra}


def test_the_script_parses_and_passes_shellcheck():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True).returncode == 0
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck is not installed (bash -n passed)")
    proc = subprocess.run(["shellcheck", "-x", str(SCRIPT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def environment_and_command(line: str) -> tuple[dict[str, str], list[str]]:
    """A command as the dry run wrote it: `env K=V ... command...` split, or a plain command."""
    words = shlex.split(line)
    if words[0] != "env":
        return {}, words
    assignments = list(itertools.takewhile(lambda w: "=" in w and not w.startswith("-"), words[1:]))
    return dict(w.split("=", 1) for w in assignments), words[1 + len(assignments):]


def dry_plan(tmp_path: Path, plan: str) -> list[tuple[dict, list[str]]]:
    """A plan's commands, in the order the dry run wrote them."""
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(SCRIPT), "start", str(out), plan], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env=script_env(tmp_path, FABENCH_LEASE_DRY_RUN="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"plan {plan}: done, exit 0" in (out / "summary.txt").read_text()
    return [environment_and_command(line) for line in (out / "commands.txt").read_text().splitlines()]


@pytest.fixture(scope="module")
def accept_plan(tmp_path_factory) -> list[tuple[dict, list[str]]]:
    return dry_plan(tmp_path_factory.mktemp("dry"), "accept")


def runs_of(plan) -> dict[str, tuple[dict, list[str]]]:
    """Each Snakemake run of the plan by its name (--config run=NAME)."""
    runs = {}
    for env, command in plan:
        if command[:3] == ["python3", "-m", "snakemake"]:
            runs[command[command.index("--config") + 1].removeprefix("run=")] = (env, command)
    return runs


def test_the_lease_runs_each_measurement_on_its_cards_with_a_lease_and_workers_of_its_own(accept_plan):
    runs = runs_of(accept_plan)
    assert set(runs) == DEFAULT_RUNS | {"pv"}
    cards = {name: env["CUDA_VISIBLE_DEVICES"] for name, (env, _) in runs.items()}
    assert cards == {"c1": "0", "w1": "0", "w2": "0", "k1": "1", "m1": "0,1", "m2": "0,1", "w3": "0", "k2": "1",
                     "pv": "0"}
    assert runs["m1"][1][-4:] == runs["m2"][1][-4:] == ["--profile", "profiles/multi-gpu", "--resources", "gpu=2"]
    assert runs["pv"][1][-2:] == ["--configfile", "config/preview.yaml"]
    measuring = [env for env, _ in accept_plan if env]  # the runs and the GPU tests' steps
    assert len({env["FABENCH_LEASE_DIR"] for env in measuring}) == len(measuring)
    # Workers: the runs on the same cards share a folder (each adopts the spares of the one before),
    # runs on other cards and the tests' steps have their own.
    folder = {name: env["FABENCH_WORKER_DIR"] for name, (env, _) in runs.items()}
    for name in runs:
        assert {n for n in runs if folder[n] == folder[name]} == {n for n in runs if cards[n] == cards[name]}
    tests_folders = [env["FABENCH_WORKER_DIR"] for env, command in accept_plan if "pytest" in command]
    assert len(set(tests_folders)) == len(tests_folders) and not set(tests_folders) & set(folder.values())
    # The GPU tests on card 1, the backends' tests before the rest.
    tests = [(env, command) for env, command in accept_plan if "pytest" in command]
    assert {env["CUDA_VISIBLE_DEVICES"] for env, _ in tests} == {"1"} and len(tests) == 3
    assert "tests/test_gpu_backends.py" in tests[0][1]
    # Installed before anything runs: the carried wheels, then this checkout (its staged copy).
    installs = [command for env, command in accept_plan if command[:4] == ["python3", "-m", "pip", "install"]]
    assert accept_plan.index(({}, installs[0])) < accept_plan.index(({}, installs[1])) < accept_plan.index(tests[0])
    assert installs[1][-2] == "-e" and installs[1][-1].endswith("stage")


def test_every_default_run_is_archived_the_preview_not_and_every_pair_compared(accept_plan):
    stored = {command[3]: command[command.index("--root") + 1] for _, command in accept_plan
              if command[:3] == ["fabench", "archive", "store"]}
    assert set(stored) == {f"results/{name}" for name in DEFAULT_RUNS}  # the archive refuses the preview
    root = stored["results/c1"]
    assert {stored[f"results/{name}"] for name in DEFAULT_RUNS} == {root}
    [preview] = [command for _, command in accept_plan if "run=pv" in command]
    assert preview[preview.index("--configfile") + 1] == "config/preview.yaml"
    pairs = [frozenset(c[2:4]) for _, c in accept_plan if c[:2] == ["fabench", "compare"]]
    assert sorted(map(sorted, pairs)) == sorted(sorted({f"ENTRY-{a}", f"ENTRY-{b}"})
                                                for a, b in itertools.combinations(sorted(DEFAULT_RUNS), 2))
    [check] = [c for _, c in accept_plan if c[:2] == ["fabench", "detector-check"]]
    assert check[check.index("--root") + 1] == root


def test_the_local_memory_plan_runs_each_setting_on_each_card_into_an_archive_of_its_own(tmp_path):
    """The per-process runs give the setting inside the run's one --config (a second --config would
    replace `run=`), land in their own archive, and each card measures both settings."""
    plan = dry_plan(tmp_path, "local-memory")
    runs = runs_of(plan)
    per_process = {name for name, (_, command) in runs.items()
                   if "timing={local_memory: per_process}" in command}
    assert per_process == {"p1", "p2", "p3"}
    assert all(command.count("--config") == 1 for _, command in runs.values())
    cards = {name: env["CUDA_VISIBLE_DEVICES"] for name, (env, _) in runs.items()}
    assert {cards[n] for n in per_process} == {"0", "1"} and {cards[n] for n in ("w2", "k1", "w3")} == {"0", "1"}
    stored = {command[3]: command[command.index("--root") + 1] for _, command in plan
              if command[:3] == ["fabench", "archive", "store"]}
    assert {stored[f"results/{n}"] for n in per_process} == {str(tmp_path / "out" / "archive-per-process")}
    assert stored["results/w2"] == str(tmp_path / "out" / "archive") and "results/pv" not in stored
    checked = {c[c.index("--root") + 1] for _, c in plan if c[:2] == ["fabench", "detector-check"]}
    assert checked == {stored["results/w2"], stored["results/p1"]}


def collected(args: list[str]) -> set[str]:
    """The test ids pytest selects with `args` (xdist's options left out), on this host."""
    args = [a for i, a in enumerate(args) if a not in ("-n", "--dist") and (i == 0 or args[i - 1] not in ("-n", "--dist"))]
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {line for line in proc.stdout.splitlines() if "::" in line}


def test_the_gpu_test_steps_select_each_gpu_test_once(accept_plan):
    """What each step runs, as pytest selects it: the backends' tests alone, the whole-workflow
    tests in their own pytest, every other test of the GPU files in the shared one."""
    steps = [command[command.index("pytest") + 1:] for _, command in accept_plan if "pytest" in command]
    steps = [[a for a in step if a not in ("-v", "-rs", "-rfEs") and not a.startswith("--durations")] for step in steps]
    alone, *others = [collected(step) for step in steps]
    [workflow] = [ids for ids in others if all("test_worker.py::test_the_workflow" in i or "killing_the_worker" in i
                                               for i in ids)]
    [shared] = [ids for ids in others if ids is not workflow]
    assert alone and {i.split("::")[0] for i in alone} == {"tests/test_gpu_backends.py"}
    assert len(workflow) == 2 and len(shared) > 50
    assert not (alone & shared or alone & workflow or shared & workflow)
    files = sorted({i.split("::")[0] for i in shared | workflow})
    marks = steps[0][steps[0].index("-m") + 1]
    assert shared | workflow == collected(["-m", marks, *files])  # none left out


def test_the_comparisons_and_the_packing_run_on_archived_runs(tmp_path):
    """`compare OUT RUN...` as the plan runs it, on three archived runs of one experiment (made by
    support.runs); then `collect`, whatever the plan's state."""
    out = tmp_path / "out"
    out.mkdir()
    env = script_env(tmp_path)
    for seed, name in enumerate(("r1", "r2", "r3")):
        run_dir = make_run(tmp_path / "results", name, seed=seed)
        store = subprocess.run(["fabench", "archive", "store", str(run_dir), "--root", str(out / "archive")],
                               capture_output=True, text=True, timeout=300, env=env)
        assert store.returncode == 0, store.stderr
        (out / f"entry-{name}.txt").write_text(store.stdout)
    proc = subprocess.run(["bash", str(SCRIPT), "compare", str(out), "r1", "r2", "r3"], capture_output=True,
                          text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = (out / "summary.txt").read_text()
    for a, b in (("r1", "r2"), ("r1", "r3"), ("r2", "r3")):
        assert f"compare {a} {b}: exit 0" in summary, summary
        assert "# " in (out / "compare" / f"{a}-vs-{b}.md").read_text()
    assert "detector-check: exit 0" in summary and (out / "detector-check.md").is_file()

    packed = subprocess.run(["bash", str(SCRIPT), "collect", str(out), str(tmp_path / "back")], capture_output=True,
                            text=True, timeout=120, env=env)
    assert packed.returncode == 0 and packed.stdout.strip().endswith("not running"), packed.stdout + packed.stderr
    with tarfile.open(tmp_path / "back" / "lease.tgz") as tar:
        names = set(tar.getnames())
    assert {"out/summary.txt", "out/status.txt", "out/detector-check.md", "out/compare/r1-vs-r2.md"} <= names


def test_the_summary_names_each_failed_test(tmp_path):
    """A lease taken back before its logs came home left only its summary lines: a step's failures
    are named there, as pytest's short summary (-rfE, which the steps pass) gives them."""
    (tmp_path / "test_two.py").write_text("def test_passes():\n    pass\n\n\ndef test_fails():\n    assert 1 == 2\n")
    log = tmp_path / "step.log"
    with log.open("w") as out:
        subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-rfEs", "test_two.py"],
                       cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, timeout=300)
    function = SCRIPT.read_text().split("\npytest_failures() {", 1)[1].split("\n}\n", 1)[0]
    proc = subprocess.run(["bash", "-c", f"pytest_failures() {{{function}\n}}\npytest_failures \"$1\"", "-", str(log)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.splitlines() == ["FAILED test_two.py::test_fails - assert 1 == 2"], proc
    assert "-rfEs" in SCRIPT.read_text().split("\npytest_step() {", 1)[1].split("\n}\n", 1)[0]


def test_the_summary_carries_each_runs_time_by_kind_of_work(tmp_path):
    """The plan notes a run's time by kind of work from its report (work_kinds): the rows the report
    renders (fabench.report.wall_clock, on a run as test_timeline builds it), one line. Blind side:
    that a real run's report has the section is the GPU lease's to show."""
    from fabench.report.render import render
    from test_timeline import timed_gpu_run

    collected, config = timed_gpu_run()
    report = tmp_path / "results" / "w1" / "report.md"
    report.parent.mkdir(parents=True)
    report.write_text(render(collected, config, None))
    function = SCRIPT.read_text().split("\nwork_kinds() {", 1)[1].split("\n}\n", 1)[0]
    proc = subprocess.run(["bash", "-c", f"work_kinds() {{{function}\n}}\nwork_kinds w1", "-"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    kinds = {kind: float(seconds) for kind, seconds in re.findall(r"([a-z][^;]*?) ([0-9.]+) s \(\d+%\)", proc.stdout)}
    assert len(kinds) == len(proc.stdout.split("; ")) >= 4, proc.stdout
    assert kinds["inputs and fp32 reference"] == 40.0, proc.stdout  # 2.0 s in each of 20 processes


def test_the_one_card_plan_runs_the_tests_before_the_runs_and_each_run_after_the_last_on_its_workers(tmp_path):
    """A host of one GPU: nothing beside the GPU tests (one timed job per GPU), every run on card 0
    and in one workers' folder (each adopts the spares the run before left), the preview not archived."""
    plan = dry_plan(tmp_path, "one-card")
    runs = runs_of(plan)
    assert list(runs) == ["c1", "w1", "pv", "w2", "pv0", "w3"]
    # w2 and pv0 leave no spares: pv0 and w3 start their own workers (the comparison with spares).
    assert [n for n, (_, command) in runs.items() if "measure={spare_worker_s: 0}" in command] == ["w2", "pv0"]
    assert all(command.count("--config") == 1 for _, command in runs.values())
    assert {env["CUDA_VISIBLE_DEVICES"] for env, _ in runs.values()} == {"0"}
    assert len({env["FABENCH_WORKER_DIR"] for env, _ in runs.values()}) == 1
    tests = [i for i, (_, command) in enumerate(plan) if "pytest" in command]
    assert len(tests) == 3 and max(tests) < plan.index(runs["c1"])
    assert {plan[i][0]["CUDA_VISIBLE_DEVICES"] for i in tests} == {"0"}
    stored = [command[3] for _, command in plan if command[:3] == ["fabench", "archive", "store"]]
    assert stored == ["results/c1", "results/w1", "results/w2", "results/w3"]


def test_the_tests_plan_runs_the_gpu_tests_alone_on_the_last_card(tmp_path):
    """A dry run counts no GPU (it says card 1, a host of two's last); on a GPU host nvidia-smi counts them.
    Blind side: the count on a GPU host (a device lease runs it)."""
    plan = dry_plan(tmp_path, "tests")
    tests = [env for env, command in plan if "pytest" in command]
    assert len(tests) == 3 and {env["CUDA_VISIBLE_DEVICES"] for env in tests} == {"1"}
    assert not runs_of(plan)


def test_the_spares_plan_runs_three_runs_on_one_card_and_their_workers(tmp_path):
    plan = dry_plan(tmp_path, "spares")
    runs = runs_of(plan)
    assert list(runs) == ["c1", "w1", "pv"] and not any("pytest" in command for _, command in plan)
    assert len({env["FABENCH_WORKER_DIR"] for env, _ in runs.values()}) == 1
