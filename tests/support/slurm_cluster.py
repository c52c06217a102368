"""A real single-node Slurm cluster on this machine, for tests: munged, slurmctld and slurmd.

Debian bookworm's slurmctld, slurmd, slurm-client and munge (Slurm 22.05). Everything lives in one
state directory (configuration, munge key and socket, spool, logs) and uses free ports, so it
touches no system-wide Slurm or munge. Two GPUs are declared as gres on character devices made
with mknod in that directory (Slurm drops a GPU without a device file, and drains the node):
a job asking for one gets CUDA_VISIBLE_DEVICES from Slurm, which is what the tests look at.

The configuration is also written to Slurm's default path, /etc/slurm/slurm.conf, as every node of a
real cluster has it: the Slurm executor plugin's job step drops SLURM_* variables, SLURM_CONF
included, before its inner srun. A file already there is never touched (the cluster refuses to
start); the one written here is removed on stop.

Started daemons are stopped by their pids, never by name.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "srun", "scontrol", "scancel")
GPUS = 2
DEFAULT_CONF = Path("/etc/slurm/slurm.conf")


def missing_binaries() -> list[str]:
    return [name for name in BINARIES if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmError(RuntimeError):
    pass


class SlurmCluster:
    def __init__(self, state_dir: Path):
        self.dir = Path(state_dir)
        self.node = socket.gethostname().split(".")[0]
        self.conf = self.dir / "slurm.conf"
        self.munge_socket = self.dir / "munge" / "munge.socket"
        self.processes: dict[str, subprocess.Popen] = {}
        self.wrote_default_conf = False

    @property
    def env(self) -> dict[str, str]:
        """What a client (sbatch, squeue, the executor plugin) needs to reach this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def start(self, timeout: float = 60) -> None:
        if os.geteuid() != 0:
            raise SlurmError("needs root (slurmd runs jobs as their users, munged's key)")
        try:
            self._write_files()
            self._start("munged", [_binary("munged"), "--foreground", "--force",
                                   f"--socket={self.munge_socket}", f"--key-file={self.dir / 'munge' / 'munge.key'}",
                                   f"--pid-file={self.dir / 'munge' / 'munged.pid'}",
                                   f"--log-file={self.dir / 'munge' / 'munged.log'}",
                                   f"--seed-file={self.dir / 'munge' / 'munged.seed'}"])
            self._wait(lambda: self.munge_socket.exists(), timeout, "munged's socket")
            self._start("slurmctld", [_binary("slurmctld"), "-D", "-i", "-f", str(self.conf)])
            self._start("slurmd", [_binary("slurmd"), "-D", "-N", self.node, "-f", str(self.conf)])
            self._wait(self._node_idle, timeout, f"node {self.node} to be idle")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM to each daemon this object started, by pid, in reverse order; SIGKILL after 15 s."""
        for name, proc in reversed(list(self.processes.items())):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.processes.clear()
        if self.wrote_default_conf and DEFAULT_CONF.is_file() and DEFAULT_CONF.read_text() == self.conf.read_text():
            DEFAULT_CONF.unlink()
        self.wrote_default_conf = False

    def jobs(self) -> list[dict]:
        """Every job the controller still knows (finished ones for MinJobAge), as scontrol's fields."""
        proc = self._client("scontrol", "show", "job", "--oneliner")
        if "No jobs in the system" in proc.stdout:
            return []
        return [dict(f.split("=", 1) for f in line.split() if "=" in f) for line in proc.stdout.splitlines() if line]

    def cancel_jobs(self) -> None:
        """Jobs still queued or running on this cluster are cancelled (through Slurm: its own ids)."""
        ids = [job["JobId"] for job in self.jobs() if job.get("JobState") in ("PENDING", "RUNNING", "CONFIGURING")]
        if ids:
            self._client("scancel", *ids)
            self._wait(lambda: not any(j.get("JobState") in ("PENDING", "RUNNING", "COMPLETING")
                                       for j in self.jobs()), 30, "cancelled jobs to end")

    def _client(self, name: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([_binary(name), *args], capture_output=True, text=True, timeout=60,
                              env={**os.environ, **self.env})

    def logs(self) -> str:
        parts = []
        for path in sorted(self.dir.rglob("*.log")):
            lines = path.read_text(errors="replace").splitlines()[-15:]
            parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def _start(self, name: str, cmd: list[str]) -> None:
        log = open(self.dir / f"{name}.out.log", "w")
        self.processes[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                env={**os.environ, **self.env}, start_new_session=True)
        log.close()

    def _wait(self, condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            dead = [n for n, p in self.processes.items() if p.poll() is not None]
            if dead:
                raise SlurmError(f"{', '.join(dead)} exited while waiting for {what}:\n{self.logs()}")
            if time.monotonic() > deadline:
                raise SlurmError(f"timed out waiting for {what}:\n{self.logs()}")
            time.sleep(0.3)

    def _node_idle(self) -> bool:
        proc = self._client("sinfo", "-h", "-N", "-o", "%T")
        return proc.returncode == 0 and proc.stdout.strip() == "idle"

    def _write_files(self) -> None:
        munge = self.dir / "munge"
        for sub in (munge, self.dir / "ctld", self.dir / "spool", self.dir / "dev"):
            sub.mkdir(parents=True, exist_ok=True)
        munge.chmod(0o700)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        devices = [self.dir / "dev" / f"gpu{i}" for i in range(GPUS)]
        for i, dev in enumerate(devices):
            if not dev.exists():
                os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))  # a character device (/dev/null's numbers)
        (self.dir / "gres.conf").write_text(
            "AutoDetect=off\n" + "".join(f"NodeName={self.node} Name=gpu File={d}\n" for d in devices))
        self.conf.write_text(self._slurm_conf())
        if DEFAULT_CONF.exists():
            raise SlurmError(f"{DEFAULT_CONF} exists: this machine has a Slurm configuration of its own (or an earlier test left it): not starting another")
        DEFAULT_CONF.parent.mkdir(parents=True, exist_ok=True)
        DEFAULT_CONF.write_text(self.conf.read_text())
        self.wrote_default_conf = True

    def _slurm_conf(self) -> str:
        # At least a CPU per GPU, so that two one-GPU jobs can run at once on a one-core machine too
        # (config_overrides: slurmd takes the declared counts instead of draining the node).
        cpus = max(GPUS, os.cpu_count() or 1)
        memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 - 512
        return "\n".join([
            "ClusterName=fabench-test",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            "SlurmUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            f"StateSaveLocation={self.dir / 'ctld'}",
            f"SlurmdSpoolDir={self.dir / 'spool'}",
            f"SlurmctldPidFile={self.dir / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.dir / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.dir / 'slurmctld.log'}",
            f"SlurmdLogFile={self.dir / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "ReturnToService=2",
            "MinJobAge=600",
            "SlurmdParameters=config_overrides",
            "GresTypes=gpu",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} Gres=gpu:{GPUS} State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            "",
        ])
