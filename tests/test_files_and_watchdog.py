"""Atomic writes on a failing disk, and jobs that stop when their workflow is gone (real processes)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

from fabench.measure.spec import job_spec
from test_plan import with_defaults
from workflow_util import REPO, tiny_config

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}

# A child whose file size limit is 1000 bytes: a larger write fails as on a full disk (EFBIG).
FULL_DISK_WRITER = """
import resource, signal, sys
from fabench.files import write_atomic
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
try:
    write_atomic(sys.argv[1], "x" * 100_000)
except OSError as err:
    print("failed:", err.errno)
"""


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "report.md"
    target.write_text("the old report\n")
    proc = subprocess.run([sys.executable, "-c", FULL_DISK_WRITER, str(target)], capture_output=True, text=True,
                          env=ENV, timeout=60)
    assert proc.stdout.startswith("failed:"), proc.stdout + proc.stderr
    assert target.read_text() == "the old report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]


def _stand_in_workflow() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


def test_a_runner_stops_when_its_workflow_is_gone(tmp_path):
    """The runner, timing a long job on the CPU, ends within seconds of its Snakemake's death and
    leaves no result behind."""
    # The config as the workflow hands it on, defaults filled: the measuring command checks the spec's values.
    config = with_defaults(tiny_config(backends=["native"], cpu={"warmup": 1, "iters": 100_000},
                                       roles={p: {"baseline": "native", "vendor": "native", "triton": "native"}
                                              for p in ("rocm", "cuda", "cpu")}))
    spec = job_spec(config, "default", {"batch": 1, "seq": 512, "heads": 2, "head_dim": 64})
    workflow = _stand_in_workflow()
    out = tmp_path / "result.json"
    env = {**ENV, "FABENCH_WORKFLOW": f"{socket.gethostname()}:{workflow.pid}"}
    runner = subprocess.Popen([sys.executable, "-m", "fabench.measure", "--spec", spec.to_json(), "--out", str(out),
                               "--process", "0"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for_line(runner, "native: setting up")
        assert runner.poll() is None
        workflow.kill()
        workflow.wait()
        started = time.monotonic()
        runner.wait(timeout=30)
        assert time.monotonic() - started < 10
        assert runner.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM)
        assert not out.exists()
    finally:
        for proc in (workflow, runner):
            if proc.poll() is None:
                proc.kill()


def test_a_job_from_another_host_watches_nothing(tmp_path):
    """On a cluster node the workflow's pid means nothing: the job must not stop itself."""
    code = "from fabench.watchdog import watch_workflow; print(watch_workflow(0.1))"
    env = {**ENV, "FABENCH_WORKFLOW": "some-other-host:1"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "None", proc.stderr


def _wait_for_line(proc: subprocess.Popen, text: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if text in line:
            return
        if not line and proc.poll() is not None:
            raise AssertionError(f"the runner ended before printing {text!r}")
    raise AssertionError(f"no {text!r} within {timeout} s")
