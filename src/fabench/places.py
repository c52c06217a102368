"""Folders outside the project that fabench writes in, checked as ssh checks its own files.

- The measuring workers' folder (FABENCH_WORKER_DIR, else $XDG_RUNTIME_DIR/fabench-workers, else
  /tmp/fabench-workers-<uid>): private. Used only when it is a real folder (not a link) owned by
  this user and writable by nobody else: anyone else who could create it first, or write in it,
  could plant a link at a worker's record or log name, or a socket that answers as a worker.
- The GPU lease folder (FABENCH_LEASE_DIR, else /tmp/fabench-gpu-leases): shared by every user of
  the host, like /tmp. Used when it is a real folder either private to its owner (this user or
  root) or, when others may write in it, sticky (only a file's owner may remove or rename it).

- A measuring process's own temporary folder (aiter's configs: `process_scratch`): named by the
  process (its PID namespace, PID and start time), removed by the process at its end, and, when it
  was killed first, by the next measuring process of this user or by its launcher
  (`remove_orphaned_scratch`): a folder whose process no longer runs is removed, none other.

Files inside are opened without following links (O_NOFOLLOW) and must be regular files.
`check_env_places` says what is wrong before any job starts (the plan calls it); `private_dir`
and `shared_dir` make or accept the folder at run time, or raise PlaceError, one line naming the
variable and the fix.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path

WORKER_DIR_ENV = "FABENCH_WORKER_DIR"
LEASE_DIR_ENV = "FABENCH_LEASE_DIR"
DEFAULT_LEASE_DIR = "/tmp/fabench-gpu-leases"  # host-wide: every user's and workflow's jobs meet here
# A worker's socket is <folder>/w-<24 hex digits>.sock; a unix socket's path holds at most 107 bytes.
SOCKET_NAME_BYTES = len("/w-.sock") + 24
AF_UNIX_PATH_MAX = 107


SCRATCH_PREFIX = "fabench-aiter-configs-"


class PlaceError(OSError):
    """A folder or file fabench may not use: the message names the variable and the fix."""


def worker_folder(env) -> Path:
    """This user's folder of workers: FABENCH_WORKER_DIR, else under XDG_RUNTIME_DIR, else /tmp.
    Short on purpose: a unix socket's path holds at most 107 bytes."""
    if env.get(WORKER_DIR_ENV):
        return Path(env[WORKER_DIR_ENV])
    base = env.get("XDG_RUNTIME_DIR")
    return Path(f"{base}/fabench-workers" if base else f"/tmp/fabench-workers-{os.getuid()}")


def lease_folder(env) -> Path:
    return Path(env.get(LEASE_DIR_ENV) or DEFAULT_LEASE_DIR)


def check_env_places(environ) -> list[str]:
    """Every problem with the folders the environment names (or the defaults), one line each;
    creates nothing."""
    problems = [
        _would_be(worker_folder(environ), WORKER_DIR_ENV, shared=False),
        _would_be(lease_folder(environ), LEASE_DIR_ENV, shared=True),
    ]
    folder = worker_folder(environ)
    if len(os.fsencode(folder)) + SOCKET_NAME_BYTES > AF_UNIX_PATH_MAX:
        problems.append(f"{WORKER_DIR_ENV}: {str(folder)[:60]}... is too long for a worker's socket (at most "
                        f"{AF_UNIX_PATH_MAX - SOCKET_NAME_BYTES} bytes); set {WORKER_DIR_ENV} to a shorter path")
    return [problem for problem in problems if problem]


def private_dir(path: Path, variable: str) -> Path:
    """`path`, made (mode 0700) when missing, once it is a folder of this user's alone."""
    return _made(Path(path), variable, shared=False)


def shared_dir(path: Path, variable: str) -> Path:
    """`path`, made (sticky, open to every user, like /tmp) when missing, once it is safe to share."""
    return _made(Path(path), variable, shared=True)


def open_file(path: Path, flags: int, variable: str, mode: int = 0o600) -> int:
    """A descriptor of the regular file `path`, never through a link (a planted link is refused)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as err:
        if err.errno == errno.ELOOP:  # the name is a link
            raise PlaceError(f"{variable}: {path} is a symbolic link (planted by someone else?); remove it, "
                             f"or set {variable} to a folder of your own") from None
        if err.errno == errno.ENXIO:  # a FIFO or socket no one reads: no regular file either
            raise _not_regular(path, variable) from None
        raise PlaceError(f"{variable}: {path} cannot be opened ({err.strerror}); set {variable} to a folder "
                         "you can write") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _not_regular(path, variable)
    os.set_blocking(fd, True)
    return fd


def lock_at_once(fd: int) -> bool:
    """The exclusive lock (flock) of an open file, taken when no one else holds it: True; False when
    another holder has it, without waiting. The kernel drops the lock when the last descriptor of
    its open file closes, however its holder ends."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _not_regular(path: Path, variable: str) -> PlaceError:
    return PlaceError(f"{variable}: {path} is not a regular file; remove it, or set {variable} to a folder of your own")


