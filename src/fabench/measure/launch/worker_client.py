"""The launcher's side of a measuring worker (fabench.measure.launch.worker): find it, start it, hand it one
job, relay its output, and contain what goes wrong. Torch-free: the launcher stays light.

One worker per (GPU, round): a job's process N goes to the worker of its GPU and of round N, so the
two processes of a cell are still two independent processes. A worker is addressed by a name built
from facts (host, GPU, round, this checkout's code and interpreter, the measuring environment, the
workflow it serves); its unix socket, lock, record and log lie in a runtime folder outside results/.

The launcher holds the job's GPU lease and passes the lease's descriptor to the worker for the job
(SCM_RIGHTS), so the GPU stays held while the worker measures even if the launcher is killed. A
worker that dies mid-job, or hangs past the job's timeout (killed then), fails that job alone; the
next job starts a fresh worker.

Protocol, one connection per job: the launcher sends one byte (with the lease's descriptor, if
any), then one JSON line (the request). The worker answers a MARK line (hello: its identity and
how many jobs it ran before), the job's raw output, and a MARK line with the job's exit code.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fabench.gitinfo import code_fingerprint
from fabench.measure.invocation import CACHE_ENV, MEASURING_ENV, measuring_environment
from fabench.measure.launch.launcher import kill, supervise, timeout_reason
from fabench.measure.timeline import SPAWNED_AT_ENV
from fabench.measure.visibility import VISIBLE_VARS
from fabench.places import WORKER_DIR_ENV, open_file, private_dir, worker_folder
from fabench.watchdog import WORKFLOW_ENV

WORKER_MODULE = "fabench.measure.launch.worker"
MARK = b"\x1efabench-worker "  # a record separator starts the protocol's own lines
START_TIMEOUT_S = 120.0  # a fresh worker answers within this (it binds before importing torch)


@dataclass(frozen=True)
class Address:
    """Where one worker lives: its socket, its lock (held for its life), its record and log."""

    name: str
    folder: Path

    @property
    def socket(self) -> Path:
        return self.folder / f"{self.name}.sock"

    @property
    def lock(self) -> Path:
        return self.folder / f"{self.name}.lock"

    @property
    def record(self) -> Path:
        return self.folder / f"{self.name}.json"

    @property
    def log(self) -> Path:
        return self.folder / f"{self.name}.log"


class WorkerGone(Exception):
    """The worker closed the connection before answering the job (it died or was stopped)."""


def runtime_folder(env: dict | None = None) -> Path:
    """This user's folder of workers (fabench.places.worker_folder), made or accepted only when it
    is this user's alone (PlaceError otherwise)."""
    return private_dir(worker_folder(os.environ if env is None else env), WORKER_DIR_ENV)


@functools.cache
def launchers_code() -> str:
    """gitinfo.code_fingerprint, read once per process: a launcher names its rounds' workers four
    times (start_ahead before its lease, its own round's, start_ahead after it), and each reading
    hashes every module of the package (~10 ms on the CPU host), between one timed job and the next."""
    return code_fingerprint()


def identity(lease, process: int, env: dict | None = None) -> dict:
    """The facts a worker must share with a job to measure it: same host, GPU and round, same code,
    interpreter, working directory, measuring environment and workflow."""
    env = dict(os.environ if env is None else env)
    measured_env = {k: env.get(k) for k in (*MEASURING_ENV, *CACHE_ENV, *VISIBLE_VARS, "PYTHONPATH")}
    return {
        "host": socket.gethostname(),
        "gpu": lease.gpu or "cpu",
        "lease_source": lease.source,
        "visible_devices": lease.visible_devices,
        "round": process,
        "python": sys.executable,
        "code": launchers_code(),
        "workdir": os.getcwd(),
        "environment": measured_env,
        "workflow": env.get(WORKFLOW_ENV),
    }


def name_of(facts: dict) -> str:
    return "w-" + hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:24]


