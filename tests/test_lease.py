"""One GPU per timed job (fabench.measure.launch.lease): real runner processes, real locks, real signals.

This host has no GPU: the tests declare GPUs in FABENCH_GPUS, which the lease reads like a found
GPU, and give every test its own lock directory (FABENCH_LEASE_DIR).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fabench.measure.spec import job_spec
from fabench.container import job as container_job
from fabench.measure.launch import devices, lease
from fabench.shapes import parse_shape_id
from support.workers import worker_dir  # noqa: F401 (a fixture)
from workflow_util import REPO, snakemake, tiny_config

SHAPES = ("b1-s64-h2-d32", "b1-s128-h2-d64", "b1-s64-h2-d64")


def lease_env(tmp_path: Path, gpus: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in (*devices.VISIBLE_VARS, lease.LEASE_ENV, lease.SCHEDULER_ENV, "FABENCH_WORKFLOW")}
    return {**env, devices.DECLARED_ENV: gpus, lease.LEASE_DIR_ENV: str(tmp_path / "leases"),
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}


def start_job(tmp_path: Path, env: dict, shape: str, name: str, mode: str = "isolate",
              trial_ms: float = 0) -> tuple[subprocess.Popen, Path, Path]:
    """A real measure job (the runner, as rule measure starts it) on the CPU test experiment; each
    CPU trial's loop at least `trial_ms` long (a job of a few milliseconds ends before a signal can
    land mid-job on a loaded host)."""
    config = tiny_config()
    config["cpu"] = {**config["cpu"], "min_trial_ms": trial_ms}
    spec = job_spec(config, "tuned", parse_shape_id(shape))
    out, log = tmp_path / f"{name}.json", tmp_path / f"{name}.log"
    cmd = [sys.executable, "-m", "fabench.measure", "--spec", spec.to_json(), "--process", "0",
           "--out", str(out), "--project-commit", "abc123", "--mode", mode, "--worker-idle-s", "30"]
    with open(log, "w") as log_file:
        proc = subprocess.Popen(cmd, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, out, log


def exit_times(procs: list[subprocess.Popen]) -> dict[int, float]:
    """Each process's exit, seen by a thread waiting on it (at most milliseconds after the fact)."""
    ended: dict[int, float] = {}

    def wait(proc):
        proc.wait(timeout=600)
        ended[proc.pid] = time.time()

    threads = [threading.Thread(target=wait, args=(p,)) for p in procs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ended


def lock_is_held(path: Path) -> bool:
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def wait_for(condition, timeout: float = 120, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.parametrize("mode", ["isolate", "worker"])
def test_concurrent_measure_jobs_never_share_a_gpu(tmp_path, mode, worker_dir):
    env = {**lease_env(tmp_path, "0,1"), "FABENCH_WORKER_DIR": str(worker_dir)}
    jobs = [start_job(tmp_path, env, shape, f"job{i}", mode) for i, shape in enumerate(SHAPES)]
    ended = exit_times([proc for proc, _, _ in jobs])
    spans, workers = [], {}
    for proc, out, log in jobs:
        assert proc.returncode == 0, log.read_text()
        result = json.loads(out.read_text())
        held = result["provenance"]["device_lease"]
        assert held["source"] == "lease" and held["gpu"] in ("0", "1")
        assert held["visible_devices"]["CUDA_VISIBLE_DEVICES"] == held["gpu"]
        # what the measuring process (or worker) itself saw, read from its own environment
        assert result["provenance"]["visible_devices"] == held["gpu"]
        if mode == "worker":  # each GPU's own worker
            assert result["timeline"]["worker"]["pid"] == workers.setdefault(held["gpu"], result["timeline"]["worker"]["pid"])
        spans.append((held["gpu"], held["taken_at"], ended[proc.pid], held["waited_s"], log))
    assert {gpu for gpu, *_ in spans} == {"0", "1"}
    for i, (gpu, start, end, *_) in enumerate(spans):
        for other_gpu, other_start, other_end, *_ in spans[i + 1:]:
            if gpu == other_gpu:  # one after the other: the later lease taken when the earlier job ended
                overlap = min(end, other_end) - max(start, other_start)
                assert overlap < 0.3, (spans, overlap)
    waited = [s for s in spans if "waiting for a GPU: all 2 held" in s[4].read_text()]
    assert len(waited) == 1, "three jobs on two GPUs: one waits"
    assert waited[0][3] > 0.5  # until a job ended, seconds later


def test_a_killed_job_releases_its_gpu_and_the_next_takes_it_over(tmp_path):
    env = lease_env(tmp_path, "0")
    lock = tmp_path / "leases" / "gpu-0.lock"
    first, _, _ = start_job(tmp_path, env, SHAPES[0], "killed")
    holder = lock.with_suffix(".holder.json")
    wait_for(lambda: holder.is_file() and lock_is_held(lock), what="the first job's lease")
    measuring = _children(first.pid)
    wait_for(lambda: measuring or _children(first.pid), what="the measuring process")
    measuring = _children(first.pid)
    first.send_signal(signal.SIGKILL)
    first.wait()
    # Its measuring process inherited the lease: an orphan still measuring still holds the GPU.
    assert measuring and lock_is_held(lock)
    for pid in measuring:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not lock_is_held(lock), timeout=30, what="the lock to be released")

    second, out, log = start_job(tmp_path, env, SHAPES[0], "next")
    assert second.wait(timeout=600) == 0, log.read_text()
    held = json.loads(out.read_text())["provenance"]["device_lease"]
    assert held["gpu"] == "0" and held["taken_over_from"] == first.pid
    assert f"taking over the lease left by pid {first.pid}" in log.read_text()
    assert not holder.exists() and not lock_is_held(lock)  # released on a normal exit


def test_a_worker_holds_the_gpu_while_it_measures_the_job_of_a_killed_launcher(tmp_path, worker_dir):
    env = {**lease_env(tmp_path, "0"), "FABENCH_WORKER_DIR": str(worker_dir)}
    lock = tmp_path / "leases" / "gpu-0.lock"
    first, _, log = start_job(tmp_path, env, SHAPES[0], "killed", "worker", trial_ms=1000)
    wait_for(lambda: "native: setting up" in log.read_text(), what="the worker measuring the job")
    [record] = worker_dir.glob("w-*.json")
    worker = json.loads(record.read_text())["pid"]
    os.kill(worker, signal.SIGSTOP)  # mid-job, until the launcher is gone
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert lock_is_held(lock)  # the worker was handed the lease's descriptor with the job
    os.kill(worker, signal.SIGCONT)
    wait_for(lambda: not lock_is_held(lock), timeout=60, what="the worker to end the job and the lease")

    second, out, log = start_job(tmp_path, env, SHAPES[0], "next", "worker")
    assert second.wait(timeout=600) == 0, log.read_text()
    assert json.loads(out.read_text())["timeline"]["worker"]["pid"] == worker  # it lived on


def _children(pid: int) -> list[int]:
    proc = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(p) for p in proc.stdout.split()]


