"""The archive's promise, on real processes and files: an archived run is complete, never altered
and never duplicated; a store that is interrupted (real signals), raced (real processes released
at one moment) or out of space (a real full tmpfs) leaves a whole entry or none, and the next
command says what happened and recovers.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fabench.results.archive_layout import measurements_sha256
from fabench.results.archive_read import EntryChanged, load_entry, verify_entry
from fabench.results.archive_store import archive_run
from fabench.analysis.policy import Rule
from fabench.results.compare import compare_entries
from support.runs import ROCM_6_4, make_run, read_results, v2_schema, write_v2_schema

REPO = Path(__file__).resolve().parents[1]
LABEL = "rocm-6.4.43482"
EXAMPLES = REPO / "examples" / "h200" / "archive"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
# Two stores wait for the same file to appear, then both run `fabench archive store`.
RELEASED_AT_ONCE = """import os, sys, time
from fabench.cli import main
print("ready", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.0002)
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture
def run(tmp_path):
    return make_run(tmp_path / "results", "mi300x", versions=ROCM_6_4, seed=1)


@pytest.fixture
def schema(tmp_path):
    return str(write_v2_schema(tmp_path / "schema.json"))


def fabench(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabench.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={**ENV, **(env or {})}, timeout=120)


def store(run_dir: Path, root: Path, schema: str, *more: str, env: dict | None = None):
    return fabench("archive", "store", str(run_dir), "--root", str(root), "--schema", schema, *more,
                   cwd=root.parent, env=env)


