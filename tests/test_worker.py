"""Measuring workers as real processes on this machine's CPU: job after job in one worker, a worker
killed or hung mid-job failing that job alone, the state reset between jobs, and stopping."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fabench.report.wall_clock import run_time_line
from fabench.measure.spec import job_spec
from fabench.measure.backends import aiter_kernel, fa4_kernel
from fabench.measure.launch import lease as device_lease
from fabench.measure.launch import runner, worker, worker_client
from fabench.measure.launch.worker_client import stop_workers
from fabench.planned_platform import planned_platform
from fabench.shapes import parse_shape_id
from support.leases import own_lease  # noqa: F401 (a fixture)
from support.workers import first_measuring_log, live_workers, worker_dir  # noqa: F401 (worker_dir: a fixture)
from workflow_util import REPO, snakemake, tiny_config, write_config

# On a GPU host each test's jobs take a lease folder of their own (support.leases): they measure
# beside the other GPU tests' jobs on the card instead of queueing behind them.
pytestmark = pytest.mark.usefixtures("own_lease")

SHAPE = "b1-s64-h2-d32"
# How long a test's worker waits for its next job: the workflow's default. A test's jobs follow
# one another within seconds (their lease is the test's own), and the fixture stops every worker.
IDLE_S = 120
# The backends of the jobs these tests follow: their processes, workers, timeouts and records, not
# their kernels (tests/test_gpu_backends.py and the workflow's runs measure those). native first:
# the tests that freeze or kill a job mid-measurement wait for "native: setting up". On a GPU the
# others (compiled: FlexAttention, aiter's Triton kernel, FlashAttention-4) made each job last
# seconds to tens of seconds more.
JOB_BACKENDS = ["native", "sdpa"]


def followed_config(**overrides) -> dict:
    """The test experiment with the backends JOB_BACKENDS, which fill every platform's roles."""
    roles = {"baseline": "native", "vendor": "sdpa", "triton": "sdpa"}
    return tiny_config(backends=JOB_BACKENDS, roles=dict.fromkeys(("rocm", "cuda", "cpu"), roles), **overrides)


def launch(tmp_path, worker_dir, name, *extra, shape=SHAPE, workflow=None, process=0, repeats=1):
    """The runner as the workflow starts it, in worker mode: a process of its own, output piped.
    One round (`repeats`) unless asked: on a GPU a job of more starts its other rounds' workers
    ahead, and these tests follow one worker."""
    config = followed_config()
    config["timing"] = {**config["timing"], "repeats": repeats}
    config["cpu"] = {**config["cpu"], "repeats": repeats}
    # The platform the plan would put in the spec (a job that writes no result is recorded for it).
    spec = job_spec(config, "tuned", parse_shape_id(shape), platform=planned_platform(docker=False))
    kernel_config = tmp_path / "aiter.json"
    kernel_config.write_text(json.dumps({"fwd": {"default": {"BLOCK_M": 64, "BLOCK_N": 32}}}))
    out = tmp_path / f"{name}.json"
    cmd = [sys.executable, "-m", "fabench.measure", "--spec", spec.to_json(), "--aiter-config", str(kernel_config),
           "--out", str(out), "--project-commit", "abc123", "--process", str(process), "--mode", "worker",
           "--worker-idle-s", str(IDLE_S), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "FABENCH_WORKER_DIR": str(worker_dir), "PYTHONPATH": source_path()}
    env.pop("FABENCH_WORKFLOW", None)
    if workflow:
        env["FABENCH_WORKFLOW"] = workflow
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    return proc, out


def source_path() -> str:
    """PYTHONPATH with this checkout's src/ first, once (a worker's identity holds the value)."""
    others = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(REPO / "src")]
    return os.pathsep.join([str(REPO / "src"), *others])


def finished(proc) -> tuple[int, str]:
    output, _ = proc.communicate(timeout=300)
    return proc.returncode, output


def worker_pids(worker_dir) -> list[int]:
    return live_workers(worker_dir)


def until_mid_job(proc) -> str:
    """Read the job's output until it is measuring (a backend set up); what was read."""
    seen = ""
    for line in proc.stdout:
        seen += line
        if "native: setting up" in line:
            return seen
    raise AssertionError(f"the job never started measuring:\n{seen}")