def test_a_stale_lease_of_a_dead_process_is_taken_over(tmp_path):
    env = lease_env(tmp_path, "0")
    # A real process takes GPU 0 and ends without releasing it (os._exit: no clean-up at all).
    code = "import os; from fabench.measure.launch import lease; lease.acquire(); os._exit(0)"
    dead = subprocess.Popen([sys.executable, "-c", code], env=env)
    assert dead.wait(timeout=60) == 0
    said = []
    with lease.acquire(env, say=lambda text, **_: said.append(text)) as taken:
        assert (taken.source, taken.gpu, taken.taken_over_from) == ("lease", "0", dead.pid)
        assert taken.waited_s < 1
        assert said == [f"[fabench] GPU 0: taking over the lease left by pid {dead.pid}, which is gone"]
    assert not (tmp_path / "leases" / "gpu-0.holder.json").exists()


def test_the_schedulers_gpu_is_taken_as_given_and_nothing_is_locked(tmp_path):
    env = {**lease_env(tmp_path, "0,1"), "SLURM_JOB_ID": "42", "SLURM_STEP_GPUS": "1",
           "CUDA_VISIBLE_DEVICES": "0"}
    taken = lease.acquire(env)
    assert (taken.source, taken.gpu) == ("scheduler", "1")
    assert taken.visible_devices["CUDA_VISIBLE_DEVICES"] == "0" and taken.lock is None
    assert not (tmp_path / "leases").exists()


