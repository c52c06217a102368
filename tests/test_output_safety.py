"""Output paths never clobber: every --out-* of the CLI writes only where a regular file may go,
creates no folder above it, and writes atomically through fabench.files (issue 26).

Real processes on the committed H200 archive, real FIFOs, sockets, devices and links."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from fabench.measure.spec import job_spec
from fabench.files import OutputPathError, write_atomic
from workflow_util import tiny_config

REPO = Path(__file__).resolve().parents[1]
ARCHIVE = REPO / "examples" / "h200" / "archive"


def fabench(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabench.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=os.environ, timeout=300)


def refused(done: subprocess.CompletedProcess, *words: str) -> bool:
    """Exit 2 with one line on stderr holding `words`, and no traceback."""
    lines = done.stderr.strip().splitlines()
    return done.returncode == 2 and len(lines) == 1 and all(w in lines[0] for w in words) and "Traceback" not in done.stderr


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.fixture
def unix_socket(tmp_path):
    path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    yield path
    server.close()


COMMANDS = [("compare", "--out-csv"), ("compare", "--out-md"), ("compare", "--out-json"),
            ("detector-check", "--out-md"), ("detector-check", "--out-json")]


@pytest.mark.parametrize("command,option", COMMANDS)
def test_a_fifo_is_refused_and_left_a_fifo(tmp_path, fifo, command, option):
    done = fabench(command, "--root", str(ARCHIVE), option, str(fifo), cwd=tmp_path)
    assert refused(done, option, "a FIFO"), done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_socket_a_device_and_a_directory_are_refused(tmp_path, unix_socket):
    # (the null device is "nowhere", not a device written to: tests/test_archive.py)
    for path, word in ((unix_socket, "a socket"), (Path("/dev/zero"), "a device"), (tmp_path, "a directory")):
        done = fabench("compare", "--root", str(ARCHIVE), "--out-csv", str(path), cwd=tmp_path)
        assert refused(done, "--out-csv", word), done.stderr
    assert stat.S_ISSOCK(os.lstat(unix_socket).st_mode) and stat.S_ISCHR(os.stat("/dev/zero").st_mode)


def test_a_link_to_a_fifo_or_to_nothing_is_refused_and_left_alone(tmp_path, fifo):
    to_fifo, to_nothing = tmp_path / "to-fifo", tmp_path / "to-nothing"
    to_fifo.symlink_to(fifo)
    to_nothing.symlink_to(tmp_path / "absent" / "x.json")
    assert refused(fabench("compare", "--root", str(ARCHIVE), "--out-json", str(to_fifo), cwd=tmp_path),
                   "--out-json", "a FIFO", "through the link")
    assert refused(fabench("compare", "--root", str(ARCHIVE), "--out-json", str(to_nothing), cwd=tmp_path),
                   "--out-json", "a symbolic link to nothing")
    assert to_fifo.is_symlink() and to_nothing.is_symlink() and not (tmp_path / "absent").exists()


def test_a_missing_folder_is_one_line_and_never_created(tmp_path):
    out = tmp_path / "new" / "deeper" / "compare.md"
    done = fabench("compare", "--root", str(ARCHIVE), "--out-md", str(out), cwd=tmp_path)
    assert refused(done, "--out-md", "does not exist"), done.stderr
    plots = fabench("compare", "--root", str(ARCHIVE), "--plots", str(tmp_path / "new" / "plots"), cwd=tmp_path)
    assert refused(plots, "--plots", "does not exist"), plots.stderr
    assert not (tmp_path / "new").exists()


def test_regular_files_and_links_to_them_are_written_whole(tmp_path):
    kept = tmp_path / "kept.csv"
    kept.write_text("old\n")
    link = tmp_path / "link.csv"
    link.symlink_to(kept)
    done = fabench("compare", "--root", str(ARCHIVE), "--out-csv", str(link), "--out-md", str(tmp_path / "c.md"),
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and kept.read_text() != "old\n" and len(kept.read_text().splitlines()) > 1
    assert (tmp_path / "c.md").read_text().startswith("# ")
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temporary file left


def test_write_atomic_refuses_what_is_not_a_regular_file(tmp_path, fifo):
    with pytest.raises(OutputPathError, match="a FIFO"):
        write_atomic(fifo, "x")
    with pytest.raises(OutputPathError, match="a directory"):
        write_atomic(tmp_path, "x")
    write_atomic(tmp_path / "x", "y")
    assert (tmp_path / "x").read_text() == "y"


def test_the_measuring_and_merging_modules_refuse_a_bad_out_before_any_work(tmp_path, fifo):
    """python -m fabench.measure (the runner) and fabench.results.merge: --out checked at parsing."""
    spec = job_spec(tiny_config(), "tuned", {"batch": 1, "seq": 64, "heads": 2, "head_dim": 32}).to_json()
    runner = subprocess.run([sys.executable, "-m", "fabench.measure", "--spec", spec, "--out", str(fifo)],
                            capture_output=True, text=True, env=os.environ, timeout=120)
    assert runner.returncode == 2 and "--out" in runner.stderr and "a FIFO" in runner.stderr, runner.stderr
    assert "Traceback" not in runner.stderr
    merge = subprocess.run([sys.executable, "-m", "fabench.results.merge", "--out", str(tmp_path / "no" / "job.json"),
                            str(tmp_path / "process-0.json")], capture_output=True, text=True, env=os.environ,
                           timeout=120)
    assert merge.returncode == 2 and "does not exist" in merge.stderr and "Traceback" not in merge.stderr
    plots = subprocess.run([sys.executable, "-m", "fabench.report.plots", "--results", "x.json", "--out-dir",
                            str(fifo)], capture_output=True, text=True, env=os.environ, timeout=120)
    assert plots.returncode == 2 and "is not a folder" in plots.stderr and "Traceback" not in plots.stderr