def test_one_worker_measures_job_after_job_and_pays_its_start_up_once(tmp_path, worker_dir):
    results = []
    for name in ("first", "second"):
        proc, out = launch(tmp_path, worker_dir, name)
        code, output = finished(proc)
        assert code == 0, output
        # The worker's progress reaches the job's output (2 trials on a CPU, the timing block's on a GPU).
        assert re.search(r"native: trial 2/\d", output), output
        results.append(json.loads(out.read_text()))
    first, second = results
    for result in results:
        assert result["backends"]["native"]["status"] == "ok" and result["backends"]["sdpa"]["status"] == "ok"
    w1, w2 = first["timeline"]["worker"], second["timeline"]["worker"]
    assert w1["pid"] == w2["pid"] and (w1["jobs_before"], w2["jobs_before"]) == (0, 1)
    phases = [[p["phase"] for p in r["timeline"]["phases"]] for r in results]
    assert "imports" in phases[0] and "imports" not in phases[1]
    assert all({"worker hand-over", "job reset"} <= set(names) for names in phases)
    [ended] = second["method"]["process_exits"]
    assert ended["exit_code"] == 0 and ended["worker"]["started_by_this_job"] is False
    assert first["method"]["process_exits"][0]["worker"]["started_by_this_job"] is True
    # The second job's launcher: started (its interpreter and imports) before it held its device,
    # and the time since the first job ended split at those moments (the report's "between jobs").
    launcher = ended["launcher"]
    assert launcher["started_at"] < launcher["leased_at"] <= ended["spawned_at"] < ended["exited_at"]
    # Each process file as the merge files it in a result (its time line under its process's index).
    between = run_time_line([{**r, "timelines": [dict(r["timeline"], process=0)]} for r in results])["between_jobs"]
    assert between["gaps"] == 1 and between["split"] == 1, between
    parts = between["before_launcher_s"] + between["launcher_s"] + between["to_measuring_s"]
    assert parts == pytest.approx(between["seconds"]) and between["launcher_s"] > 0.01


def test_a_job_starts_its_other_rounds_workers_ahead_and_the_next_round_finds_its_worker_started(
        tmp_path, worker_dir, monkeypatch):
    """start_ahead as a GPU job calls it (runner.rounds_ahead decides where: tested beside), here on
    the CPU: the round-1 worker starts without being waited for, a second call finds it, and the
    round-1 job it then measures was not its starter. Blind side: the overlap with a measuring job
    on a GPU, and the wall time it saves, are measured in a GPU lease (the report's time line)."""
    monkeypatch.setenv("FABENCH_WORKER_DIR", str(worker_dir))
    monkeypatch.delenv("FABENCH_WORKFLOW", raising=False)
    monkeypatch.setenv("PYTHONPATH", source_path())
    monkeypatch.chdir(tmp_path)  # the identity holds the working directory, as the job's launcher has it
    # The job's lease, as its launcher holds it; let go before the round-1 job below leases the
    # same GPU (held, that job would wait for it: on an H200 the test hung so).
    with device_lease.acquire(env={k: v for k, v in os.environ.items() if not k.startswith("FABENCH_GPU")}) as lease:
        began = time.monotonic()
        # The inputs of two jobs of one shape and of one other: two draws, made in its start-up.
        wanted = [[1, 64, 2, 32, "float16", 0], [1, 64, 2, 32, "float16", 0], [1, 32, 2, 16, "bfloat16", 3]]
        [name] = worker_client.start_ahead(lease, [1], idle_s=IDLE_S, start_up=("fa4", "native"), inputs=wanted)
        assert time.monotonic() - began < 5, "start_ahead waited"  # not waited for: its imports take seconds
        deadline = time.monotonic() + 120
        while not live_workers(worker_dir, round_=1):
            assert time.monotonic() < deadline, "the worker started ahead never came up"
            time.sleep(0.1)
        assert worker_client.start_ahead(lease, [1], idle_s=IDLE_S) == []  # running: not started twice
    # Its backends' start-up imports, made before any job: FlashAttention-4's where it is installed
    # (a GPU host), else the reason; native has none.
    [record] = [json.loads(r.read_text()) for r in worker_dir.glob("w-*.json")]
    expected = "imported" if fa4_kernel.installed_version() else "not imported: ImportError"
    assert list(record["started_up"]) == ["fa4"] and record["started_up"]["fa4"].startswith(expected), record
    assert record["inputs_drawn"] == 2, record
    assert not live_workers(worker_dir, round_=0), "a worker of round 0 came up"

    proc, out = launch(tmp_path, worker_dir, "round-1", process=1, repeats=2)
    code, output = finished(proc)
    assert code == 0, output
    [ended] = json.loads(out.read_text())["method"]["process_exits"]
    assert ended["worker"]["started_by_this_job"] is False and ended["worker"]["name"] == name, (ended, output)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_worker_started_ahead_with_its_backends_start_up_holds_no_context_on_its_gpu(tmp_path, worker_dir,
                                                                                         monkeypatch):
    """A worker started ahead imports while another job measures on its GPU: its start-up, the
    backends' start-up imports included (FlashAttention-4's asks the driver for the GPU's
    capability), must create no context there. NVML lists the processes with a context on a GPU; a
    process of this test that makes one is the control that NVML shows them here. Blind side: a
    context made later, in a job, is the job's and allowed."""
    import pynvml

    monkeypatch.setenv("FABENCH_WORKER_DIR", str(worker_dir))
    monkeypatch.delenv("FABENCH_WORKFLOW", raising=False)
    monkeypatch.setenv("PYTHONPATH", source_path())
    monkeypatch.chdir(tmp_path)
    with device_lease.acquire(env={k: v for k, v in os.environ.items() if not k.startswith("FABENCH_GPU")}) as lease:
        worker_client.start_ahead(lease, [0], idle_s=IDLE_S, start_up=("fa4", "flex", "triton"))
        deadline = time.monotonic() + 180
        while not [r for r in worker_dir.glob("w-*.json") if "started_up" in r.read_text()]:
            assert time.monotonic() < deadline, "the worker started ahead never became ready"
            time.sleep(0.2)
        [pid] = live_workers(worker_dir, round_=0)
        control = subprocess.Popen([sys.executable, "-c", "import sys, torch; torch.ones(1, device='cuda'); "
                                    "torch.cuda.synchronize(); print('ready', flush=True); sys.stdin.read()"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                   env=lease.environment(dict(os.environ)))
        try:
            assert control.stdout.readline().strip() == "ready"
            pynvml.nvmlInit()
            try:
                with_context = {p.pid for i in range(pynvml.nvmlDeviceGetCount())
                                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(i))}
            finally:
                pynvml.nvmlShutdown()
        finally:
            control.communicate("", timeout=60)
    if control.pid not in with_context:
        pytest.skip("NVML does not list this host's processes (another PID namespace)")
    assert pid not in with_context


