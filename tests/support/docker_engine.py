"""Start and stop a private Docker engine (dockerd) for tests and CI.

The machines this project is developed and tested on have Debian's ``docker.io`` but no
service manager, no registry and no usable bridge network.  This module starts ``dockerd``
by hand with everything it needs in its own directories:

* ``--storage-driver=overlay2``, no iptables/ip6tables/ip-masq rules, ``--bridge=none``
  (builds and containers then use ``network_mode=host``);
* its own ``--data-root`` (images, kept between sessions so built images are reused),
  ``--exec-root``, ``--pidfile`` and a unix socket given with ``-H``.

``stop()`` ends the daemon by the pid it was started with (never by name), waits for it, and
then unmounts whatever it left mounted under its directories (``<exec-root>/netns/default``
at least).

Command line (used by CI)::

    python -m support.docker_engine start [--state-dir DIR] [--data-root DIR]
        -> prints ``export DOCKER_HOST=unix://...`` once the engine answers
    python -m support.docker_engine stop [--state-dir DIR]
    python -m support.docker_engine status [--state-dir DIR]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from fabench.files import write_json

# Paths are kept short on purpose: unix socket paths are limited to 107 bytes and containerd
# puts its own sockets under the exec root.
DEFAULT_STATE_DIR = Path(os.environ.get("FABENCH_DOCKER_STATE", "/tmp/fabench-dockerd"))
DEFAULT_DATA_ROOT = Path(os.environ.get("FABENCH_DOCKER_DATA_ROOT", "/var/lib/fabench-docker"))


class EngineError(RuntimeError):
    """The engine could not be started or reached."""


def ping(docker_host: str, timeout: float = 5.0) -> bool:
    """True when a Docker engine answers at ``docker_host`` (e.g. ``unix:///path/docker.sock``)."""
    try:
        import docker  # noqa: F401  (lazily: the package is optional outside the workflow)
    except ImportError:
        return False
    try:
        client = docker.DockerClient(base_url=docker_host, timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def can_start_engine() -> tuple[bool, str]:
    """Whether this process could start its own dockerd, and if not, why not."""
    if shutil.which("dockerd") is None:
        return False, "dockerd is not installed (Debian: apt-get install docker.io)"
    if os.geteuid() != 0:
        return False, "starting dockerd needs root"
    try:
        import docker  # noqa: F401
    except ImportError:
        return False, "the docker Python SDK is not installed (pip install docker)"
    return True, ""


def _mounts_under(*roots: Path) -> list[str]:
    """Mount points below any of ``roots``, deepest first (from /proc/self/mountinfo)."""
    prefixes = [str(r.resolve()) for r in roots]
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        parts = line.split()
        if len(parts) < 5:
            continue
        # mountinfo escapes blanks etc. as octal (\040)
        point = parts[4].encode().decode("unicode_escape")
        if any(point == p or point.startswith(p + "/") for p in prefixes):
            found.append(point)
    return sorted(set(found), key=lambda p: p.count("/"), reverse=True)


def unmount_under(*roots: Path) -> list[str]:
    """Unmount everything mounted below ``roots``; returns what could not be unmounted."""
    left = []
    for point in _mounts_under(*roots):
        r = subprocess.run(["umount", point], capture_output=True, text=True)
        if r.returncode != 0:
            r = subprocess.run(["umount", "-l", point], capture_output=True, text=True)
            if r.returncode != 0:
                left.append(f"{point}: {r.stderr.strip()}")
    return left


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie still "exists": look at its state
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@dataclass
class DockerEngine:
    """A dockerd owned by this process (or by a CI job, through the state directory).

    ``state_dir`` holds the exec root, the socket, the pid file, the log and a lock;
    ``data_root`` holds images and is kept between runs so that images are reused.  Only one
    engine may use a data root at a time: it is locked while the engine runs.
    """

    state_dir: Path = DEFAULT_STATE_DIR
    data_root: Path = DEFAULT_DATA_ROOT
    dockerd: str = "dockerd"
    extra_args: list[str] = field(default_factory=list)
    _proc: subprocess.Popen | None = field(default=None, init=False, repr=False)
    _lock_fd: int | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.state_dir = Path(self.state_dir)
        self.data_root = Path(self.data_root)

    # -- paths ---------------------------------------------------------------------------
    @property
    def exec_root(self) -> Path:
        return self.state_dir / "exec"

    @property
    def socket(self) -> Path:
        return self.state_dir / "docker.sock"

    @property
    def pidfile(self) -> Path:
        return self.state_dir / "dockerd.pid"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "dockerd.log"

    @property
    def info_path(self) -> Path:
        return self.state_dir / "engine.json"

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket}"

    def command(self) -> list[str]:
        return [
            self.dockerd,
            "--storage-driver=overlay2",
            "--iptables=false",
            "--ip6tables=false",
            "--ip-masq=false",
            "--bridge=none",
            f"--data-root={self.data_root}",
            f"--exec-root={self.exec_root}",
            f"--pidfile={self.pidfile}",
            "-H", self.docker_host,
            *self.extra_args,
        ]

    # -- life cycle ----------------------------------------------------------------------
    def pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None

    def running(self) -> bool:
        pid = self.pid()
        return pid is not None and _pid_alive(pid) and ping(self.docker_host)

    def _take_lock(self) -> None:
        self.data_root.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.data_root.with_name(self.data_root.name + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise EngineError(
                f"data root {self.data_root} is in use by another engine (lock {lock_path}); "
                "stop it or pass another data root"
            ) from None
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def start(self, timeout: float = 90.0) -> str:
        """Start dockerd and wait until it answers; returns DOCKER_HOST.

        The lock on the data root is held by this process while it lives; a CI job that
        starts the engine from one command and stops it from another relies on the pid file
        instead (``detach=True`` in :func:`main`).
        """
        ok, why = can_start_engine()
        if not ok:
            raise EngineError(why)
        if self.pid() is not None and _pid_alive(self.pid()):
            raise EngineError(f"a dockerd (pid {self.pid()}) already runs with {self.pidfile}")
        self._take_lock()
        self._prepare_dirs()
        t0 = time.monotonic()
        self._proc = self._spawn()
        self._wait_until_it_answers(t0, timeout)
        self.started_in_s = time.monotonic() - t0
        self._write_info()
        return self.docker_host

    def _prepare_dirs(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.data_root.mkdir(parents=True, exist_ok=True)
        # leftovers of an engine that was killed: stale socket / pid file / mounts
        unmount_under(self.exec_root)
        for stale in (self.socket, self.pidfile):
            stale.unlink(missing_ok=True)

    def _spawn(self) -> subprocess.Popen:
        with open(self.log_path, "ab") as log:
            return subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # not killed by a Ctrl-C meant for the caller
                # dockerd inherits the locked descriptor: the data root stays locked for as
                # long as the daemon lives, even after a detaching `start` command exits.
                pass_fds=(self._lock_fd,),
            )

    def _wait_until_it_answers(self, t0: float, timeout: float) -> None:
        """Poll the socket until the engine answers; on an early exit or a timeout, clean up and raise."""
        while True:
            if self._proc.poll() is not None:
                self._release_lock()
                raise EngineError(
                    f"dockerd exited with {self._proc.returncode} while starting:\n" + self.log_tail()
                )
            if self.socket.exists() and ping(self.docker_host, timeout=2):
                return
            if time.monotonic() - t0 > timeout:
                self.stop()
                raise EngineError(f"dockerd did not answer within {timeout:.0f} s:\n" + self.log_tail())
            time.sleep(0.2)

    def _write_info(self) -> None:
        write_json(self.info_path, {
            "pid": self._proc.pid, "docker_host": self.docker_host,
            "data_root": str(self.data_root), "exec_root": str(self.exec_root),
            "started_in_s": round(self.started_in_s, 2),
        })

    def stop(self, timeout: float = 30.0) -> list[str]:
        """Stop dockerd by its pid, then unmount what it left; returns mounts still left."""
        pid = self._proc.pid if self._proc is not None else self.pid()
        if pid is not None and _pid_alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while _pid_alive(pid) and time.monotonic() < deadline:
                if self._proc is not None:
                    try:
                        self._proc.wait(timeout=0.2)
                    except subprocess.TimeoutExpired:
                        pass
                else:
                    time.sleep(0.2)
            if _pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
                if self._proc is not None:
                    self._proc.wait()
                else:
                    while _pid_alive(pid):
                        time.sleep(0.1)
        if self._proc is not None:
            self._proc.wait()  # reap our child: a dead one stays a zombie until its parent waits
        self._proc = None
        left = unmount_under(self.exec_root, self.data_root)
        for f in (self.socket, self.pidfile, self.info_path):
            f.unlink(missing_ok=True)
        self._release_lock()
        return left

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def __enter__(self) -> "DockerEngine":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m support.docker_engine", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("start", "stop", "status"):
        s = sub.add_parser(name)
        s.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
        s.add_argument("--data-root", type=Path, default=DEFAULT_DATA_ROOT)
        if name == "start":
            s.add_argument("--timeout", type=float, default=90.0)
    a = p.parse_args(argv)
    eng = DockerEngine(state_dir=a.state_dir, data_root=a.data_root)
    if a.cmd == "start":
        try:
            host = eng.start(timeout=a.timeout)
        except EngineError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        # The daemon outlives this command; the lock is released with this process, the
        # pid file marks the engine as running for a later `stop`.
        print(f"export DOCKER_HOST={host}")
        print(f"# dockerd pid {eng.pid()}, answered after {eng.started_in_s:.1f} s", file=sys.stderr)
        return 0
    if a.cmd == "stop":
        left = eng.stop()
        for m in left:
            print(f"warning: still mounted: {m}", file=sys.stderr)
        return 1 if left else 0
    print(json.dumps({"running": eng.running(), "pid": eng.pid(), "docker_host": eng.docker_host}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