def entries_in(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/*") if not p.name.startswith("."))


def staging_in(root: Path) -> list[Path]:
    return sorted(root.glob("*/.staging-*"))


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under root with its bytes (None for a folder), the lock file aside."""
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*")) if p.name != ".lock"}


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def rewrite(path: Path, data: bytes) -> None:
    """An archived file replaced as a user could (the entry's files are read-only)."""
    os.chmod(path, 0o644)
    path.write_bytes(data)


# ---------------------------------------------------------------- complete: one check by every way in

def test_store_refuses_a_run_without_its_resolved_config(run, schema, tmp_path):
    config = tmp_path / "kept-config.json"
    shutil.copy(run / "config.json", config)
    (run / "config.json").unlink()
    (run / "report-config.json").unlink()
    root = tmp_path / "archive"
    done = store(run, root, schema)
    assert done.returncode == 1
    assert "refused" in one_line(done.stderr) and "config.json missing (the run's resolved config" in done.stderr
    assert not root.exists()
    given = store(run, root, schema, "--extra", f"config.json={config}")  # the config given by hand
    assert given.returncode == 0, given.stderr
    assert (Path(given.stdout.strip()) / "config.json").read_bytes() == config.read_bytes()


@pytest.mark.parametrize("damage, reason", [
    (lambda run: (run / "tuned" / "b4-s512-h8-d256.json").unlink(),
     "1 job result file(s) missing: tuned/b4-s512-h8-d256.json"),
    (lambda run: drop_result(run, 0), "1 job(s) missing from results.json: default/b4-s512-h8-d256"),
])
def test_store_refuses_a_run_with_a_job_result_missing(run, schema, tmp_path, damage, reason):
    damage(run)
    done = store(run, tmp_path / "archive", schema)
    assert done.returncode == 1 and reason in one_line(done.stderr)
    assert not (tmp_path / "archive").exists()


def drop_result(run: Path, index: int) -> None:
    collected = read_results(run)
    collected["results"].pop(index)
    (run / "results.json").write_text(json.dumps(collected))


# ---------------------------------------------------------------- never duplicated: identity

def test_the_same_measurements_are_archived_once_whatever_the_label_title_or_report(run, schema, tmp_path):
    root = tmp_path / "archive"
    first = store(run, root, schema)
    assert first.returncode == 0, first.stderr
    entry = Path(first.stdout.strip())
    said = f"already archived as {LABEL}/{entry.name}"

    another_label = store(run, root, schema, "--label", "mine")
    assert another_label.returncode == 5 and said in one_line(another_label.stderr)

    config = json.loads((run / "config.json").read_text())
    config["variants"]["tuned"]["title"] = "Tuned, retitled"
    for name in ("config.json", "report-config.json"):
        (run / name).write_text(json.dumps(config))
    (run / "report.md").write_text("# The same run, another report\n")
    retitled = store(run, root, schema)
    assert retitled.returncode == 5 and said in one_line(retitled.stderr)

    other = make_run(tmp_path / "other", "mi300x", versions=ROCM_6_4, seed=7)  # new measurements
    assert store(other, root, schema).returncode == 0
    assert [p.name[:4] for p in entries_in(root)] == ["0001", "0002"]
    assert all(verify_entry(p) == [] for p in entries_in(root))


def test_identity_is_the_measurements_not_their_names():
    collected = {"run": "a", "results": [
        {"shape_id": "b1-s64-h2-d32", "dtype": "float16", "causal": True, "variant": "tuned", "run": "a",
         "provenance": {"started": "2026-01-01T00:00:00+00:00"},
         "backends": {"native": {"label": "Native", "status": "ok", "reason": None, "correctness": {"cosine": 1.0},
                                 "trials": [{"wall_mean_ms": 1.5}], "stats": {"wall_mean_ms": {"median": 1.5}}}}}]}
    identity = measurements_sha256(collected)
    renamed = json.loads(json.dumps(collected))
    renamed["results"][0].update(variant="fast", run="b")
    renamed["results"][0]["backends"]["native"].update(label="Baseline", stats={"recomputed": True})
    assert measurements_sha256(renamed) == identity  # names, titles and derived statistics are not measurements
    measured_again = json.loads(json.dumps(collected))
    measured_again["results"][0]["backends"]["native"]["trials"][0]["wall_mean_ms"] = 1.6
    assert measurements_sha256(measured_again) != identity


# ---------------------------------------------------------------- never altered: integrity

def edit_a_measurement(entry: Path) -> bytes:
    collected = json.loads((entry / "results.json").read_text())
    collected["results"][0]["backends"]["native"]["trials"][0]["wall_mean_ms"] *= 0.5
    return (json.dumps(collected, indent=2) + "\n").encode()


def sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def rewrite_consistently(entry: Path, depth: int) -> None:
    """results.json rewritten, and with it (depth 1) its SHA256SUMS line, (2) record.json's line
    for it, (3) record.json's content_sha256, (4) record.json's measurements_sha256."""
    data = edit_a_measurement(entry)
    rewrite(entry / "results.json", data)
    record = json.loads((entry / "record.json").read_text())
    if depth >= 2:
        record["files"]["results.json"] = {"bytes": len(data), "sha256": sha(data)}
    if depth >= 3:
        lines = "".join(f"{info['sha256']}  {name}\n" for name, info in sorted(record["files"].items()))
        record["content_sha256"] = sha(lines.encode())
    if depth >= 4:
        record["measurements_sha256"] = measurements_sha256(json.loads(data))
    record_bytes = (json.dumps(record, indent=2) + "\n").encode()
    if depth >= 2:
        rewrite(entry / "record.json", record_bytes)
    sums = {name: sha((entry / name).read_bytes()) for name in ("results.json", "record.json")}
    lines = []
    for line in (entry / "SHA256SUMS").read_text().splitlines():
        name = line.split("  ", 1)[1]
        lines.append(f"{sums.get(name, line[:64])}  {name}")
    rewrite(entry / "SHA256SUMS", ("\n".join(lines) + "\n").encode())


@pytest.mark.parametrize("depth, problem", [
    (1, "results.json: SHA256SUMS and record.json disagree (rewritten after archiving)"),
    (2, "record.json: content_sha256 is not the digest of the files it lists"),
    (3, "results.json: its measurements do not match record.json's measurements_sha256"),
    (4, "the run id's hash is not the entry's measurements_sha256"),
])
def test_a_file_rewritten_with_its_checksum_line_is_caught(run, schema, tmp_path, depth, problem):
    root = tmp_path / "archive"
    entry = Path(store(run, root, schema).stdout.strip())
    rewrite_consistently(entry, depth)
    assert subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=entry).returncode == 0  # fooled
    spec = f"{LABEL}/{entry.name}"
    verify = fabench("archive", "verify", spec, "--root", str(root), cwd=tmp_path)
    assert verify.returncode == 1 and problem in verify.stdout, verify.stdout
    listing = fabench("archive", "list", "--root", str(root), cwd=tmp_path)
    assert listing.returncode == 1 and "broken: " in listing.stdout and problem in listing.stdout
    compared = fabench("compare", "--root", str(root), cwd=tmp_path)
    assert compared.returncode == 1 and f"no entry left to compare: {spec}" in compared.stderr


def test_the_reader_checks_the_bytes_it_returns(run, tmp_path):
    entry_dir = archive_run(run, tmp_path / "archive", schema=v2_schema())
    entry = load_entry(entry_dir)
    assert entry.ok and entry.results()["run"] == "mi300x"
    rewrite(entry_dir / "results.json", edit_a_measurement(entry_dir))  # after the entry was verified
    with pytest.raises(EntryChanged, match="results.json changed after it was verified"):
        entry.results()
    comparison_input = [entry, load_entry(archive_run(make_run(tmp_path / "b", "b", versions=ROCM_6_4, seed=5),
                                                      tmp_path / "archive", schema=v2_schema()))]
    left_out = compare_entries(comparison_input, Rule.of({}))["left_out"]
    assert left_out[0]["id"] == entry.id and "changed after it was verified" in left_out[0]["problems"][0]


def test_entries_archived_before_identities_verify_and_keep_theirs(schema, tmp_path):
    """examples/h200/archive holds entries from before measurements_sha256 (record format 1) beside
    later ones (format 2): all verify, an old entry's identity is derived from its results and equals
    what a new entry records, and measurements are not archived twice."""
    root = tmp_path / "archive"
    shutil.copytree(EXAMPLES, root)
    formats = []
    for entry_dir in entries_in(root):
        entry = load_entry(entry_dir)
        assert entry.ok, entry.problems
        derived = measurements_sha256(json.loads((entry_dir / "results.json").read_text()))
        formats.append(entry.get("format"))
        if entry.get("format") == "fabench-archive-entry/1":
            assert "measurements_sha256" not in entry.record
        else:
            assert entry.get("format") == "fabench-archive-entry/2"
            assert entry.record["measurements_sha256"] == derived
        assert entry.identity == derived
    assert "fabench-archive-entry/1" in formats, "the example archive no longer exercises format 1"
    first = entries_in(root)[0]
    run_dir = tmp_path / "results" / "h200-a"  # the run as it was before archiving
    shutil.copytree(first, run_dir, ignore=shutil.ignore_patterns("record.json", "SHA256SUMS"))
    for result in read_results(run_dir)["results"]:
        (run_dir / result["variant"]).mkdir(exist_ok=True)
        (run_dir / result["variant"] / f"{result['shape_id']}.json").write_text(json.dumps(result))
    before = tree(root)
    again = fabench("archive", "store", str(run_dir), "--root", str(root), cwd=tmp_path)
    # Its own exit status, not an integrity failure's 1 (issue 40): a "store every run" step can accept it.
    assert again.returncode == 5 and f"already archived as cuda-13.0/{first.name}" in one_line(again.stderr)
    assert again.stdout.strip() == str(root / "cuda-13.0" / first.name)
    assert tree(root) == before
    assert fabench("archive", "list", "--root", str(EXAMPLES), cwd=tmp_path).returncode == 0


# ---------------------------------------------------------------- concurrent stores

@pytest.mark.parametrize("labels", [(None, None), ("one", "two")], ids=["same-label", "two-labels"])
def test_two_stores_released_at_the_same_moment_make_one_entry(run, schema, tmp_path, labels):
    for attempt in range(5):
        root, go = tmp_path / f"archive-{attempt}", tmp_path / f"go-{attempt}"
        procs = []
        for label in labels:
            args = ["archive", "store", str(run), "--root", str(root), "--schema", schema]
            procs.append(subprocess.Popen([sys.executable, "-c", RELEASED_AT_ONCE, str(go), *args, *(
                ["--label", label] if label else [])], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True))
        for proc in procs:
            assert proc.stdout.readline() == "ready\n"
        go.touch()
        outcomes = sorted((proc.wait(timeout=120), proc.stdout.read(), proc.stderr.read()) for proc in procs)
        assert [rc for rc, _, _ in outcomes] == [0, 5], outcomes
        winner = Path(outcomes[0][1].strip())
        assert f"already archived as {winner.parent.name}/{winner.name}" in outcomes[1][2]
        assert entries_in(root) == [winner] and verify_entry(winner) == [] and not staging_in(root)


def test_a_store_waits_for_the_lock_and_says_so(run, schema, tmp_path):
    root = tmp_path / "archive"
    other = make_run(tmp_path / "other", "other", versions=ROCM_6_4, seed=9)
    holder = start_store(run, root, schema, "locked")
    waiting = subprocess.Popen([sys.executable, "-m", "fabench.cli", "archive", "store", str(other), "--root",
                                str(root), "--schema", schema], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=default_interrupt)
    assert "waiting for another store into" in waiting.stderr.readline()
    assert waiting.poll() is None  # it waits while the lock is held
    holder.send_signal(signal.SIGINT)
    assert holder.wait(timeout=60) == 130
    assert waiting.wait(timeout=60) == 0
    assert [p.name[:4] for p in entries_in(root)] == ["0001"] and not staging_in(root)


# ---------------------------------------------------------------- interrupted stores

def default_interrupt() -> None:
    """In a child before it starts: Ctrl-C stops it, whatever started pytest (`nohup ... &` and other
    wrappers hand on SIGINT ignored, and Python keeps an inherited ignore, so SIGINT would not stop it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_store(run_dir: Path, root: Path, schema: str, pause_at: str) -> subprocess.Popen:
    """A store stopped at a named step (FABENCH_TEST_PAUSE_AT); returns once it is there."""
    proc = subprocess.Popen([sys.executable, "-m", "fabench.cli", "archive", "store", str(run_dir), "--root",
                             str(root), "--schema", schema], cwd=root.parent, env={**ENV, "FABENCH_TEST_PAUSE_AT": pause_at},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_interrupt)
    line = proc.stderr.readline()
    assert f"paused at {pause_at}" in line, line + proc.stderr.read()
    return proc


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
@pytest.mark.parametrize("step", ["locked", "staged", "stored"])
def test_an_interrupted_store_leaves_a_whole_entry_or_none_and_the_next_command_recovers(
        run, schema, tmp_path, sig, step):
    root = tmp_path / "archive"
    proc = start_store(run, root, schema, step)
    proc.send_signal(sig)
    rc = proc.wait(timeout=60)
    stderr = proc.stderr.read()
    stored = entries_in(root)
    assert len(stored) == (1 if step == "stored" else 0)
    assert all(verify_entry(p) == [] for p in stored)
    if sig == signal.SIGKILL:
        assert rc == -signal.SIGKILL
        assert len(staging_in(root)) == (1 if step == "staged" else 0)  # what a killed store leaves
    else:  # its own clean-up ran, and it says what is archived
        assert rc == 130 and not staging_in(root)
        assert ("was stored whole" if step == "stored" else "nothing was archived") in one_line(stderr)

    left = staging_in(root)
    listing = fabench("archive", "list", "--root", str(root), cwd=tmp_path)
    assert listing.returncode == 0, listing.stdout + listing.stderr
    for folder in left:  # named and removed by the next command
        assert f"removed {folder}: left by an interrupted store" in listing.stderr
    assert not staging_in(root)

    again = store(run, root, schema)
    if stored:
        assert again.returncode == 5 and f"already archived as {LABEL}/{stored[0].name}" in again.stderr
    else:
        assert again.returncode == 0, again.stderr
    assert len(entries_in(root)) == 1 and verify_entry(entries_in(root)[0]) == []


def test_the_interrupt_tests_pass_when_pytest_starts_with_ctrl_c_ignored(tmp_path):
    """The tests above that send SIGINT, run by a pytest that inherited SIGINT ignored (as under
    `nohup python -m pytest &`): each store still stops at once with 130."""
    def ignore_interrupt() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = subprocess.run([sys.executable, "-m", "pytest", str(Path(__file__)), "-q", "-p", "no:cacheprovider",
                           "-k", "SIGINT or waits_for_the_lock", "--basetemp", str(tmp_path / "inner")],
                          cwd=REPO, env=ENV, capture_output=True, text=True, timeout=100,
                          preexec_fn=ignore_interrupt)
    assert proc.returncode == 0 and "4 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_the_next_store_removes_what_a_killed_store_left(run, schema, tmp_path):
    root = tmp_path / "archive"
    killed = start_store(run, root, schema, "staged")
    killed.kill()
    killed.wait(timeout=60)
    [left] = staging_in(root)
    again = store(run, root, schema)
    assert again.returncode == 0, again.stderr
    assert f"removed {left}: left by an interrupted store (nothing of it was archived)" in again.stderr
    assert not staging_in(root) and len(entries_in(root)) == 1


# ---------------------------------------------------------------- errors a user can act on

@pytest.mark.parametrize("label", ["a/b", "..", "", "-x", "cpu\n", "x" * 101, "ü"])
def test_a_bad_label_is_a_usage_error_on_one_line(run, schema, tmp_path, label):
    root = tmp_path / "archive"
    done = store(run, root, schema, f"--label={label}")
    assert done.returncode == 2
    assert "argument --label:" in one_line(done.stderr)
    assert not root.exists()


@pytest.fixture
def small_disk(tmp_path):
    """A real 2 MiB tmpfs (needs root); skipped, with the reason, where it cannot be mounted."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def fill(disk: Path, leave: int) -> None:
    """Fill the file system, then free `leave` bytes."""
    filler = disk / "filler"
    with open(filler, "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError:
            pass
    os.truncate(filler, max(0, filler.stat().st_size - leave))


@pytest.mark.parametrize("label", [None, "new-label"], ids=["existing-label", "new-label"])
def test_a_full_disk_leaves_nothing_and_says_so_on_one_line(run, schema, tmp_path, small_disk, label):
    root = small_disk / "archive"
    assert store(run, root, schema).returncode == 0  # an archive with one entry already
    other = make_run(tmp_path / "other", "other", versions=ROCM_6_4, seed=3)
    fill(small_disk, 60_000)  # room for a few files of the entry, not for results.json
    before = tree(root)
    done = store(other, root, schema, *(["--label", label] if label else []))
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert "No space left on device" in line and "nothing was archived" in line
    assert tree(root) == before  # no entry, no staging, no number claimed, no label folder