def test_only_a_job_planned_for_a_gpu_and_leased_one_starts_workers_ahead():
    """Blind side: whether the GPU is really there is the lease's business (tests/test_lease.py)."""
    gpu = device_lease.Lease(source="lease", gpu="0", visible_devices={})
    none = device_lease.Lease(source="none", gpu=None, visible_devices={})
    config = tiny_config()
    config["timing"] = {**config["timing"], "repeats": 3}
    for platform, lease, rounds in (("cuda", gpu, range(3)), ("rocm", gpu, range(3)), ("cpu", gpu, range(0)),
                                    ("cuda", none, range(0)), (None, gpu, range(0))):
        spec = job_spec(config, "tuned", parse_shape_id(SHAPE), platform=platform)
        assert runner.rounds_ahead(spec, lease) == rounds, (platform, lease.gpu)


def test_a_job_on_a_host_of_one_gpu_starts_its_workers_before_waiting_for_the_lease(tmp_path, worker_dir,
                                                                                     monkeypatch):
    """Its rounds' workers start without waiting, before the lease (the GPU is the pool's one); where
    the GPU is not known before the lease (two), in isolate mode, or on a CPU, none. Blind side: the
    GPU test step's queue it shortens is measured in a GPU lease."""
    import argparse

    monkeypatch.setenv("FABENCH_WORKER_DIR", str(worker_dir))
    monkeypatch.delenv("FABENCH_WORKFLOW", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PYTHONPATH", source_path())
    monkeypatch.setenv("FABENCH_LEASE_DIR", str(tmp_path / "leases"))
    monkeypatch.chdir(tmp_path)
    config = tiny_config()
    config["timing"] = {**config["timing"], "repeats": 2}

    def args(platform, mode="worker"):
        spec = job_spec(config, "tuned", parse_shape_id(SHAPE), platform=platform)
        return argparse.Namespace(mode=mode, spec=spec, worker_idle_s=IDLE_S)

    monkeypatch.setenv("FABENCH_GPUS", "0,1")
    assert runner.start_workers_before_lease(args("cuda")) == []
    monkeypatch.setenv("FABENCH_GPUS", "0")
    assert runner.start_workers_before_lease(args("cpu")) == []
    assert runner.start_workers_before_lease(args("cuda", "isolate")) == []
    began = time.monotonic()
    names = runner.start_workers_before_lease(args("cuda"))
    assert len(names) == 2 and time.monotonic() - began < 5  # not waited for
    deadline = time.monotonic() + 120
    while len(live_workers(worker_dir)) < 2:
        assert time.monotonic() < deadline, "the workers started before the lease never came up"
        time.sleep(0.1)
    # The lease the job then takes is the one they were started for: the job's worker is one of them.
    with device_lease.acquire() as held:
        assert worker_client.address(worker_client.identity(held, 0)).name in names
    assert runner.start_workers_before_lease(args("cuda")) == []  # running: not started twice


def failed_alone(out, reason: str) -> None:
    """The job's process file is the record of a process that wrote no result (as in isolate mode):
    every backend failed with `reason`, the worker's exit in the method."""
    result = json.loads(out.read_text())
    assert result["_process_failed"] is True
    [ended] = result["method"]["process_exits"]
    assert ended["exit_code"] is None and ended["reason"] == reason and ended["wrote_result"] is False
    for entry in result["backends"].values():
        assert entry["status"] == "failed" and entry["reason"].endswith(f"process 0 {reason}")


def test_a_worker_killed_mid_job_fails_that_job_alone_and_the_next_job_gets_a_fresh_worker(tmp_path, worker_dir):
    proc, out = launch(tmp_path, worker_dir, "killed")
    until_mid_job(proc)
    [pid] = worker_pids(worker_dir)
    os.kill(pid, signal.SIGSTOP)  # frozen mid-job, so the kill lands before the job could finish
    os.kill(pid, signal.SIGKILL)
    code, output = finished(proc)
    assert code == 0, output
    failed_alone(out, f"its measuring worker (pid {pid}) ended mid-job without a result (crashed or was killed)")

    proc, out = launch(tmp_path, worker_dir, "next")
    code, output = finished(proc)
    assert code == 0, output
    fresh = json.loads(out.read_text())["timeline"]["worker"]
    assert fresh["pid"] != pid and fresh["jobs_before"] == 0


def test_a_job_that_hangs_its_worker_is_timed_out_alone(tmp_path, worker_dir):
    # The worker started and warmed by a job first: its start-up (torch, the GPU, the profiler: over
    # 5 s on an H100) is no part of the hung job's 5 s, which then time the hang alone.
    assert finished(launch(tmp_path, worker_dir, "warm")[0])[0] == 0
    proc, out = launch(tmp_path, worker_dir, "hung", "--timeout-s", "5")
    until_mid_job(proc)
    [pid] = worker_pids(worker_dir)
    os.kill(pid, signal.SIGSTOP)  # the worker hangs
    began = time.monotonic()
    code, output = finished(proc)
    assert code == 0 and time.monotonic() - began < 60, output
    failed_alone(out, f"timed out after 5 s (measure.job_timeout_s): its measuring worker (pid {pid}) was killed")
    with pytest.raises(ProcessLookupError):
        for _ in range(50):  # killed: gone once its parent (or init) has reaped it
            os.kill(pid, 0)
            time.sleep(0.1)

    proc, out = launch(tmp_path, worker_dir, "after")
    code, output = finished(proc)
    assert code == 0, output
    assert json.loads(out.read_text())["timeline"]["worker"]["pid"] != pid


def test_an_ended_worker_leaves_no_lock_behind(tmp_path, worker_dir):
    proc, _ = launch(tmp_path, worker_dir, "one")
    assert finished(proc)[0] == 0
    assert list(worker_dir.glob("*.lock"))  # held while the worker lives
    stop_workers(env={"FABENCH_WORKER_DIR": str(worker_dir)})
    deadline = time.monotonic() + 30
    while list(worker_dir.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not list(worker_dir.iterdir())


def test_a_worker_ends_when_asked_and_when_idle(tmp_path, worker_dir):
    proc, _ = launch(tmp_path, worker_dir, "one", "--worker-idle-s", "3")
    assert finished(proc)[0] == 0
    [pid] = worker_pids(worker_dir)
    time.sleep(6)
    assert not worker_pids(worker_dir) and not list(worker_dir.glob("*.sock"))  # idle: ended, cleaned up

    proc, _ = launch(tmp_path, worker_dir, "two")
    assert finished(proc)[0] == 0
    assert len(stop_workers(env={"FABENCH_WORKER_DIR": str(worker_dir)})) == 1
    time.sleep(1)
    assert not worker_pids(worker_dir)


def test_a_worker_ends_when_its_workflow_is_gone(tmp_path, worker_dir):
    snakemake_stand_in = subprocess.Popen(["sleep", "600"])  # a process the worker watches as its workflow
    proc, _ = launch(tmp_path, worker_dir, "one", workflow=f"{socket.gethostname()}:{snakemake_stand_in.pid}")
    assert finished(proc)[0] == 0
    [pid] = worker_pids(worker_dir)
    snakemake_stand_in.kill()
    snakemake_stand_in.wait()
    deadline = time.monotonic() + 30
    while worker_pids(worker_dir):
        assert time.monotonic() < deadline, f"worker {pid} outlived its workflow"
        time.sleep(0.2)


def spare_pids(worker_dir) -> list[int]:
    """The live spares in `worker_dir` (a record whose identity is a spare's)."""
    spares = [r for r in worker_dir.glob("w-*.json") if json.loads(r.read_text())["identity"].get("spare")]
    return [pid for pid in live_workers(worker_dir) if any(json.loads(r.read_text())["pid"] == pid for r in spares)]


def until(condition, what: str, within_s: float = 60):
    deadline = time.monotonic() + within_s
    while not (found := condition()):
        assert time.monotonic() < deadline, what
        time.sleep(0.1)
    return found


def test_a_worker_ended_with_its_workflow_leaves_a_spare_that_the_next_run_adopts(tmp_path, worker_dir):
    """The workflow's end (stop_workers with spare_s, as its onsuccess asks on a GPU run) leaves a
    fresh worker of the same identity for no workflow; the next run's job adopts it instead of
    starting one: another process than the first run's, its start-up made before that run, which
    records only what it waited for. Blind side: the seconds a GPU run saves (the report's time
    line, in a GPU lease), and whether a spare's imports slow a run measuring beside them."""
    env = {"FABENCH_WORKER_DIR": str(worker_dir)}
    first_workflow, next_workflow, last_workflow = (subprocess.Popen(["sleep", "600"]) for _ in range(3))  # Snakemakes
    try:
        proc, out = launch(tmp_path, worker_dir, "first", workflow=f"{socket.gethostname()}:{first_workflow.pid}")
        assert finished(proc)[0] == 0
        first = json.loads(out.read_text())["timeline"]["worker"]
        assert stop_workers(f"{socket.gethostname()}:{first_workflow.pid}", env=env, spare_s=120)
        [spare] = until(lambda: spare_pids(worker_dir), "no spare came up")
        assert spare != first["pid"]
        until(lambda: first["pid"] not in live_workers(worker_dir), "the first run's worker did not end")

        began = time.time()
        proc, out = launch(tmp_path, worker_dir, "next", workflow=f"{socket.gethostname()}:{next_workflow.pid}")
        code, output = finished(proc)
        assert code == 0, output
        result = json.loads(out.read_text())
        adopted = result["timeline"]["worker"]
        assert adopted["pid"] == spare and adopted["jobs_before"] == 0, adopted
        assert adopted["adoption"]["spare_started_at"] < began <= adopted["adoption"]["adopted_at"], adopted
        [imports] = [p for p in result["timeline"]["phases"] if p["phase"] == "imports"]
        assert imports["start"] >= adopted["adoption"]["adopted_at"], (imports, adopted)
        assert result["method"]["process_exits"][0]["worker"]["started_by_this_job"] is True
        assert not spare_pids(worker_dir), "still a spare after its adoption"
        # The report's time line counts it (the merge files each process's time line under its index).
        assert run_time_line([{**result, "timelines": [dict(result["timeline"], process=0)]}])["adopted_workers"] == 1
        # Adopted, it leaves a spare of its own at its workflow's end, of the spare's name: its log
        # moved to its own name, the new spare's log is the new spare's and outlives the worker.
        assert stop_workers(f"{socket.gethostname()}:{next_workflow.pid}", env=env, spare_s=120)
        [second] = until(lambda: [p for p in spare_pids(worker_dir) if p != spare], "no second spare came up")
        until(lambda: spare not in live_workers(worker_dir), "the adopted worker did not stop")
        [record] = [json.loads(r.read_text()) for r in worker_dir.glob("w-*.json")]
        assert record["pid"] == second and Path(record["log"]).is_file(), record
        # Adopted, a spare serves the workflow that adopted it: it ends with it, as a worker started by it does.
        proc, out = launch(tmp_path, worker_dir, "last", workflow=f"{socket.gethostname()}:{last_workflow.pid}")
        assert finished(proc)[0] == 0
        assert json.loads(out.read_text())["timeline"]["worker"]["pid"] == second
        last_workflow.kill()
        last_workflow.wait()
        until(lambda: second not in live_workers(worker_dir), "the adopted spare outlived the workflow that adopted it")
    finally:
        for stand_in in (first_workflow, next_workflow, last_workflow):
            stand_in.kill()


def test_a_spare_nobody_adopts_ends_after_its_time_and_a_stop_for_all_ends_it_at_once(tmp_path, worker_dir):
    """A spare waits `spare_s` and ends, even mid-import, leaving no file; stop_workers without a
    workflow (a user's, the tests' clean-up) ends the spares too; a worker stopped without spare_s
    leaves none. Blind side: a spare's memory while it waits (a torch import's, on the host)."""
    env = {"FABENCH_WORKER_DIR": str(worker_dir)}
    proc, _ = launch(tmp_path, worker_dir, "first")
    assert finished(proc)[0] == 0
    stop_workers(env=env, spare_s=30)
    [spare] = until(lambda: spare_pids(worker_dir), "no spare came up")
    [record] = [r for r in worker_dir.glob("w-*.json") if json.loads(r.read_text())["pid"] == spare]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as garbled:  # a client it cannot read
        garbled.connect(str(record.with_suffix(".sock")))
        socket.send_fds(garbled, [b"F"], [])
        garbled.sendall(b"not a request\n")
        assert garbled.recv(1) == b""  # closed without an answer; the spare waits on
    assert stop_workers(env=env)  # the spare
    until(lambda: not live_workers(worker_dir), "the spare did not stop")
    assert not list(worker_dir.iterdir())

    proc, _ = launch(tmp_path, worker_dir, "again")
    assert finished(proc)[0] == 0
    stop_workers(env=env, spare_s=5)
    [spare] = until(lambda: spare_pids(worker_dir), "no spare came up")
    until(lambda: not live_workers(worker_dir), "the spare outlived its 5 s", within_s=30)
    time.sleep(0.5)
    assert not list(worker_dir.iterdir())


def test_between_jobs_aiter_config_is_forgotten_and_the_generators_reseeded(tmp_path):
    """aiter's real loader on the CPU (as tests/test_aiter_config.py runs it): the config it cached
    for one job is gone before the next."""
    if aiter_kernel.unavailable_reason():
        pytest.skip(aiter_kernel.unavailable_reason())
    patched = tmp_path / "patched.json"
    patched.write_text(json.dumps({"fwd": {"default": {"BLOCK_M": 64, "BLOCK_N": 32}}}))
    loader, placed = aiter_kernel.load_patched("cpu", patched, torch.float16, tmp_path / "configs")
    assert placed["read_back"]["BLOCK_M"] == 64
    assert hasattr(loader._get_config, "_config_dict") or loader._get_config.cache_info().currsize

    torch.rand(3)
    worker.reset_between_jobs(7)

    assert not hasattr(loader._get_config, "_config_dict")
    if hasattr(loader._get_config, "cache_info"):
        assert loader._get_config.cache_info().currsize == 0
    drawn = torch.rand(3)
    torch.manual_seed(7)
    assert torch.equal(drawn, torch.rand(3))


def test_between_jobs_the_last_jobs_garbage_is_collected_and_what_survives_frozen():
    """A reference cycle the job left is collected at the hand-over (before anything is frozen), and
    what survives is frozen out of later collections (the next hand-over walks only the next job's).
    Blind side: the time saved is measured on a GPU host (the report's worker hand-over), not here."""
    import gc
    import weakref

    class Node:
        pass

    left = Node()
    left.me = left  # garbage only a collection frees
    gone = weakref.ref(left)
    del left
    gc.unfreeze()  # nothing frozen before (another test's worker may have frozen its imports)
    worker.reset_between_jobs(0)
    assert gone() is None and gc.get_freeze_count() > 0
    gc.unfreeze()  # the test process's collector as it was


def test_between_jobs_dynamo_forgets_compiled_frames():
    """A frame Dynamo compiled for one job is compiled anew in the next (its cache, keyed on what
    the job ran, and its recompile count start over)."""
    from torch._dynamo.utils import counters

    compiled = torch.compile(lambda x: x * 2, backend="eager")
    compiled(torch.ones(2))
    graphs = counters["stats"]["unique_graphs"]
    compiled(torch.ones(2))
    assert counters["stats"]["unique_graphs"] == graphs  # cached: not compiled again
    worker.reset_between_jobs(0)
    compiled(torch.ones(2))
    assert counters["stats"]["unique_graphs"] == graphs + 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_between_jobs_the_allocator_is_emptied_and_its_peak_forgotten():
    size = 256 << 20
    held = torch.empty(size, dtype=torch.uint8, device="cuda")
    del held
    reserved = torch.cuda.memory_reserved()
    assert torch.cuda.max_memory_allocated() >= size + torch.cuda.memory_allocated()
    worker.reset_between_jobs(0)
    # What this process still holds (other tests' tensors) stays; the job's cached block and peak go.
    assert torch.cuda.memory_reserved() <= reserved - size
    assert torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated()


# --- the workflow (slow: each runs snakemake on the CPU test experiment) ---------------------------

def workflow_command(directory: Path, config: dict) -> list[str]:
    return [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(directory),
            "--configfile", str(write_config(directory, config)), "--cores", "1", "report"]


def workflow_env(worker_dir: Path) -> dict:
    return {**os.environ, "FABENCH_WORKER_DIR": str(worker_dir),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}


def results_of(directory: Path, config: dict) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((directory / "results" / config["run"]).glob("*/*.json"))
            if p.parent.name != "aiter-config"]


@pytest.mark.gpu_workflow
def test_the_workflow_in_isolate_mode_measures_each_process_anew(tmp_path, worker_dir):
    """Compiling ahead too (on a CPU as on a GPU), which in worker mode starts the measuring workers:
    in isolate mode it starts none, and the report says none did. One shape and the uncompiled
    backends: what is followed is processes (on a GPU each process imports anew, seconds each)."""
    config = followed_config(measure={"mode": "isolate", "compile_ahead": "always"})
    config["shapes"] = config["shapes"][:1]
    proc = subprocess.run(workflow_command(tmp_path, config), capture_output=True, text=True, timeout=900,
                          env=workflow_env(worker_dir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = results_of(tmp_path, config)
    assert len(results) == len(config["variants"]) * len(config["shapes"])
    for result in results:  # one time line per process: 2 on a GPU (timing.repeats), 1 on a CPU
        assert len(result["timelines"]) == len(result["method"]["process_exits"]) >= 1
        for timeline in result["timelines"]:
            assert "worker" not in timeline and "imports" in [p["phase"] for p in timeline["phases"]]
    assert not list(worker_dir.iterdir())  # no worker was started
    report = (tmp_path / "results" / config["run"] / "report.md").read_text()
    assert "compiled ahead for " in report, report
    # No process measured by a worker, none started beside the compile ahead. (The report may still
    # name `measure.mode` as the setting that cuts start-up: "with `worker`, each GPU's measuring
    # worker pays ... once", on a GPU, where start-up is the largest item of these jobs.)
    assert not re.search(r"of them by \d+ measuring workers?", report), report
    assert "the measuring workers started beside it" not in report, report


@pytest.mark.gpu_workflow
def test_killing_the_worker_mid_run_fails_the_job_it_held_and_the_run_finishes_the_rest(tmp_path, worker_dir):
    config = tiny_config()  # measure.mode: worker, the default
    # Each trial's loop lasts 1 s, so the job seen measuring is still measuring when the kill lands
    # (tiny jobs of a few milliseconds ended before it, and the worker was killed between jobs): on
    # a CPU its loop's minimum; on a GPU its profiled loop's, a fifth of the timeout in host time
    # (on an H200 the kill landed between jobs, and the next job's ready launcher, connecting at
    # that moment, met a worker gone before its hello). Two backends keep the run short on a GPU.
    config["cpu"] = {**config["cpu"], "min_trial_ms": 1000}
    config["timing"] = {**config.get("timing", {}), "min_trial_ms": 1000, "max_trial_ms": 5000}
    config["backends"] = ["native", "sdpa"]
    config["roles"] = {platform: {"baseline": "native", "vendor": "sdpa", "triton": "sdpa"} for platform in config["roles"]}
    logs = tmp_path / "logs" / config["run"]
    workflow = subprocess.Popen(workflow_command(tmp_path, config), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=workflow_env(worker_dir))

    first_measuring_log(logs, workflow)
    [pid] = live_workers(worker_dir, round_=0)  # the first measuring log is a round-0 process's
    os.kill(pid, signal.SIGSTOP)
    os.kill(pid, signal.SIGKILL)
    output, _ = workflow.communicate(timeout=600)
    assert workflow.returncode == 0, output[-3000:]
    results = results_of(tmp_path, config)
    assert len(results) == len(config["variants"]) * len(config["shapes"])
    lost = f"its measuring worker (pid {pid}) ended mid-job"
    # The job the worker held when it was killed: on a loaded host the one whose log was seen may
    # have ended before the kill landed, so it is found by its result. Every backend that ran there
    # failed with why; one that cannot run on this host stays unavailable.
    [killed] = [r for r in results if any(lost in (e["reason"] or "") for e in r["backends"].values())]
    assert all(e["status"] == "unavailable" or (e["status"] == "failed" and lost in e["reason"])
               for e in killed["backends"].values()), killed["backends"]
    assert any(e["status"] == "failed" for e in killed["backends"].values())
    workers = {r["timelines"][0]["worker"]["pid"] for r in results if r is not killed}
    assert pid not in workers and len(workers) == 1  # the jobs after it: one fresh worker
    time.sleep(1)
    assert not live_workers(worker_dir)  # stopped at the workflow's end (onsuccess)


@pytest.mark.parametrize("bad, expected", [
    ({"mode": "fast"}, "invalid config: measure.mode: 'fast' is not one of ['worker', 'isolate']"),
    ({"worker_idle_s": 0}, "invalid config: measure.worker_idle_s: 0 is less than or equal to the minimum of 0"),
    ({"job_timeout_s": "1h"}, "invalid config: measure.job_timeout_s: '1h' is not of type 'number'"),
    ({"compile_ahead": True}, "invalid config: measure.compile_ahead: True is not one of ['gpu', 'always', 'never']"),
])
def test_a_bad_measure_setting_stops_the_run_in_one_line(tmp_path, bad, expected):
    proc = snakemake(tmp_path, "-n", "--cores", "1", "report", config=tiny_config(measure=bad))
    assert proc.returncode != 0
    assert expected in proc.stdout + proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_asking_a_stopped_worker_to_end_does_not_hang(tmp_path, worker_dir):
    """A worker frozen by SIGSTOP never answers the stop request; stop_workers must give up on it
    (the workflow's end and the tests' clean-up called it and blocked for good). Blind side: a
    worker that answers late but within the wait is not told apart from a prompt one."""
    from fabench.measure.launch import worker_client

    assert finished(launch(tmp_path, worker_dir, "warm")[0])[0] == 0
    [pid] = worker_pids(worker_dir)
    os.kill(pid, signal.SIGSTOP)
    try:
        began = time.monotonic()
        worker_client.stop_workers(env={"FABENCH_WORKER_DIR": str(worker_dir)})
        assert time.monotonic() - began < worker_client.STOP_ANSWER_S + 5
    finally:
        os.kill(pid, signal.SIGCONT)


def test_the_workflows_end_says_how_many_spares_it_left_and_for_how_long(tmp_path, worker_dir, monkeypatch):
    """The Snakefile's onsuccess on a GPU run (its plan's spare_worker_s), here with a worker on the CPU:
    one line naming the spares, the setting and the page. Blind side: a worker that fails to spawn
    its spare is still counted (its log says why)."""
    from fabench.plan import Plan
    from fabench.workflow_hooks import WorkflowHooks
    from test_plan import with_defaults
    from workflow_util import default_config

    gpu_run = Plan(with_defaults({**default_config(), "measure": {"spare_worker_s": 30}}), REPO, docker=False,
                   platform="cuda")  # the plan of a CUDA run (the platform planned, not detected)
    stand_in = subprocess.Popen(["sleep", "600"])
    try:
        workflow = f"{socket.gethostname()}:{stand_in.pid}"
        proc, _ = launch(tmp_path, worker_dir, "one", workflow=workflow)
        assert finished(proc)[0] == 0
        monkeypatch.setenv("FABENCH_WORKER_DIR", str(worker_dir))
        monkeypatch.setenv("FABENCH_WORKFLOW", workflow)
        note = WorkflowHooks(gpu_run, cluster=False).stop_measuring_workers()
        assert note.startswith("note: 1 spare measuring worker(s) wait up to 30 s") and "docs/worker.md" in note, note
        until(lambda: spare_pids(worker_dir), "no spare came up")
    finally:
        stand_in.kill()


def test_a_worker_asked_for_its_spare_once_its_run_is_measured_serves_on_and_leaves_no_second(tmp_path, worker_dir):
    """leave_spares, as rule write_report calls it once the run's measuring is over: the spare comes
    up beside the worker, which still serves its workflow; the workflow's end then leaves no second
    one. Blind side: the seconds the next run saves by it (the spare's imports done before it starts),
    measured in a GPU lease."""
    from fabench.measure.launch.worker_client import leave_spares

    env = {"FABENCH_WORKER_DIR": str(worker_dir)}
    stand_in = subprocess.Popen(["sleep", "600"])
    try:
        workflow = f"{socket.gethostname()}:{stand_in.pid}"
        proc, out = launch(tmp_path, worker_dir, "first", workflow=workflow)
        assert finished(proc)[0] == 0
        first = json.loads(out.read_text())["timeline"]["worker"]["pid"]
        assert len(leave_spares(workflow, 120, env=env)) == 1
        [spare] = until(lambda: spare_pids(worker_dir), "no spare came up")
        proc, out = launch(tmp_path, worker_dir, "second", workflow=workflow)
        assert finished(proc)[0] == 0
        assert json.loads(out.read_text())["timeline"]["worker"]["pid"] == first  # served on, not adopted
        leave_spares(workflow, 120, env=env)  # asked again: still the one
        stop_workers(workflow, env=env, spare_s=120)
        until(lambda: first not in live_workers(worker_dir), "the worker did not stop")
        time.sleep(1)
        assert spare_pids(worker_dir) == [spare]
    finally:
        stand_in.kill()


@pytest.mark.parametrize("runs, rules, platform, expected", [
    (1, ["compile_ahead", "measure", "write_report"], "cuda", 900), (1, ["write_report", "archive_run"], "rocm", 900),
    (1, [], "cuda", 900), (1, ["measure", "sweep_stage", "write_report"], "cuda", 0),
    (2, ["measure", "write_report"], "cuda", 0), (1, ["measure", "write_report"], "cpu", 0)])
def test_the_workers_leave_their_spares_at_the_report_only_where_nothing_is_measured_after_it(
        runs, rules, platform, expected):
    """Plan.spares_once_measured, which the Snakefile's onstart exports to rule write_report. Blind
    side: a sweep whose stages all end before the report (its variant among the run's) is taken as
    measuring after it (the spares then come at the workflow's end)."""
    from fabench.plan import Plan
    from test_plan import with_defaults
    from workflow_util import default_config

    config = {**default_config(), "measure": {"spare_worker_s": 900}}
    if runs > 1:
        config["platforms"] = {f"p{i}": {} for i in range(runs)}
    plan = Plan(with_defaults(config), REPO, docker=False, platform=platform)
    assert plan.spares_once_measured(False, rules) == expected


@pytest.mark.parametrize("platform, docker, cluster, mode, spare_s, expected", [
    ("cuda", False, False, "worker", 900, 900), ("rocm", False, False, "worker", 60, 60),
    ("cuda", False, False, "worker", 0, 0), ("cpu", False, False, "worker", 900, 0),
    ("cuda", True, False, "worker", 900, 0), ("cuda", False, True, "worker", 900, 0),
    ("cuda", False, False, "isolate", 900, 0)])
def test_a_workflow_leaves_spares_only_on_a_gpu_run_in_worker_mode(platform, docker, cluster, mode, spare_s, expected):
    """Blind side: that the Snakefile's onsuccess and onerror pass this on (a GPU run's workflow, in
    a GPU lease: its report counts the workers it adopted)."""
    from fabench.plan import Plan
    from test_plan import with_defaults
    from workflow_util import default_config

    config = with_defaults({**default_config(), "measure": {"mode": mode, "spare_worker_s": spare_s}})
    assert Plan(config, REPO, docker=docker, platform=platform).spare_worker_s(cluster) == expected