def address(facts: dict, env: dict | None = None) -> Address:
    return Address(name_of(facts), runtime_folder(env))


def spare_facts(facts: dict) -> dict:
    """The identity of the spare a worker of `facts` leaves for the next run (worker.Worker.leave_spare):
    the same facts for no workflow, marked a spare, so that no job is ever sent to it by name (a job
    started by hand has no workflow either) and only an adoption reaches it."""
    return {**facts, "workflow": None, "spare": True}


def run_in_worker(request: dict, lease, process: int, idle_s: float, timeout_s: float | None,
                  out=None, rounds_ahead: range = range(0), start_up: tuple[str, ...] = (),
                  started_here: tuple[str, ...] = (), inputs: list = ()) -> dict:
    """Measure one job in the worker of (lease's GPU, round `process`), starting one when none
    answers; the workers of `rounds_ahead` (the job's other rounds) are started too, not waited
    for (start_ahead). A worker started here makes the start-up imports of the backends `start_up`
    names, and draws the CPU inputs `inputs` names (inputs_of); `started_here` names the workers
    this job's launcher started before its lease, which the record counts as this job's. Returns how it ended: exit_code (None when the worker died or was
    killed), spawned_at and exited_at (epoch seconds), the worker's hello, and a reason when no exit
    code came."""
    out = out or sys.stdout.buffer
    facts = identity(lease, process)
    where = address(facts)
    began = time.time()
    for attempt in range(3):  # a worker that goes away before answering (idle end, lost start race)
        conn, started = connect_or_start(where, facts, lease, idle_s, began, start_up, inputs)
        if attempt == 0:
            start_ahead(lease, [r for r in rounds_ahead if r != process], idle_s, start_up, inputs)
        try:
            return exchange(conn, dict(request, sent_at=time.time()), lease, timeout_s, out, began,
                            started or where.name in started_here)
        except WorkerGone:
            if attempt == 2:
                raise
        finally:
            conn.close()
    raise AssertionError("unreachable")


def inputs_of(specs) -> list[list]:
    """The CPU inputs the jobs of `specs` draw (fabench.measure.inputs.cpu_inputs' keys), in their
    order, each once: what a worker started for them draws in its start-up (worker.draw_inputs_ahead)."""
    wanted = [[s.shape.batch, s.shape.seq, s.shape.heads, s.shape.head_dim, s.settings.dtype, s.settings.seed]
              for s in specs]
    return [list(w) for w in dict.fromkeys(tuple(w) for w in wanted)]


def connect(where: Address) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(where.socket))
    except (FileNotFoundError, ConnectionRefusedError):
        conn.close()
        return None
    return conn


def start_ahead(lease, rounds: list[int], idle_s: float, start_up: tuple[str, ...] = (),
                inputs: list = ()) -> list[str]:
    """Start the workers of the lease's GPU for `rounds` where none answers, and return at once
    (their names). On a GPU a job's round-N process otherwise starts its worker when it comes, and
    waits through its start-up (on an H200: 5 s of imports, then Dynamo's and the compilers' first
    imports, ~15 s a worker); started while this job measures, that start-up is done by then. A
    starting worker only imports: it touches its GPU when a job hands it the lease, so the job
    measuring on that GPU meanwhile is its only user. Not on a CPU, whose own cores are the timed
    device (fabench.measure.launch.runner decides)."""
    started = []
    for round_ in rounds:
        facts = identity(lease, round_)
        where = address(facts)
        conn = connect(where)
        if conn is not None:
            conn.close()  # its worker serves the next request of its own; an empty one is no job
            continue
        if not adopt_spare(where, facts, idle_s, start_up, inputs):
            spawn(where, facts, lease, idle_s, time.time(), start_up, inputs)
        started.append(where.name)
    return started


# How long a launcher waits for a spare's answer to its adoption (it answers from its first moment).
ADOPT_ANSWER_S = 10.0


