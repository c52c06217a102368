"""One GPU per timed job: a lease on a device, held while the job measures.

Snakemake's local executor counts `gpu` resources but assigns no device (snakemake issue #281), so
two concurrent jobs would both time on device 0. Before any process of a job touches a GPU, the
job's first fabench process (the runner, or the container launcher in the docker runtime) takes
a lease:

* Where a scheduler already chose (Slurm sets CUDA_VISIBLE_DEVICES and the like for a job that
  asked for a GPU), its choice is taken as it is: Slurm keeps jobs apart, and may number every
  job's GPU 0, so a lock by that name would serialise jobs on different GPUs. An allocation of
  several GPUs (a local run inside `salloc --gpus=N`) is leased among its GPUs, with locks named
  by the Slurm job, each set the way Slurm sets them.
* Otherwise a lock per GPU (fcntl.flock on ``<lease dir>/gpu-<id>.lock``, one directory for the
  whole host): the first free GPU of the pool (fabench.measure.launch.devices) is taken; when every GPU
  is held the job waits (taking one within milliseconds of its release: wait_for_gpu), saying who
  holds them, and never measures on a shared one. The kernel
  drops a flock when the last process holding its file closes, so a lease ends with its holders
  however they end (exit, exception, SIGKILL); the processes the job starts inherit the lock's
  file so that an orphaned measuring process still holds its GPU. Beside each lock a holder file
  names the holder; one left behind by a dead process is reported when its lock is taken over.
* On a host without GPUs nothing is leased (the job measures on the CPU) and the result says so.

The lease is passed to the job's processes in FABENCH_DEVICE_LEASE (JSON); a process that finds
it adopts it instead of taking another, and records it in its result.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fabench.files import write_json
from fabench.measure.launch.devices import DeviceError, Gpu, gpu_pool
from fabench.measure.visibility import LEASE_ENV, VISIBLE_VARS
from fabench.places import LEASE_DIR_ENV, lease_folder, lock_at_once, open_file, shared_dir
from fabench.watchdog import WORKFLOW_ENV

SCHEDULER_ENV = "SLURM_JOB_ID"
# Where Slurm names the GPUs it gave (the node's gres indices), before the visibility variables.
SCHEDULER_GPU_VARS = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", *VISIBLE_VARS)
REMIND_EVERY_S = 60.0
# How often the first job in line looks for a released GPU of a pool of several (one of one waits in
# the kernel's lock instead): a launcher started ahead of its job waits for nearly every lease.
POLL_S = 0.02
LINE_GRACE_S = 0.5  # a job queued behind the first in line says it waits once it has waited this long


@dataclass
class Lease:
    """The device a job measures on, how it got it, and what its processes must be given."""

    source: str  # "lease" (a lock of ours), "scheduler" (Slurm chose) or "none" (no GPU here)
    gpu: str | None
    visible_devices: dict[str, str | None]  # each visibility variable: its value, None = unset
    device_nodes: list[str] = field(default_factory=list)
    found_by: str | None = None
    waited_s: float = 0.0
    taken_at: float | None = None  # epoch seconds
    lock: str | None = None
    taken_over_from: int | None = None
    _fd: int | None = field(default=None, repr=False, compare=False)

    def record(self) -> dict:
        """What the result keeps (provenance.device_lease)."""
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        """`base` with this lease's visibility (set, or unset where None) and the lease itself."""
        env = {k: v for k, v in base.items() if k not in VISIBLE_VARS}
        env.update({k: v for k, v in self.visible_devices.items() if v is not None})
        env[LEASE_ENV] = json.dumps(self.record(), sort_keys=True)
        return env

    def inheritable_fds(self) -> tuple[int, ...]:
        """The lock's descriptor, for the job's processes: the GPU stays held while any lives."""
        return (self._fd,) if self._fd is not None else ()

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            holder_path(Path(self.lock)).unlink()
        os.close(self._fd)  # the flock goes with the last descriptor of its open file
        self._fd = None

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def acquire(env: dict[str, str] | None = None, say=print, poll_s: float = POLL_S) -> Lease:
    """The job's device: inherited, given by the scheduler, leased (waiting while all are held), or none."""
    env = dict(os.environ if env is None else env)
    if env.get(LEASE_ENV):
        return inherited(env[LEASE_ENV])
    if scheduler_chose(env):
        pool, found_by = scheduler_pool(env)
        if len(pool) == 1:
            return scheduler_given(env)
    else:
        pool, found_by = gpu_pool(env)
    if not pool:
        return Lease(source="none", gpu=None, visible_devices={v: env.get(v) for v in VISIBLE_VARS},
                     found_by=found_by)
    return wait_for_gpu(pool, found_by, lease_dir(env), say, poll_s, env.get(WORKFLOW_ENV))