def _made(path: Path, variable: str, shared: bool) -> Path:
    problem = _would_be(path, variable, shared)
    if problem:
        raise PlaceError(problem)
    if not os.path.lexists(path):
        try:
            path.mkdir(mode=0o700, parents=True)
        except FileExistsError:
            pass  # made by another job at the same moment: checked below like any folder found
        except OSError as err:
            raise PlaceError(f"{variable}: {path} cannot be made ({err.strerror}); set {variable} to a folder "
                             f"you can write") from None
        if shared:
            try:
                path.chmod(0o1777)
            except PermissionError:
                pass
    problem = _problem(path, variable, shared)
    if problem:
        raise PlaceError(problem)
    return path


def _would_be(path: Path, variable: str, shared: bool) -> str | None:
    """The problem of the folder at `path`, or, where there is none yet, of making it there."""
    if os.path.lexists(path):
        return _problem(path, variable, shared)
    parent = next((p for p in path.parents if os.path.lexists(p)), Path("/"))
    if not parent.is_dir():
        return f"{variable}: {parent} is not a folder, so {path} cannot be made; set {variable} to a folder you can write"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{variable}: {path} cannot be made ({parent} is not writable); set {variable} to a folder you can write"
    return None


def _problem(path: Path, variable: str, shared: bool) -> str | None:
    """Why the existing `path` may not be used, or None."""
    fix = f"set {variable} to a folder of your own (mode 0700)" if not shared else \
        f"set {variable} to a folder root made for every user (mode 1777)"
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        target = "a missing target" if not path.exists() else os.readlink(path)
        return f"{variable}: {path} is a symbolic link (to {target}), which fabench does not follow; {fix}"
    if not stat.S_ISDIR(info.st_mode):
        return f"{variable}: {path} is not a folder; remove it or {fix}"
    if os.statvfs(path).f_flag & os.ST_RDONLY:
        return f"{variable}: {path} is on a read-only file system; set {variable} to a folder you can write"
    # A shared folder may be another's with lock files made for all; a private one is written here.
    if not shared and not os.access(path, os.W_OK | os.X_OK):
        return f"{variable}: {path} is not writable by you; set {variable} to a folder you can write"
    mine = info.st_uid == os.getuid()
    others_write = info.st_mode & 0o022
    if not shared:
        if not mine:
            return f"{variable}: {path} is owned by uid {info.st_uid}, not by you (uid {os.getuid()}); {fix}"
        if others_write:
            return (f"{variable}: {path} is writable by others (mode {stat.S_IMODE(info.st_mode):04o}); "
                    f"run chmod 700 {path}, or {fix}")
        return None
    if others_write and not info.st_mode & stat.S_ISVTX:
        return (f"{variable}: {path} is writable by others without the sticky bit (mode "
                f"{stat.S_IMODE(info.st_mode):04o}), so anyone may replace its locks; {fix}")
    if not others_write and not mine and info.st_uid != 0:
        return f"{variable}: {path} is private to uid {info.st_uid}; {fix}"
    return None


# ---------------------------------------------------------------- a measuring process's temporary folder

def process_scratch(prefix: str = SCRATCH_PREFIX) -> str:
    """A new temporary folder of this process, named `prefix`<pid namespace>-<pid>-<start time>-...,
    made after removing those of this user's processes that have ended (killed before they could
    remove their own). Where /proc does not tell a process's start, a plain temporary folder."""
    remove_orphaned_scratch(prefix=prefix)
    tag = _process_tag(os.getpid())
    return tempfile.mkdtemp(prefix=f"{prefix}{tag}-" if tag else prefix)


def remove_orphaned_scratch(ended_pid: int | None = None, prefix: str = SCRATCH_PREFIX,
                            wait_s: float = 5.0) -> list[Path]:
    """Remove the temporary folders (process_scratch) of this user's processes that no longer run,
    in this PID namespace; the folders removed. `ended_pid`: a process just killed (a measuring
    worker, which is not the caller's child), waited for up to `wait_s` until the kill has landed."""
    if ended_pid is not None:
        deadline = time.monotonic() + wait_s
        while _start_time(ended_pid) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
    namespace = _pid_namespace()
    if namespace is None:
        return []
    pattern = re.compile(re.escape(prefix) + r"(\d+)-(\d+)-(\d+)-[^/]+")
    removed = []
    for path in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        match = pattern.fullmatch(path.name)
        if not match or match.group(1) != namespace:
            continue  # a folder of another namespace (a container sharing /tmp) or of an older fabench
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            continue  # another user's, or a link: never followed, never removed
        if _start_time(int(match.group(2))) == match.group(3):
            continue  # its process still runs
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _pid_namespace() -> str | None:
    try:
        return re.sub(r"\D", "", os.readlink("/proc/self/ns/pid")) or None
    except OSError:
        return None


def _process_tag(pid: int) -> str | None:
    namespace, start = _pid_namespace(), _start_time(pid)
    return f"{namespace}-{pid}-{start}" if namespace and start else None


def _start_time(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, /proc/<pid>/stat's 22nd field), None when
    it does not run (gone, or a zombie: killed, not yet reaped). With the PID it names one process,
    whatever PID is given to another later."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()  # after the command's name, which may hold spaces
    return None if fields[0] in ("Z", "X") else fields[19]