def adopt_spare(where: Address, facts: dict, idle_s: float, start_up: tuple[str, ...] = (),
                inputs: list = ()) -> bool:
    """Make the spare an earlier run left for these facts (worker.Worker.leave_spare) the worker at
    `where`: whether it did. A spare answers while it still imports, and listens at `where` before it
    says yes; it then makes the start-up imports and draws the inputs the spare lacked."""
    conn = connect(Address(name_of(spare_facts(facts)), where.folder))
    if conn is None:
        return False
    request = {"adopt": {"name": where.name, "identity": facts, "idle_s": idle_s, "start_up": list(start_up),
                         "inputs": [list(w) for w in inputs]}}
    with conn:
        conn.settimeout(ADOPT_ANSWER_S)
        try:
            socket.send_fds(conn, [b"F"], [])
            conn.sendall(json.dumps(request).encode() + b"\n")
            answer = read_mark(conn.makefile("rb"))
        except OSError:  # TimeoutError included: a spare that does not answer is not waited for
            return False
    return bool(answer and answer.get("adopted"))


def spawn(where: Address, facts: dict, lease, idle_s: float, began: float,
          start_up: tuple[str, ...] = (), inputs: list = ()) -> subprocess.Popen:
    """A worker started for `where` (detached: it outlives this launcher, bound to the lease's GPU
    through its visibility variables); one that finds another of its name running ends at once.
    `start_up`: the backends whose start-up imports it makes before its first job; `inputs`: the
    CPU inputs it draws meanwhile (inputs_of)."""
    env = measuring_environment(lease)
    env[SPAWNED_AT_ENV] = repr(began)
    return spawn_process(where, facts, env, idle_s, start_up, inputs)


def spawn_process(where: Address, facts: dict, env: dict, idle_s: float, start_up=(), inputs=()) -> subprocess.Popen:
    """The worker process for `where`, in `env`, detached (spawn; a worker leaving a spare)."""
    cmd = [sys.executable, "-m", WORKER_MODULE, "--folder", str(where.folder), "--name", where.name,
           "--idle-s", str(idle_s), "--identity", json.dumps(facts, sort_keys=True),
           "--start-up", ",".join(start_up), "--inputs", json.dumps(list(inputs))]
    log = open_file(where.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, WORKER_DIR_ENV)
    try:
        return subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # not in the job's process group: outlives it
    finally:
        os.close(log)


def connect_or_start(where: Address, facts: dict, lease, idle_s: float, began: float,
                     start_up: tuple[str, ...] = (), inputs: list = ()) -> tuple[socket.socket, bool]:
    """A connection to the worker: the running one, or a fresh one started here (spawn)."""
    conn = connect(where)
    if conn is not None:
        return conn, False
    if adopt_spare(where, facts, idle_s, start_up, inputs) and (conn := connect(where)) is not None:
        return conn, True
    worker = spawn(where, facts, lease, idle_s, began, start_up, inputs)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        conn = connect(where)
        if conn is not None:
            return conn, True
        code = worker.poll()
        if code not in (None, 0):  # 0: it lost the race to a worker already starting
            raise RuntimeError(f"the measuring worker could not start (exit code {code}); see {where.log}")
        time.sleep(0.05)
    worker.kill()
    raise RuntimeError(f"the measuring worker did not answer within {START_TIMEOUT_S:.0f} s; see {where.log}")