def locked_pool_size(env: dict[str, str] | None = None) -> int:
    """How many GPUs `acquire` chooses among by its locks here, the pool it waits on (DeviceError as
    acquire); 0 where it locks none: an inherited lease, a scheduler's single GPU, no GPU."""
    env = dict(os.environ if env is None else env)
    if env.get(LEASE_ENV):
        return 0
    if scheduler_chose(env):
        pool = scheduler_pool(env)[0]
        return len(pool) if len(pool) > 1 else 0
    return len(gpu_pool(env)[0])


def sole_gpu(env: dict[str, str] | None = None) -> Lease | None:
    """The lease `acquire` will give when this host's pool is one GPU that no scheduler gave nor
    parent leased: its GPU and visibility, unheld (no lock is taken). None otherwise: which GPU of
    several a job gets is known only once one is free. A job's launcher starts its measuring worker
    for it before waiting for the lease (fabench.measure.launch.runner)."""
    env = dict(os.environ if env is None else env)
    if env.get(LEASE_ENV) or scheduler_chose(env):
        return None
    try:
        pool, found_by = gpu_pool(env)
    except DeviceError:
        return None
    if len(pool) != 1:
        return None
    return lease_of(pool[0], found_by)


def lease_of(gpu: Gpu, found_by: str, **held) -> Lease:
    """The lease of `gpu`: what a job's processes see of it; `held`, the lock's fields once taken."""
    return Lease(source="lease", gpu=gpu.id, visible_devices={v: gpu.visible.get(v) for v in VISIBLE_VARS},
                 device_nodes=list(gpu.device_nodes), found_by=found_by, **held)


def check_environment(env: dict[str, str] | None = None) -> None:
    """What acquire would refuse (DeviceError), checked before any job starts; locks nothing."""
    env = dict(os.environ if env is None else env)
    if not env.get(LEASE_ENV) and not scheduler_chose(env):
        gpu_pool(env)


def scheduler_chose(env: dict[str, str]) -> bool:
    return bool(env.get(SCHEDULER_ENV)) and any(env.get(var) is not None for var in VISIBLE_VARS)


def inherited(text: str) -> Lease:
    fields = json.loads(text)
    return Lease(**{k: v for k, v in fields.items() if not k.startswith("_")})


def scheduler_pool(env: dict[str, str]) -> tuple[list[Gpu], str]:
    """The GPUs of the scheduler's allocation, named by its job (they are no other job's)."""
    given = {var: env[var] for var in VISIBLE_VARS if env.get(var) is not None}
    values = [v.strip() for v in next(iter(given.values())).split(",") if v.strip()]
    job = env[SCHEDULER_ENV]
    pool = [Gpu(id=f"slurm{job}-{v}", visible=dict.fromkeys(given, v)) for v in values]
    return pool, f"Slurm job {job} ({', '.join(f'{k}={v}' for k, v in given.items())})"


def scheduler_given(env: dict[str, str]) -> Lease:
    gpu = next(env[var] for var in SCHEDULER_GPU_VARS if env.get(var) is not None)
    return Lease(source="scheduler", gpu=gpu, visible_devices={v: env.get(v) for v in VISIBLE_VARS},
                 found_by=f"Slurm job {env[SCHEDULER_ENV]}")


