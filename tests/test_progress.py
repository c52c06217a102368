"""A real `snakemake` run of the CPU test experiment: each backend's progress shows on the terminal
while its job runs and in the job's log; a failed job's last line is its reason."""

import os
import subprocess
import sys

import pytest

from workflow_util import SNAKEFILE, tiny_config, write_config

pytestmark = pytest.mark.slow

SHAPE = {"batch": 1, "seq": 64, "heads": 2, "head_dim": 32}
# The first variant's job: it measures every backend (the others share those that read no variant config).
JOB = "results/tiny/default/b1-s64-h2-d32/process-0.json"
LOG = "logs/tiny/default/b1-s64-h2-d32/process-0.log"


def start_snakemake(directory, *args, shapes=(SHAPE,)):
    """snakemake as a terminal user runs it: its output and its jobs' output in one stream."""
    config = write_config(directory, tiny_config(shapes=list(shapes)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SNAKEFILE.parent / "src"),
                                                                     os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory", str(directory),
                             "--cores", "1", *args, "--configfile", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def test_progress_is_live_on_the_terminal_and_in_the_log_and_a_failure_ends_with_its_reason(tmp_path):
    proc = start_snakemake(tmp_path, JOB)
    seen, live = [], None
    for line in proc.stdout:
        seen.append(line.rstrip("\n"))
        if live is None and "[fabench] default b1-s64-h2-d32 native: trial 1/2" in line:
            live = (tmp_path / JOB).exists()  # the job has not written its result yet
    assert proc.wait(timeout=600) == 0, "\n".join(seen[-40:])
    assert live is False, "no trial progress line reached the terminal before the job ended:\n" + "\n".join(seen)
    # The measure job's own lines: the compile ahead before it (a job of its own) says its line too.
    terminal = [line for line in seen
                if line.startswith("[fabench] ") and not line.startswith("[fabench] compiling ahead")]
    for backend in ("native", "sdpa"):
        assert f"[fabench] default b1-s64-h2-d32 {backend}: ready" in terminal
        assert any(f"{backend}: trial 2/2 " in line and " ms wall" in line for line in terminal)
    [unavailable] = [line for line in terminal if "unavailable" in line]  # all backends, one line
    assert unavailable.startswith("[fabench] unavailable here (said once; each result records it): ")
    assert "ck: needs ROCm: aiter's CK kernels are HIP code (this host: cpu)" in unavailable
    assert (tmp_path / LOG).read_text().splitlines() == terminal  # the log holds the same lines

    # A broken input: the job fails, and what it shows last, on the terminal and in its log, is why.
    patched = tmp_path / "results/tiny/aiter-config/default.json"
    patched.write_text('{"fwd": ')
    proc = start_snakemake(tmp_path, JOB)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode != 0
    job_output = out.split("localrule measure:")[1].split("RuleException")[0]
    # The runner checks its arguments before any process: the reason is its one line, last.
    last = [line for line in job_output.splitlines() if line.strip()][-1]
    assert last == ("python -m fabench.measure: error: argument --aiter-config: results/tiny/aiter-config/default.json "
                    "is not JSON (Expecting value: line 1 column 9 (char 8))")
    assert (tmp_path / LOG).read_text().splitlines()[-1] == last
    assert "Traceback" not in job_output


def test_a_backend_that_cannot_run_here_is_said_once_not_per_job(tmp_path):
    """Issue 40: 100 of a CPU run's 743 lines repeated five backends' unavailability, per job, at
    set-up and in the result. The measuring worker that measures both jobs here says it once."""
    second = {**SHAPE, "seq": 128}
    other = JOB.replace("s64", "s128")
    proc = start_snakemake(tmp_path, JOB, other, shapes=(SHAPE, second))
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-4000:]
    terminal = [line for line in out.splitlines() if line.startswith("[fabench] ")]
    assert sum("unavailable" in line for line in terminal) == 1, "\n".join(terminal)
    for job in ("b1-s64-h2-d32", "b1-s128-h2-d32"):  # both jobs measured
        assert any(f"default {job} native: trial 2/2" in line for line in terminal), "\n".join(terminal)
