"""Shared places checked as ssh checks its own (fabench.places): the measuring workers' folder must
be this user's alone, the lease folder safe to share, and no file in either is written through a
link. Each class of bad place gives one line naming the variable and the fix, both before any job
(check_env_places) and at run time (the worker client and the lease refuse it)."""

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from fabench import places
from fabench.measure.launch import lease as device_lease
from fabench.measure.launch import worker_client
from fabench.measure.spec import job_spec
from fabench.places import LEASE_DIR_ENV, WORKER_DIR_ENV, PlaceError, check_env_places
from fabench.shapes import parse_shape_id
from workflow_util import REPO, tiny_config

NOBODY = 65534


@pytest.fixture
def short():
    """A folder with a short path (pytest's tmp_path is too long for a worker's socket)."""
    folder = Path(tempfile.mkdtemp(prefix="pl-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
as_root = pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")


def bad_folder(kind: str, base: Path) -> Path:
    """A folder of each bad kind at base/<kind>."""
    path = base / kind
    if kind == "other_owner":
        path.mkdir(mode=0o700)
        os.chown(path, NOBODY, NOBODY)
    elif kind == "writable_by_all":
        path.mkdir()
        path.chmod(0o777)
    elif kind == "symlink":
        (base / "real").mkdir(mode=0o700)
        path.symlink_to(base / "real")
    elif kind == "dangling":
        path.symlink_to(base / "nowhere")
    elif kind == "file":
        path.write_text("")
    elif kind == "under_a_file":
        (base / "plain").write_text("")
        path = base / "plain" / "workers"
    return path


KINDS = {
    "other_owner": "is owned by uid 65534, not by you",
    "writable_by_all": "is writable by others (mode 0777)",
    "symlink": "is a symbolic link (to ",
    "dangling": "is a symbolic link (to a missing target)",
    "file": "is not a folder",
    "under_a_file": "is not a folder, so",
}


@pytest.mark.parametrize("kind", [pytest.param(k, marks=as_root) if k == "other_owner" else k for k in KINDS])
def test_a_workers_folder_that_is_not_the_users_alone_is_refused_before_and_at_run_time(short, kind):
    folder = bad_folder(kind, short)
    env = {WORKER_DIR_ENV: str(folder), LEASE_DIR_ENV: str(short / "leases")}
    [problem] = check_env_places(env)
    assert problem.startswith(f"{WORKER_DIR_ENV}: ") and KINDS[kind] in problem and str(folder) in problem
    assert f"set {WORKER_DIR_ENV} to" in problem
    with pytest.raises(PlaceError) as caught:
        worker_client.runtime_folder(env)
    assert str(caught.value) == problem
    assert worker_client.stop_workers(env=env) == []  # the workflow's end does not fail on it


@pytest.mark.parametrize("kind", ["writable_by_all", "symlink", "dangling", "file", "under_a_file"])
def test_a_lease_folder_unsafe_to_share_is_refused_before_and_at_run_time(short, kind):
    folder = bad_folder(kind, short)
    env = {WORKER_DIR_ENV: str(short / "w"), LEASE_DIR_ENV: str(folder)}
    [problem] = check_env_places(env)
    assert problem.startswith(f"{LEASE_DIR_ENV}: ") and str(folder) in problem and f"set {LEASE_DIR_ENV} to" in problem
    with pytest.raises(PlaceError, match="^" + LEASE_DIR_ENV):
        device_lease.lease_dir(env)


@as_root
def test_a_sticky_lease_folder_of_another_user_is_shared_as_tmp_is(short):
    folder = short / "leases"
    folder.mkdir()
    folder.chmod(0o1777)
    os.chown(folder, NOBODY, NOBODY)
    assert check_env_places({WORKER_DIR_ENV: str(short / "w"), LEASE_DIR_ENV: str(folder)}) == []
    assert device_lease.lease_dir({LEASE_DIR_ENV: str(folder)}) == folder


def test_folders_made_here_are_private_and_shared_as_meant(short):
    workers = places.private_dir(short / "a" / "workers", WORKER_DIR_ENV)
    leases = places.shared_dir(short / "leases", LEASE_DIR_ENV)
    assert stat.S_IMODE(workers.stat().st_mode) == 0o700
    assert stat.S_IMODE(leases.stat().st_mode) == 0o1777
    assert check_env_places({WORKER_DIR_ENV: str(workers), LEASE_DIR_ENV: str(leases)}) == []


def test_a_workers_folder_too_long_for_a_socket_is_named(tmp_path):
    folder = tmp_path / ("x" * 100)
    [problem] = check_env_places({WORKER_DIR_ENV: str(folder), LEASE_DIR_ENV: str(tmp_path / "l")})
    assert problem.startswith(f"{WORKER_DIR_ENV}: ") and "too long for a worker's socket" in problem
    assert len(os.fsencode(folder)) + places.SOCKET_NAME_BYTES > 107
    # what the check guards against: the socket's bind itself fails
    with pytest.raises(OSError), socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(folder / ("w-" + "0" * 24 + ".sock")))


@pytest.mark.parametrize("planted", ["link", "dangling_link", "fifo"])
def test_a_file_planted_at_a_log_or_lock_name_is_refused_not_followed(tmp_path, planted):
    victim = tmp_path / "victim"
    victim.write_text("mine")
    victim.chmod(0o600)
    folder = places.private_dir(tmp_path / "w", WORKER_DIR_ENV)
    where = worker_client.Address("w-test", folder)
    for name in (where.log, where.lock):
        if planted == "link":
            name.symlink_to(victim)
        elif planted == "dangling_link":
            name.symlink_to(tmp_path / "created-by-following")
        else:
            os.mkfifo(name)
        with pytest.raises(PlaceError, match=f"^{WORKER_DIR_ENV}: {name} is "):
            places.open_file(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, WORKER_DIR_ENV)
    assert victim.read_text() == "mine" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert not (tmp_path / "created-by-following").exists()


def test_a_link_planted_at_a_gpu_lock_never_changes_its_target(tmp_path):
    """The lease opened each lock following links, then made it writable by all (fchmod 0666)."""
    victim = tmp_path / "victim"
    victim.write_text("mine")
    victim.chmod(0o600)
    folder = places.shared_dir(tmp_path / "leases", LEASE_DIR_ENV)
    gpu = device_lease.Gpu(id="0", visible={"CUDA_VISIBLE_DEVICES": "0"})
    device_lease.lock_path(folder, gpu).symlink_to(victim)
    with pytest.raises(PlaceError, match="is a symbolic link"):
        device_lease.try_lock(gpu, folder, "test", print)
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600


def read_only_mount_works() -> bool:
    """Whether this host lets an unprivileged user namespace bind-mount a folder read-only."""
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                            "mount --bind /tmp /tmp && mount -o remount,ro,bind /tmp /tmp"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(shutil.which("unshare") is None or not read_only_mount_works(),
                    reason="needs user namespaces to mount a folder read-only without root")
def test_a_workers_folder_on_a_read_only_file_system_is_one_line_naming_the_variable(short):
    """A real read-only file system (a bind mount made read-only in a user namespace of its own):
    the plan's check and a job in worker mode each say so in one line naming FABENCH_WORKER_DIR,
    no OSError traceback. Blind side: a folder read-only by its mode is not tried (root here writes
    anyway)."""
    short.chmod(0o700)
    spec = job_spec(tiny_config(), "tuned", parse_shape_id("b1-s64-h2-d32"), platform="cpu")
    read_only = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                 f'mount --bind {short} {short} && mount -o remount,ro,bind {short} {short} && exec "$@"', "sh"]
    env = {**os.environ, WORKER_DIR_ENV: str(short),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    expected = f"{WORKER_DIR_ENV}: {short} is on a read-only file system; set {WORKER_DIR_ENV} to a folder you can write"
    plan = subprocess.run([*read_only, sys.executable, "-c", "import os; from fabench.places import check_env_places; "
                           "print(check_env_places(os.environ))"], capture_output=True, text=True, env=env)
    assert plan.stdout.strip() == repr([expected]), plan.stderr
    job = subprocess.run([*read_only, sys.executable, "-m", "fabench.measure", "--spec", spec.to_json(), "--out",
                          str(short / "process-0.json"), "--process", "0", "--mode", "worker", "--worker-idle-s", "5"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert job.returncode == 1 and "Traceback" not in job.stdout + job.stderr, job.stderr
    assert job.stderr.strip().splitlines()[-1] == f"[fabench] job failed: tuned b1-s64-h2-d32 process 0: {expected}"


def test_the_next_measuring_process_removes_the_folders_of_ended_ones_only(tmp_path, monkeypatch):
    """A measuring process killed with its launcher leaves its folder; the next process_scratch
    (the next measuring process) removes it: a real process's, started and killed here. A live
    process's folder, another user's, a link and an older fabench's folder stay."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    tempfile.tempdir = None  # read TMPDIR again
    try:
        child = subprocess.Popen([sys.executable, "-c", "from fabench.places import process_scratch; "
                                  "print(process_scratch(), flush=True); import time; time.sleep(60)"],
                                 stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
        killed = Path(child.stdout.readline().strip())
        live_child = subprocess.Popen([sys.executable, "-c", "from fabench.places import process_scratch; "
                                       "print(process_scratch(), flush=True); import time; time.sleep(60)"],
                                      stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
        live = Path(live_child.stdout.readline().strip())
        child.kill()
        child.wait()
        others = tmp_path / f"{places.SCRATCH_PREFIX}{killed.name.split('-')[3]}-1-1-x"  # no such process
        others.mkdir()
        if os.getuid() == 0:
            os.chown(others, NOBODY, NOBODY)
        older = tmp_path / f"{places.SCRATCH_PREFIX}abc123"
        older.mkdir()
        link = tmp_path / f"{places.SCRATCH_PREFIX}{killed.name.split('-')[3]}-2-2-y"
        link.symlink_to(tmp_path)
        assert killed.is_dir() and live.is_dir()
        mine = Path(places.process_scratch())
        assert not killed.exists()
        assert live.is_dir() and older.is_dir() and link.is_symlink() and mine.is_dir()
        assert others.is_dir() or os.getuid() != 0  # another user's, kept (only root can make one here)
        live_child.kill()
        live_child.wait()
    finally:
        tempfile.tempdir = None
