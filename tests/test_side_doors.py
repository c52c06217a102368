"""Every door beside the workflow checks what it is given as strictly as the config check does:
tools/scale_run.py, tools/render_examples.py and `fabench archive store`. A path named by data is
confined to its folder and never followed through a link (fabench.files.confined_path); nothing
but the store writes inside an archive entry; each refusal is one line.

Hostile entries are made here as an attacker would: a real archived entry copied, a file edited,
SHA256SUMS and record.json written again so that the entry verifies."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fabench import cli
from fabench.files import DataPathError, OutputPathError, confined_path, write_atomic
from fabench.results.archive_layout import RECORD, SUMS, content_sha256, sha256_hex, sums_text
from fabench.results.archive_read import list_entries, verify_entry
from support.runs import CUDA_13_0, make_run, read_results, write_results
from workflow_util import REPO, planned_jobs, snakemake

ENTRY = REPO / "examples/h200/archive/cuda-13.0/0003-25eb76a9"  # a real run's entry, intact (format 2)


def tool(name: str, *args, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, str(REPO / "tools" / name), *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=600, cwd=cwd)


def one_line(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    return line


def forged(tmp_path: Path, edit) -> Path:
    """A copy of ENTRY under tmp_path/archive, `edit`(entry folder) applied, sealed again so that it
    verifies (a hostile archive, not one fabench wrote)."""
    entry = tmp_path / "archive" / ENTRY.parent.name / ENTRY.name
    shutil.copytree(ENTRY, entry)
    for path in [entry, *entry.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    edit(entry)
    files = {p.relative_to(entry).as_posix(): p.read_bytes() for p in entry.rglob("*")
             if p.is_file() and p.name not in (RECORD, SUMS)}
    record = json.loads((entry / RECORD).read_text())
    record["files"] = {name: {"bytes": len(data), "sha256": sha256_hex(data)} for name, data in sorted(files.items())}
    record["content_sha256"] = content_sha256({name: sha256_hex(data) for name, data in files.items()})
    (entry / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    (entry / SUMS).write_text(sums_text({**files, RECORD: (entry / RECORD).read_bytes()}))
    # Its digests match; its results may still fail the result schema, which the reader checks too
    # (fabench.results.archive_read.results_schema_problem): then that is its only problem.
    assert all(problem.startswith("results.json: results[") for problem in verify_entry(entry))
    return entry


def edit_json(path: Path, change) -> None:
    value = json.loads(path.read_text())
    change(value)
    path.write_text(json.dumps(value))


# ---------------------------------------------------------------- the helper

@pytest.mark.parametrize("name", ["../x.json", "/etc/passwd", "a/../../x", "", "a/\0b"])
def test_a_path_named_by_data_stays_in_its_folder(tmp_path, name):
    with pytest.raises(DataPathError, match=r"^results.json \$.results\[0\]: .* is not a relative path inside"):
        confined_path(tmp_path, name, "results.json $.results[0]")


def test_a_path_named_by_data_never_goes_through_a_link(tmp_path):
    (tmp_path / "plots").symlink_to("/etc")
    (tmp_path / "report.md").symlink_to("/etc/hostname")
    for name in ("plots/hostname", "report.md"):
        with pytest.raises(DataPathError, match="is a symbolic link, which fabench does not follow"):
            confined_path(tmp_path, name, "the run's file")
    assert confined_path(tmp_path, "a/b.json", "x") == tmp_path / "a" / "b.json"


def test_nothing_but_the_store_writes_inside_an_archive_entry(tmp_path):
    entry = forged(tmp_path, lambda entry: None)
    (tmp_path / "link").symlink_to(entry / "report.md")
    for target in (entry / "report.md", entry / "plots" / "new.png", tmp_path / "link"):
        with pytest.raises(OutputPathError, match="lies in the archive entry .* only `fabench archive store` writes"):
            write_atomic(target, "changed")
    assert verify_entry(entry) == []


# ---------------------------------------------------------------- tools/scale_run.py

@pytest.mark.parametrize("factor", ["0", "-1", "nan", "inf", "1e9", "0.49", "2.01", "two"])
def test_scale_run_takes_a_factor_within_its_bounds_only(tmp_path, factor):
    proc = tool("scale_run.py", ENTRY, tmp_path / "out", "--factor", factor)
    assert proc.returncode == 2 and not (tmp_path / "out").exists()
    assert one_line(proc).startswith(f"tools/scale_run.py: error: argument --factor: {factor!r}")


def test_scale_run_never_writes_into_the_archive(tmp_path):
    entry = forged(tmp_path, lambda entry: None)
    before = {p: p.read_bytes() for p in entry.rglob("*") if p.is_file()}
    for out in (entry, entry.parent / "new", tmp_path / "archive" / "x"):
        proc = tool("scale_run.py", entry, out, "--factor", "1")
        assert proc.returncode == 2 and "lies in the archive" in one_line(proc)
    assert {p: p.read_bytes() for p in entry.rglob("*") if p.is_file()} == before
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "results.json").write_text("{}")
    proc = tool("scale_run.py", entry, tmp_path / "used", "--factor", "1")
    assert proc.returncode == 2 and "holds files already" in one_line(proc)


@pytest.mark.parametrize("edit, words", [
    (lambda e: edit_json(e / "results.json", lambda c: c["results"][0].update(variant="../../escape")),
     "results.json: results[0]: $.variant: '../../escape' does not match"),
    (lambda e: edit_json(e / "config.json", lambda c: c["timing"].update(trials=0)),
     "config.json: timing.trials: 0 is less than the minimum of 1"),
    (lambda e: edit_json(e / "config.json", lambda c: c.update(published="/etc/hostname")),
     "config.json published: '/etc/hostname' is not a relative path inside"),
    (lambda e: edit_json(e / "config.json", lambda c: c.update(published="config.yaml")),
     "config.json published: 'config.yaml' is not a file of report/published/"),
], ids=["variant climbing out", "config the schema refuses", "published absolute", "published elsewhere"])
def test_scale_run_refuses_an_entry_whose_data_points_elsewhere(tmp_path, edit, words):
    entry = forged(tmp_path, edit)
    out = tmp_path / "runs" / "out"
    (tmp_path / "runs").mkdir()
    proc = tool("scale_run.py", entry, out, "--factor", "1.02")
    assert proc.returncode == 2 and words in one_line(proc), proc.stderr
    assert not (tmp_path / "escape").exists() and not (tmp_path / "runs" / "escape").exists()


def test_scale_run_rebuilds_the_run_scaled(tmp_path):
    proc = tool("scale_run.py", ENTRY, tmp_path / "out", "--factor", "1.02", "--run", "plus2")
    assert proc.returncode == 0, proc.stderr
    archived = json.loads((ENTRY / "results.json").read_text())["results"][0]
    rebuilt = read_results(tmp_path / "out")["results"][0]
    name = next(n for n, b in archived["backends"].items() if b["status"] == "ok")
    assert rebuilt["run"] == "plus2"
    assert rebuilt["backends"][name]["trials"][0]["wall_mean_ms"] == pytest.approx(
        archived["backends"][name]["trials"][0]["wall_mean_ms"] * 1.02)
    assert (tmp_path / "out" / rebuilt["variant"] / f"{rebuilt['shape_id']}.json").is_file()


# ---------------------------------------------------------------- tools/render_examples.py

def test_render_examples_names_a_missing_folder_or_example_in_one_line(tmp_path):
    proc = tool("render_examples.py", "--examples", tmp_path / "none")
    assert proc.returncode == 1 and one_line(proc) == f"render_examples: {tmp_path / 'none'}: no such folder of examples"
    proc = tool("render_examples.py", "--examples", tmp_path, "nope")
    assert proc.returncode == 1 and one_line(proc) == f"render_examples: {tmp_path / 'nope'}: no such example"


@pytest.mark.parametrize("content, words", [
    (b"not a tarball", "not a readable archive tarball (file could not be opened successfully)"),
    (b"\x1f\x8b\x08\x00" + b"\x00" * 20, "not a readable archive tarball"),
])
def test_render_examples_names_a_bad_tarball_in_one_line(tmp_path, content, words):
    (tmp_path / "ex").mkdir()
    (tmp_path / "ex" / "archive-0001.tar.gz").write_bytes(content)
    proc = tool("render_examples.py", "--examples", tmp_path)
    assert proc.returncode == 1 and one_line(proc).startswith(f"render_examples: {tmp_path / 'ex' / 'archive-0001.tar.gz'}: ")
    assert words in proc.stderr


def test_render_examples_reads_published_numbers_from_their_place_only(tmp_path):
    forged(tmp_path / "ex", lambda e: edit_json(e / "config.json", lambda c: c.update(published="../../etc/hostname")))
    proc = tool("render_examples.py", "--examples", tmp_path)
    assert proc.returncode == 1 and "config.json published: '../../etc/hostname' is not a relative path" in one_line(proc)


# ---------------------------------------------------------------- fabench archive store

def store(run_dir: Path, root: Path, capsys) -> tuple[int, str]:
    code = cli.main(["archive", "store", str(run_dir), "--root", str(root)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("plant", ["plots dir", "plot file", "report", "run folder"])
def test_the_store_refuses_a_link_among_the_runs_files(tmp_path, capsys, plant):
    run_dir = make_run(tmp_path / "results", "r", versions=CUDA_13_0)
    system = tmp_path / "system"
    system.mkdir()
    (system / "secret.png").write_bytes(b"not the run's")
    if plant == "plots dir":
        (run_dir / "plots").symlink_to(system)
    elif plant == "plot file":
        (run_dir / "plots").mkdir()
        (run_dir / "plots" / "latency.png").symlink_to(system / "secret.png")
    elif plant == "report":
        (run_dir / "report.md").unlink()
        (run_dir / "report.md").symlink_to(system / "secret.png")
    else:  # results/<run> itself a link, as `snakemake archive` finds every folder under results/
        run_dir = run_dir.rename(tmp_path / "elsewhere")
        (tmp_path / "results" / "r").symlink_to(run_dir)
        run_dir = tmp_path / "results" / "r"
    code, err = store(run_dir, tmp_path / "archive", capsys)
    assert code == 1 and "a symbolic link, which fabench does not follow" in err
    assert len(err.strip().splitlines()) == 1 and not list_entries(tmp_path / "archive")


@pytest.mark.parametrize("change, words", [
    (lambda c: c.update(iters=0), "config.json: iters: 0 is less than the minimum of 1"),
    (lambda c: c.update(published={"path": "x"}), "config.json: published:"),
    (lambda c: c.update(surprise=1), "config.json: (top level): Additional properties are not allowed"),
])
def test_the_store_checks_the_runs_config_as_the_workflow_checks_a_config(tmp_path, capsys, change, words):
    run_dir = make_run(tmp_path / "results", "r", versions=CUDA_13_0)
    edit_json(run_dir / "config.json", change)
    code, err = store(run_dir, tmp_path / "archive", capsys)
    assert code == 1 and words in err and len(err.strip().splitlines()) == 1, err
    assert not list_entries(tmp_path / "archive")


def test_the_store_refuses_a_preview_in_one_line(tmp_path, capsys):
    run_dir = make_run(tmp_path / "results", "preview", versions=CUDA_13_0)
    edit_json(run_dir / "config.json", lambda c: c.update(preview=True))
    code, err = store(run_dir, tmp_path / "archive", capsys)
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "is a preview (config.preview: true), too few samples to compare versions by: not archived" in err
    assert not list_entries(tmp_path / "archive")


def test_the_store_refuses_a_run_with_a_lost_measuring_process(tmp_path, capsys):
    run_dir = make_run(tmp_path / "results", "r", versions=CUDA_13_0)
    collected = read_results(run_dir)
    first = collected["results"][0]
    first["method"]["process_exits"] = [{"index": 0, "exit_code": 0, "wrote_result": True},
                                        {"index": 1, "exit_code": None, "wrote_result": False}]
    write_results(run_dir, collected)
    code, err = store(run_dir, tmp_path / "archive", capsys)
    assert code == 1 and f"1 measuring process(es) lost, their cells failed: {first['variant']}/{first['shape_id']} " \
        "process 1 (the next snakemake run measures them again)" in err


def test_snakemake_archive_with_the_preview_config_plans_no_store_of_it(tmp_path):
    """`snakemake archive --configfile config/preview.yaml` stored the preview through the config's
    own-run rule (archive_run); now that rule is not planned (the store would refuse it), and
    the archive rule says the preview is left out. Blind side: a dry run, the rule's line is not run."""
    proc = snakemake(tmp_path, "-n", "--cores", "1", "archive", "--configfile", str(REPO / "config" / "preview.yaml"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert planned_jobs(proc) == {"archive": 1}


def test_scale_run_takes_a_run_name_the_config_would_take_only(tmp_path):
    proc = tool("scale_run.py", ENTRY, tmp_path / "out", "--factor", "1", "--run", "../up")
    assert proc.returncode == 2 and not (tmp_path / "out").exists()
    assert one_line(proc).startswith("tools/scale_run.py: error: argument --run: '../up' does not match")