def exchange(conn: socket.socket, request: dict, lease, timeout_s: float | None, out, began: float,
             started: bool) -> dict:
    """Send the job, relay the worker's output, and return how the job ended. A worker that dies
    before it took the job (its connection reset, or closed, before its hello: a job whose launcher
    was ready connects the moment the job before it ends) is WorkerGone: the job is sent again."""
    lines = conn.makefile("rb")
    waited = timeout_s + START_TIMEOUT_S if timeout_s else None
    try:
        socket.send_fds(conn, [b"F"], list(lease.inheritable_fds()))
        conn.sendall(json.dumps(request).encode() + b"\n")
        conn.settimeout(waited)  # a worker busy with another job (CPU jobs side by side) answers after it
        hello = read_mark(lines)
    except TimeoutError:
        raise RuntimeError(f"the measuring worker did not take the job within {waited:g} s") from None
    except (ConnectionResetError, BrokenPipeError):
        raise WorkerGone() from None
    conn.settimeout(None)
    if hello is None:
        raise WorkerGone()
    pid = hello["pid"]
    ended = {"spawned_at": began, "worker": {**hello, "started_by_this_job": started}}
    end, timed_out = supervise(pid, lambda: relay(lines, out), timeout_s)
    ended["exited_at"] = time.time()
    if end is not None:
        return {**ended, "exit_code": end["exit_code"]}
    if timed_out:
        reason = timeout_reason(timeout_s, f"its measuring worker (pid {pid})")
    else:
        reason = f"its measuring worker (pid {pid}) ended mid-job without a result (crashed or was killed)"
        kill(pid, signal.SIGKILL)  # in case it only closed the connection
    return {**ended, "exit_code": None, "reason": reason}


def read_mark(lines) -> dict | None:
    line = lines.readline()
    if not line.startswith(MARK):
        return None
    return json.loads(line[len(MARK):])


def relay(lines, out) -> dict | None:
    """The job's output to `out`, line by line, until the worker's end line (None: it never came)."""
    for line in lines:
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
        out.write(line)
        out.flush()
    return None


# How long stop_workers waits for a worker to close its connection as it ends.
STOP_ANSWER_S = 10.0


def stop_workers(workflow: str | None = None, env: dict | None = None, spare_s: float = 0) -> list[str]:
    """Ask every worker of this user (of `workflow` only, when given) to end; their names. Workers
    end by themselves when idle too: this is the workflow's end saying so at once. With `spare_s`,
    each that has not left one yet (leave_spares) leaves a spare that waits that long for the next
    run (worker.Worker.leave_spare); without `workflow` the spares are stopped too."""
    return tell_workers({"stop": True, "spare_s": spare_s}, workflow, env)


# Set by the workflow for its jobs: how long the spares wait that the workers leave as a run's
# report starts, its measuring over (fabench.plan.Plan.spares_once_measured; 0: none then).
SPARES_ENV = "FABENCH_SPARES_ONCE_MEASURED"


def leave_spares(workflow: str, spare_s: float, env: dict | None = None) -> list[str]:
    """Ask each worker of `workflow` to leave its spare now and serve on (the names of those asked):
    said where the workflow has measured its last job (the report of a run of one), so that the
    spares import beside the report and the workflow's end instead of the next run's start."""
    return tell_workers({"spare_s": spare_s}, workflow, env)


def tell_workers(request: dict, workflow: str | None, env: dict | None) -> list[str]:
    """`request` sent to every worker of this user (of `workflow` only, when given); the names of
    those that answered the connection. Each closes it when done with the request."""
    try:
        folder = runtime_folder(env)
    except OSError:  # a folder this user may not use (fabench.places) holds no worker of theirs
        return []
    told = []
    for record in sorted(folder.glob("w-*.json")):
        try:
            facts = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        if workflow is not None and facts.get("identity", {}).get("workflow") != workflow:
            continue
        conn = connect(Address(record.stem, folder))
        if conn is None:
            continue
        with conn:
            # A worker that does not answer (stopped, hung in a job) must not hold the workflow's end,
            # nor a test's clean-up: it ends by itself when idle, or is killed by its job's timeout.
            conn.settimeout(STOP_ANSWER_S)
            with contextlib.suppress(OSError):  # TimeoutError included
                socket.send_fds(conn, [b"F"], [])
                conn.sendall(json.dumps(request).encode() + b"\n")
                conn.recv(1)  # the worker closes the connection when done with it
        told.append(record.stem)
    return told