def test_several_gpus_of_one_slurm_allocation_are_leased_one_per_job(tmp_path):
    env = {**lease_env(tmp_path, "0"), "SLURM_JOB_ID": "42", "CUDA_VISIBLE_DEVICES": "2,5"}
    env.pop(devices.DECLARED_ENV)
    with lease.acquire(env) as first, lease.acquire(env) as second:
        assert (first.source, second.source) == ("lease", "lease")
        assert [first.visible_devices["CUDA_VISIBLE_DEVICES"], second.visible_devices["CUDA_VISIBLE_DEVICES"]] == \
            ["2", "5"]
        assert first.visible_devices["ROCR_VISIBLE_DEVICES"] is None  # set only where Slurm set it
        assert Path(first.lock).name == "gpu-slurm42-2.lock"


def test_a_visibility_variable_narrows_the_pool_and_a_bad_one_is_one_line(tmp_path):
    env = {**lease_env(tmp_path, "0,1,2"), "CUDA_VISIBLE_DEVICES": "2"}
    with lease.acquire(env) as taken:
        assert taken.gpu == "2" and "narrowed by CUDA_VISIBLE_DEVICES" in taken.found_by
    with pytest.raises(devices.DeviceError, match=r"^CUDA_VISIBLE_DEVICES='5': 5 is no GPU of this host \(ids: 0, 1, 2\)$"):
        lease.acquire({**env, "CUDA_VISIBLE_DEVICES": "5"})
    with pytest.raises(devices.DeviceError, match="FABENCH_GPUS='0,,0': expected distinct GPU ids"):
        lease.acquire({**env, devices.DECLARED_ENV: "0,,0"})