def lease_dir(env: dict[str, str]) -> Path:
    """The host-wide lock directory, open to every user (sticky, like /tmp): made, or accepted
    only when safe to share (fabench.places; PlaceError otherwise)."""
    return shared_dir(lease_folder(env), LEASE_DIR_ENV)


def lock_path(directory: Path, gpu: Gpu) -> Path:
    return directory / f"gpu-{gpu.id}.lock"


def holder_path(lock: Path) -> Path:
    return lock.with_suffix(".holder.json")


def wait_for_gpu(pool: list[Gpu], found_by: str, directory: Path, say, poll_s: float = POLL_S,
                 workflow: str | None = None) -> Lease:
    """Take the first free GPU of the pool; while none is free, wait and say who holds them.

    A workflow on a GPU host starts the next job's launcher while the job before it measures
    (fabench.slots), so a launcher waits for the lease on nearly every job, and its wait ends within
    milliseconds of the release: on a pool of one GPU in a blocking lock, which the kernel hands
    over at once; on several, the first launcher in line (the others queue on a lock of the pool's)
    tries each GPU's lock every POLL_S. `workflow`: the waiting job's (fabench.watchdog), to tell
    its own workflow's jobs before it from someone else's."""
    started = time.monotonic()
    reminder = Reminder(lambda: waiting_line(pool, directory, workflow), say)
    try:
        if len(pool) == 1:
            lease = try_lock(pool[0], directory, found_by, say, workflow)
            if lease is None:
                reminder.start()
                lease = try_lock(pool[0], directory, found_by, say, workflow, wait=True)
        else:
            with first_in_line(pool, directory, reminder):
                lease = first_released(pool, directory, found_by, say, workflow, reminder, poll_s)
    finally:
        reminder.stop()
    lease.waited_s = round(time.monotonic() - started, 3)
    lease.taken_at = time.time()
    return lease


def first_released(pool: list[Gpu], directory: Path, found_by: str, say, workflow: str | None,
                   reminder: "Reminder", poll_s: float) -> Lease:
    """The first GPU of the pool whose lock is free, each lock tried every `poll_s` on a descriptor
    opened once, so that a try costs little beside the sleep's own wake-up: waiting on two GPUs
    took 0.5-0.7% of a core on a 2-core VM, a loop that only sleeps 20 ms 0.4%."""
    fds = [open_lock(lock_path(directory, gpu)) for gpu in pool]
    taken = None
    try:
        while taken is None:
            taken = next((i for i, fd in enumerate(fds) if lock_at_once(fd)), None)
            if taken is None:
                reminder.start()
                time.sleep(poll_s)
    finally:
        for i, fd in enumerate(fds):
            if i != taken:
                os.close(fd)
    return held(pool[taken], fds[taken], directory, found_by, say, workflow)


@contextlib.contextmanager
def first_in_line(pool: list[Gpu], directory: Path, reminder: "Reminder"):
    """Held while this job is the one looking for a free GPU of the pool: the jobs waiting behind
    it block on the line's lock, spending nothing, and look once it has taken its GPU. One line per
    pool (named by its GPUs), shared by every workflow on the host that leases that pool."""
    ids = "\n".join(gpu.id for gpu in pool).encode()
    path = directory / f"line-{hashlib.sha256(ids).hexdigest()[:16]}.lock"
    fd = open_lock(path)
    try:
        if not lock_at_once(fd):
            # The one in line may be taking a free GPU this very moment: say so only if this lasts.
            reminder.start(delay_s=LINE_GRACE_S)
            fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_uid == os.getuid():
            os.fchmod(fd, 0o666)  # another user's jobs queue on it too
        yield
    finally:
        os.close(fd)  # the next in line wakes