def test_a_bad_declaration_stops_the_workflow_before_any_job(tmp_path, monkeypatch):
    monkeypatch.setenv(devices.DECLARED_ENV, "0;1")
    proc = snakemake(tmp_path, "-n", "report", config=tiny_config(), timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    errors = [line for line in output.splitlines() if line.startswith("invalid environment:")]
    assert errors == ["invalid environment: FABENCH_GPUS='0;1': expected distinct GPU ids separated by commas, "
                      "e.g. 0,1"], output
    assert "rule measure" not in output


def test_amd_gpus_are_read_from_the_kfd_topology_in_rocr_order(tmp_path):
    nodes = tmp_path / "nodes"
    for node, props in {"0": "cpu_cores_count 64\nsimd_count 0\n",
                        "2": "simd_count 304\ndrm_render_minor 136\n",
                        "1": "simd_count 304\ndrm_render_minor 128\n",
                        "10": "simd_count 304\ndrm_render_minor 200\n"}.items():
        (nodes / node).mkdir(parents=True)
        (nodes / node / "properties").write_text(props)
    gpus = devices.amd_gpus(nodes)
    assert [g.id for g in gpus] == ["0", "1", "2"]
    assert [g.device_nodes for g in gpus] == [("/dev/dri/renderD128",), ("/dev/dri/renderD136",),
                                              ("/dev/dri/renderD200",)]
    assert gpus[2].visible == {"ROCR_VISIBLE_DEVICES": "2", "HIP_VISIBLE_DEVICES": "0"}


def test_a_pool_of_one_gpu_names_the_lease_before_it_is_taken_and_the_lease_is_that_one(tmp_path):
    """sole_gpu: what a job's launcher starts its worker for before waiting (runner). Blind side: a
    real NVIDIA host's single GPU (one UUID visible) is the GPU lease's case; here a declared one."""
    env = lease_env(tmp_path, "3")
    predicted = lease.sole_gpu(env)
    with lease.acquire(env=env) as held:
        assert (predicted.source, predicted.gpu, predicted.visible_devices) == \
            (held.source, held.gpu, held.visible_devices)
    assert predicted.inheritable_fds() == () and not list((tmp_path / "leases").glob("*.holder.json"))
    assert lease.sole_gpu(lease_env(tmp_path, "0,1")) is None  # which one is known once one is free
    assert lease.sole_gpu({**env, lease.LEASE_ENV: json.dumps(held.record())}) is None  # inherited
    assert lease.sole_gpu({**env, lease.SCHEDULER_ENV: "7", "CUDA_VISIBLE_DEVICES": "0"}) is None
    assert lease.sole_gpu(lease_env(tmp_path, "0,0")) is None  # a bad declaration: acquire says why


def test_nvidia_gpus_are_read_from_the_drivers_folder_in_pci_order_and_made_visible_by_uuid(tmp_path):
    """Blind side: the folder's layout is the driver's as seen on two H200s (a folder per PCI address
    holding `information`); whether its order is NVML's on a real host is
    test_gpu_identity.py's GPU test."""
    root = tmp_path / "gpus"
    for address, uuid in {"0000:07:00.0": "GPU-b", "0000:06:00.0": "GPU-a", "0000:0A:00.0": "GPU-c"}.items():
        (root / address).mkdir(parents=True)
        (root / address / "information").write_text(f"Model: \t\t NVIDIA H200\nGPU UUID: \t {uuid}\nBus Type: \t PCIe\n")
    (root / "0000:0b:00.0").mkdir()  # a GPU going away as it is read: no information, left out
    gpus = devices.nvidia_proc_gpus(root)
    assert [(g.id, g.visible, g.aliases) for g in gpus] == [
        ("0", {"CUDA_VISIBLE_DEVICES": "GPU-a"}, ("GPU-a",)), ("1", {"CUDA_VISIBLE_DEVICES": "GPU-b"}, ("GPU-b",)),
        ("2", {"CUDA_VISIBLE_DEVICES": "GPU-c"}, ("GPU-c",))]
    assert devices.nvidia_proc_gpus(tmp_path / "absent") == []


def test_a_container_with_its_gpus_nodes_gets_no_visibility_variable(tmp_path):
    held = lease.Lease(source="lease", gpu="3", device_nodes=["/dev/dri/renderD152"],
                       visible_devices={"CUDA_VISIBLE_DEVICES": None, "HIP_VISIBLE_DEVICES": "0",
                                        "ROCR_VISIBLE_DEVICES": "3"})
    env = container_job._job_environment({"tag": "t", "image_id": "sha256:0"}, None, held)
    assert not set(devices.VISIBLE_VARS) & set(env)
    recorded = json.loads(env[lease.LEASE_ENV])
    assert recorded["gpu"] == "3" and recorded["device_nodes"] == ["/dev/dri/renderD152"]
    assert recorded["visible_devices"] == dict.fromkeys(devices.VISIBLE_VARS)


def test_the_workflow_on_two_declared_gpus_runs_two_jobs_at_once_each_on_its_own(tmp_path, monkeypatch):
    for key, value in lease_env(tmp_path, "0,1").items():
        monkeypatch.setenv(key, value)
    proc = snakemake(tmp_path, "--profile", str(REPO / "profiles" / "multi-gpu"), "report", "--cores", "2",
                     "--resources", "gpu=2", config=tiny_config(), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    held = [json.loads(p.read_text())["provenance"]["device_lease"]
            for p in (tmp_path / "results" / "tiny").glob("*/*/process-0.json")]
    assert len(held) == 4 and {h["gpu"] for h in held} == {"0", "1"}
    assert all(h["source"] == "lease" and h["visible_devices"]["CUDA_VISIBLE_DEVICES"] == h["gpu"] for h in held)
    assert (tmp_path / "results" / "tiny" / "report.md").is_file()


HOLD = ("import sys, time; from fabench.measure.launch import lease; held = lease.acquire(); "
        "print('took', held.gpu, time.time(), held.waited_s, flush=True); sys.stdin.readline(); "
        "print('released', time.time(), flush=True); held.release()")


def holding(env: dict) -> subprocess.Popen:
    """A real process that takes a lease (waiting as a job's launcher does) and holds it until told."""
    return subprocess.Popen([sys.executable, "-c", HOLD], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def next_line(proc: subprocess.Popen, starts: str) -> list[str]:
    while True:
        line = proc.stdout.readline()
        assert line, f"{proc.args}: ended before a line starting {starts!r}"
        if line.startswith(starts):
            return line.split()


def let_go(proc: subprocess.Popen) -> float:
    proc.stdin.write("\n")
    proc.stdin.flush()
    released = float(next_line(proc, "released")[1])
    assert proc.wait(timeout=60) == 0
    return released


@pytest.mark.parametrize("gpus", ["0", "0,1"])
def test_a_launcher_waiting_for_its_own_workflows_job_says_it_is_ready_and_takes_the_lease_at_its_release(
        tmp_path, gpus):
    """Blind side: 'within 0.25 s' on this loaded 2-core host; each wake-up took 2-10 ms here (a
    blocking lock on one GPU, a try every POLL_S on two), the rest is this host's scheduling."""
    env = {**lease_env(tmp_path, gpus), "FABENCH_WORKFLOW": "host:1"}
    holders = [holding(env) for _ in gpus.split(",")]
    first_gpu = [next_line(holder, "took")[1] for holder in holders][0]
    ready = holding(env)
    said = " ".join(next_line(ready, "[fabench]"))
    assert said.startswith("[fabench] ready: waiting for this workflow's job"), said
    assert all(f"by pid {holder.pid}" in said for holder in holders), said
    other = holding({**env, "FABENCH_WORKFLOW": "host:2"})  # someone else's job: told who holds them
    assert " ".join(next_line(other, "[fabench]")).startswith(f"[fabench] waiting for a GPU: all {len(holders)} held")
    released = let_go(holders[0])
    _, gpu, taken, waited = next_line(ready, "took")  # the first in line, not the one after it
    assert gpu == first_gpu and float(taken) - released < 0.25 and float(waited) > 0
    for proc in (*holders[1:], ready):
        let_go(proc)
    next_line(other, "took")
    let_go(other)


def test_launchers_waiting_for_a_pool_of_several_gpus_take_them_in_the_order_they_came(tmp_path):
    """The first in line takes the first GPU released; the one behind it, the next."""
    env = lease_env(tmp_path, "0,1")
    holders = [holding(env) for _ in range(2)]
    gpus = {next_line(holder, "took")[1]: holder for holder in holders}
    first = holding(env)
    next_line(first, "[fabench] waiting")
    second = holding(env)
    next_line(second, "[fabench] waiting")
    let_go(gpus["1"])
    assert next_line(first, "took")[1] == "1"
    let_go(gpus["0"])
    assert next_line(second, "took")[1] == "0"
    for proc in (first, second):
        let_go(proc)


def leases_taken(results: Path) -> list[dict]:
    """Each measuring process of a workflow run: its shape and process, its GPU, when its launcher
    started and took the lease, and when its measuring process ended, in the order of the leases."""
    taken = []
    for path in results.glob("*/process-*.json"):
        result = json.loads(path.read_text())
        [ended] = result["method"]["process_exits"]
        taken.append({"job": (int(path.stem.split("-")[1]), path.parent.name),
                      "gpu": result["provenance"]["device_lease"]["gpu"],
                      "taken_at": ended["launcher"]["leased_at"],
                      "started_at": ended["launcher"]["started_at"], "exited_at": ended["exited_at"]})
    return sorted(taken, key=lambda t: t["taken_at"])


def measure_jobs_run(tmp_path: Path, env: dict, cores: str, mode: str = "worker") -> tuple[list[dict], str]:
    """The CPU test experiment's variant `default`, two shapes, two processes each: four measure jobs."""
    config = tiny_config(run="ready")
    config["cpu"]["repeats"] = 2
    config["measure"] = {**config.get("measure", {}), "mode": mode}
    targets = [f"results/ready/default/{shape}.json" for shape in ("b1-s64-h2-d32", "b1-s128-h2-d64")]
    proc = snakemake(tmp_path, "--cores", cores, *targets, config=config, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    logs = "".join(p.read_text() for p in (tmp_path / "logs" / "ready").rglob("process-*.log"))
    return leases_taken(tmp_path / "results" / "ready" / "default"), logs


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["worker", "isolate"])
def test_on_a_declared_gpu_the_next_jobs_launcher_waits_ready_beside_the_job_and_takes_the_lease_in_turn(
        tmp_path, worker_dir, mode):
    """Snakemake with one declared GPU and --cores 1 (fabench.slots: two measuring slots for it): a
    launcher starts while the job before it measures, the GPU is held by one job at a time, and
    its leases follow the priorities (process 0 of each job, then process 1). The first two jobs
    start together (both slots free) and take it in the order they reach its lock: which of the
    two measures first is not the priorities'. Blind side: a real GPU's timing (examples/)."""
    env = {**lease_env(tmp_path, "0"), "FABENCH_WORKER_DIR": str(worker_dir)}
    env.pop("OMP_NUM_THREADS")  # as Snakemake sets it (0 for a job of no core)
    taken, logs = measure_jobs_run(tmp_path, env, "1", mode)
    assert [t["gpu"] for t in taken] == ["0"] * 4
    for before, after in zip(taken, taken[1:]):  # one holder at a time: taken once the one before had ended
        assert after["taken_at"] >= before["exited_at"], taken
    ready = [after for before, after in zip(taken, taken[1:]) if after["started_at"] < before["exited_at"]]
    assert len(ready) >= 2, taken  # started while the job before it measured
    assert {t["job"] for t in taken[:2]} == {(0, "b1-s64-h2-d32"), (0, "b1-s128-h2-d64")}, taken
    assert [t["job"] for t in taken[2:]] == [(1, "b1-s64-h2-d32"), (1, "b1-s128-h2-d64")], taken
    assert "ready: waiting for this workflow's job before it (GPU 0 by pid" in logs
    # Snakemake exported OMP_NUM_THREADS=0 to these jobs: libgomp, loaded with torch, would say so at
    # once, into the job's log from a measuring process (a worker's start-up log is gone with it).
    assert "Invalid value for environment variable" not in logs


@pytest.mark.slow
def test_on_a_cpu_host_no_launcher_starts_before_the_job_before_it_has_ended(tmp_path, worker_dir):
    """The same jobs on a CPU host under --cores 2: one at a time, each launcher after the end."""
    env = {**lease_env(tmp_path, "0"), "FABENCH_WORKER_DIR": str(worker_dir)}
    env.pop(devices.DECLARED_ENV)
    taken, _ = measure_jobs_run(tmp_path, env, "2")
    assert len(taken) == 4 and all(t["gpu"] is None for t in taken)
    for before, after in zip(taken, taken[1:]):
        assert after["started_at"] >= before["exited_at"], taken