class Reminder:
    """Who holds the GPUs, said once a job has to wait and every REMIND_EVERY_S after, from a thread:
    the wait itself may be a blocking lock."""

    def __init__(self, line, say):
        self.line, self.say = line, say
        self.done = threading.Event()
        self.said = threading.Lock()  # taken by the first saying
        self.thread: threading.Thread | None = None

    def start(self, delay_s: float = 0.0) -> None:
        """Say it now, or after `delay_s` unless the wait has ended by then; then every REMIND_EVERY_S."""
        if not delay_s:
            self.say_once()
        if self.thread is None:
            self.thread = threading.Thread(target=self.repeat, args=(delay_s,), name="fabench-lease-reminder",
                                           daemon=True)
            self.thread.start()

    def say_once(self) -> None:
        if self.said.acquire(blocking=False):
            self.say(self.line(), flush=True)

    def repeat(self, delay_s: float) -> None:
        if delay_s and not self.done.wait(delay_s):
            self.say_once()
        while not self.done.wait(REMIND_EVERY_S):
            self.say(self.line(), flush=True)

    def stop(self) -> None:
        self.done.set()


def waiting_line(pool: list[Gpu], directory: Path, workflow: str | None) -> str:
    """The waiting job's line: a launcher of this workflow started ahead waits for the jobs before it
    (nothing to act on); anyone else's holder is named with the lock directory."""
    held = [read_holder(lock_path(directory, gpu)) or {} for gpu in pool]
    if workflow and all(h.get("workflow") == workflow for h in held):
        return (f"[fabench] ready: waiting for this workflow's job{'s' if len(pool) > 1 else ''} before it "
                f"({holders(pool, directory)})")
    return f"[fabench] waiting for a GPU: all {len(pool)} held ({holders(pool, directory)}); lock directory {directory}"


def try_lock(gpu: Gpu, directory: Path, found_by: str, say, workflow: str | None = None,
             wait: bool = False) -> Lease | None:
    """The GPU's lease when its lock is free (None otherwise), or once it is, with `wait`."""
    fd = open_lock(lock_path(directory, gpu))
    if wait:
        fcntl.flock(fd, fcntl.LOCK_EX)
    elif not lock_at_once(fd):
        os.close(fd)
        return None
    return held(gpu, fd, directory, found_by, say, workflow)


def open_lock(path: Path) -> int:
    return open_file(path, os.O_RDWR | os.O_CREAT, LEASE_DIR_ENV, 0o666)  # never through a planted link


def held(gpu: Gpu, fd: int, directory: Path, found_by: str, say, workflow: str | None) -> Lease:
    """The lease of `gpu`, whose lock `fd` holds: its holder file written for those waiting."""
    path = lock_path(directory, gpu)
    if os.fstat(fd).st_uid == os.getuid():
        os.fchmod(fd, 0o666)  # another user's jobs lock it too (the umask may have narrowed it)
    stale = read_holder(path)
    if stale and stale.get("host") == socket.gethostname():
        say(f"[fabench] GPU {gpu.id}: taking over the lease left by pid {stale.get('pid')}, "
            f"which is gone", flush=True)
    # Who holds it, for the messages of those waiting. Only informative: where another user's holder
    # file cannot be replaced (the sticky directory), the lease holds all the same.
    with contextlib.suppress(OSError):
        write_json(holder_path(path), {"pid": os.getpid(), "host": socket.gethostname(), "gpu": gpu.id,
                                       "since": time.time(), "command": sys.argv, "workflow": workflow})
    return lease_of(gpu, found_by, lock=str(path), taken_over_from=stale.get("pid") if stale else None, _fd=fd)


def read_holder(lock: Path) -> dict | None:
    """Who holds the lock, as its holder wrote; None where unreadable (or not a regular file)."""
    try:
        fd = open_file(holder_path(lock), os.O_RDONLY, LEASE_DIR_ENV)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            return json.loads(handle.read(65536))
    except (OSError, ValueError):
        return None


def holders(pool: list[Gpu], directory: Path) -> str:
    parts = []
    for gpu in pool:
        holder = read_holder(lock_path(directory, gpu)) or {}
        parts.append(f"GPU {gpu.id} by pid {holder.get('pid', '?')}")
    return ", ".join(parts)
