"""A measuring worker: one process per (GPU, round) that keeps torch, the device's context and the
in-memory compile caches, and measures one job at a time as launchers ask
(fabench.measure.launch.worker_client starts it and speaks to it; docs/worker.md compares the modes).

    python -m fabench.measure.launch.worker --folder DIR --name NAME --idle-s S --identity JSON

Each job is measured by fabench.measure.job's own functions, as in a process of its own; between
jobs the state one job could leave to the next is reset (reset_between_jobs). The job's output
(Python's and the C libraries') goes to the launcher while it runs, so the job's log shows it.

The worker ends when no job came for --idle-s seconds, when asked (the workflow's end), when the
workflow it serves is gone (fabench.watchdog), or when killed; a lock held for its life keeps a
second worker of the same name from starting. Its folder is the user's own (fabench.places), and
its lock and log are never opened through a link.
"""

from __future__ import annotations

import os
import time

IMPORTS_BEGAN = time.time()
# The environment this worker was started with, before any import could add to it (torch sets
# CUDA_MODULE_LOADING as it starts CUDA): the one a spare it leaves starts with (Worker.leave_spare).
STARTED_WITH = dict(os.environ)

import argparse
import contextlib
import gc
import json
import random
import socket
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from fabench.files import write_json
from fabench.config import SpecError
from fabench.measure.invocation import USAGE, config_bounded
from fabench.measure.spec import JobSpec
from fabench.measure.launch.worker_client import MARK, Address, name_of, spare_facts, spawn_process
from fabench.measure.timeline import SPAWNED_AT_ENV
from fabench.measure import timeline
from fabench.places import WORKER_DIR_ENV, lock_at_once, open_file, private_dir
from fabench.watchdog import WORKFLOW_ENV, watch_workflow


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fabench.measure.launch.worker")
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--idle-s", type=config_bounded("measure", "worker_idle_s"), required=True)
    parser.add_argument("--identity", type=json.loads, required=True)
    parser.add_argument("--start-up", default="", metavar="NAMES",
                        help="backends (comma-separated) whose start-up imports to make before any job "
                             "(fabench.measure.backends.registry.Backend.start_up)")
    parser.add_argument("--inputs", type=inputs_arg, default=[], metavar="JSON",
                        help="the CPU inputs its jobs will ask for, drawn in its start-up: a JSON list of "
                             "[batch, seq, heads, head_dim, dtype, seed] (fabench.measure.inputs.draw_ahead)")
    args = parser.parse_args(argv)
    where = Address(args.name, private_dir(args.folder, WORKER_DIR_ENV))
    lock = take_lock(where.lock)
    if lock is None:
        print(f"[fabench worker] {args.name}: another worker of this name runs; ending", flush=True)
        return 0
    server = listening(where)
    # A spare answers whoever adopts it from its first moment, its imports made meanwhile.
    spare = Spare(where, lock, server, args.identity, args.idle_s) if args.identity.get("spare") else None
    watch_workflow()  # a spare has no workflow: it watches the one that adopts it
    worker = Worker(where, args.identity, args.idle_s, [n for n in args.start_up.split(",") if n], args.inputs,
                    log=where.log, record=spare is None)
    if spare is not None:
        server = worker.adopted(spare.wait())
    worker.serve(server)
    return 0


def listening(where: Address) -> socket.socket:
    """The worker's socket at `where`, bound and listening: a launcher that connects while the worker
    still imports is answered once it serves."""
    with contextlib.suppress(FileNotFoundError):
        where.socket.unlink()  # left by a worker that died: its lock is free, so it is gone
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(where.socket))
    server.listen(8)
    return server


def inputs_arg(text: str) -> list[tuple]:
    """argparse type of --inputs: [[batch, seq, heads, head_dim, dtype, seed], ...], checked."""
    try:
        value = json.loads(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not a list of [batch, seq, heads, head_dim, dtype, seed]: {err}") from None
    return checked_inputs(value)


def checked_inputs(value) -> list[tuple]:
    """[[batch, seq, heads, head_dim, dtype, seed], ...] as --inputs or an adoption gives them, checked."""
    try:
        if not isinstance(value, list):
            raise TypeError(f"{type(value).__name__}, not a list")
        wanted = [(int(b), int(s), int(h), int(d), str(dtype), int(seed)) for b, s, h, d, dtype, seed in value]
    except (ValueError, TypeError) as err:
        raise argparse.ArgumentTypeError(f"not a list of [batch, seq, heads, head_dim, dtype, seed]: {err}") from None
    bad = [w for w in wanted if min(w[:4]) < 1 or w[4] not in ("float16", "bfloat16", "float32")]
    if bad:
        raise argparse.ArgumentTypeError(f"not inputs a job draws: {bad[0]}")
    return wanted


def write_record(where: Address, facts: dict, log: Path, **more) -> None:
    """The record by which launchers and stop_workers find a worker (or a spare) at `where`."""
    write_json(where.record, {"identity": facts, "pid": os.getpid(), "started_at": IMPORTS_BEGAN, "log": str(log),
                              **more})


def remove(*paths: Path) -> None:
    """A worker's files at its end (or a spare's at its adoption), those already gone skipped."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def take_lock(path: Path) -> int | None:
    """The lock of this worker's name, held (its descriptor, inherited by nothing), or None when
    another worker holds it. The lock file is removed when its worker ends (Worker.serve), so one
    taken must still be the file at `path`: else a worker that ended removed it meanwhile, and
    the lock is taken again on the file now there."""
    while True:
        fd = open_file(path, os.O_RDWR | os.O_CREAT, WORKER_DIR_ENV)
        if not lock_at_once(fd):
            os.close(fd)
            return None
        try:
            same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


class Worker:
    def __init__(self, where: Address, facts: dict, idle_s: float, start_up: list[str] = (),
                 inputs: list[tuple] = (), log: Path | None = None, record: bool = True) -> None:
        from fabench.measure import job  # torch and the measuring code: the start-up paid once
        from fabench.measure.backends.registry import start_up as backends_start_up

        self.job = job
        self.backends_start_up = backends_start_up
        self.log = log or where.log  # where its output goes (a spare keeps its own file when adopted)
        self.start_up, self.inputs = list(start_up), [list(w) for w in inputs]
        self.adoption: dict | None = None
        self.spare_left = False
        # The CPU inputs of the jobs to come drawn beside the imports below: drawing them was most of
        # a job's "inputs and fp32 reference" (0.3-0.55 s a shape on an H200 host, 3.1 s of a
        # one-card run, 5.6 s on two cards, where a worker sees fewer of a shape's jobs). torch's
        # kernels let the interpreter go, so they overlap Dynamo's import (Python, ~7 s); CPU work
        # alone, on no device. Done before the first job is taken (joined below).
        drawn: dict = {}
        drawing = threading.Thread(target=draw_inputs_ahead, args=(inputs, drawn), daemon=True)
        drawing.start()
        # The compiler reset every hand-over makes (reset_between_jobs), made once here: its first
        # call imports Dynamo and what its reset hooks need (on an H200 4-6 s and 3-4 s more:
        # examples/h200-probe-2026-11-27), and made the first hand-over the longest part of a
        # worker's start-up (11.6 and 8.5 s, against 0.01-0.1 s for every later one). Here it is
        # start-up, which a worker started ahead (worker_client.start_ahead) has done before its
        # first job. It touches no device.
        import torch

        torch.compiler.reset()
        # The jobs' backends' own imports (FlashAttention-4's), which touch no device either.
        self.started_up = backends_start_up(start_up)
        drawing.join()
        self.inputs_drawn = drawn.get("inputs_drawn", 0)

        # What the imports made lives as long as the worker: frozen out of the collector, so the
        # collections between jobs (reset_between_jobs, each cell's release) walk only what the jobs
        # made, not torch's, Triton's and aiter's hundreds of thousands of objects (a collection
        # took 0.2 s with torch alone imported on a CPU; a worker's hand-over between jobs averaged
        # 0.86 s on an H100).
        gc.collect()
        gc.freeze()
        self.imports = (IMPORTS_BEGAN, time.time())
        self.where, self.facts, self.idle_s = where, facts, idle_s
        self.jobs_run = 0
        self.pid = os.getpid()
        if record:  # a spare's is its Spare's, until its adoption gives it its own (adopted)
            self.write_record()
        print(f"[fabench worker] {where.name} (pid {self.pid}) ready after "
              f"{self.imports[1] - self.imports[0]:.1f} s of imports; {self.inputs_drawn} shape(s)' inputs drawn"
              + "".join(f"; {name} {outcome}" for name, outcome in self.started_up.items()), flush=True)

    def write_record(self) -> None:
        write_record(self.where, self.facts, self.log, started_up=self.started_up, inputs_drawn=self.inputs_drawn,
                     adoption=self.adoption)

    def adopted(self, adoption: "Adoption") -> socket.socket:
        """This spare, its imports made, made the worker of the run that adopted it (Spare.wait): its
        name, identity and idle time are that worker's; the backends' start-up imports and the CPU
        inputs that run's jobs name and the spare lacks are made now. Its socket, to serve."""
        self.where, self.facts, self.idle_s = adoption.where, adoption.facts, adoption.idle_s
        self.log = self.moved_log()
        missing = [name for name in adoption.start_up if name not in self.started_up]
        self.started_up.update(self.backends_start_up(missing))
        drawn: dict = {}
        draw_inputs_ahead(adoption.inputs, drawn)  # those the spare drew are kept: drawn again at once
        self.inputs_drawn = drawn.get("inputs_drawn", 0)
        self.start_up, self.inputs = sorted({*self.start_up, *adoption.start_up}), adoption.inputs
        ready = time.time()
        # The start-up this run waited for: from the adoption (the spare's imports, made before it,
        # were an earlier run's time) to now. Its first job records it as its imports.
        self.imports = (max(self.imports[0], adoption.at), max(self.imports[1], ready))
        self.adoption = {"spare_started_at": IMPORTS_BEGAN, "adopted_at": adoption.at, "ready_at": ready}
        timeline.current().spawned_at = adoption.at
        self.write_record()
        print(f"[fabench worker] adopted as {self.where.name}, ready {ready - adoption.at:.1f} s after; "
              f"{self.inputs_drawn} shape(s)' inputs drawn", flush=True)
        return adoption.server

    def moved_log(self) -> Path:
        """Its log (its output's file) renamed for the worker it now is: the spare's name is the
        one the spare it leaves will have (an identity's spares share a name), whose log would
        otherwise be this one, and be removed with it. A died worker's log of the new name is kept."""
        target = self.where.log
        if target.exists() or target.is_symlink():
            target = self.where.folder / f"{self.where.name}-{self.pid}.log"
        try:
            os.replace(self.log, target)
        except OSError as err:  # costs only the log's name
            print(f"[fabench worker] log not renamed: {err}", flush=True)
            return self.log
        return target

    def serve(self, server: socket.socket) -> None:
        server.settimeout(self.idle_s)
        try:
            while True:
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    print(f"[fabench worker] idle for {self.idle_s:g} s: ending", flush=True)
                    return
                conn.settimeout(None)
                with conn:
                    if not self.handle(conn):
                        print("[fabench worker] asked to stop: ending", flush=True)
                        return
        finally:
            # Removed while the lock is still held: a worker that opened the file meanwhile finds
            # it gone once it gets the lock, and takes a new one (take_lock). Only a worker that
            # died leaves its files, its log saying why.
            remove(self.where.socket, self.where.record, self.log, self.where.lock)

    def handle(self, conn: socket.socket) -> bool:
        """One connection: a job (measured, True), or a request to stop (False)."""
        _, fds, _, _ = socket.recv_fds(conn, 1, 4)
        try:
            request = json.loads(conn.makefile("rb").readline() or b"{}")
            if request.get("spare_s") and not self.spare_left:  # at most one spare a worker
                self.leave_spare(float(request["spare_s"]))
            if request.get("stop"):
                return False
            if "spec" not in request:
                return True
            self.measure(conn, request)
        except OSError as err:  # its launcher is gone (killed, cancelled): the next job is served all the same
            print(f"[fabench worker] job {self.jobs_run}: connection lost ({err})", flush=True)
        finally:
            for fd in fds:  # the job's GPU lease, held while it measured
                os.close(fd)
        self.jobs_run += 1
        return True

    def leave_spare(self, spare_s: float) -> None:
        """Start the spare this worker leaves for the next run, once its workflow has measured its
        last job (worker_client.leave_spares) or as it ends it (stop_workers): a fresh worker of its identity
        for no workflow (worker_client.spare_facts), started as this one was, that makes the same
        start-up and draws the same inputs, then waits `spare_s` seconds for the next run of this
        checkout to adopt it (worker_client.adopt_spare). It never touched a device or measured a
        job: it is a new measuring process, whose start-up the next run does not wait for."""
        facts = spare_facts(self.facts)
        where = Address(name_of(facts), self.where.folder)
        env = {k: v for k, v in STARTED_WITH.items() if k != WORKFLOW_ENV}
        env[SPAWNED_AT_ENV] = repr(time.time())
        try:
            spare = spawn_process(where, facts, env, spare_s, self.start_up, self.inputs)
            print(f"[fabench worker] left spare {where.name} (pid {spare.pid}), waiting {spare_s:g} s", flush=True)
        except OSError as err:  # the workflow's end must not fail on it: the next run starts its own
            print(f"[fabench worker] no spare left: {err}", flush=True)
        self.spare_left = True

    def measure(self, conn: socket.socket, request: dict) -> None:
        worker = {"name": self.where.name, "pid": self.pid, "jobs_before": self.jobs_run,
                  "started_at": IMPORTS_BEGAN, **({"adoption": self.adoption} if self.adoption else {})}
        conn.sendall(MARK + json.dumps(worker).encode() + b"\n")
        try:
            spec = JobSpec.from_json(request["spec"])
        except SpecError as err:  # refused as the runner refuses it, in one line; the worker serves on
            conn.sendall(f"python -m fabench.measure: error: {err}\n".encode()
                         + MARK + json.dumps({"exit_code": USAGE}).encode() + b"\n")
            return
        handed_over = max(request["sent_at"], self.imports[1])
        reset_began = time.time()
        reset_between_jobs(spec.settings.seed)
        start_up = [{"phase": "imports", "start": self.imports[0], "end": self.imports[1]}] if not self.jobs_run else []
        start_up.append({"phase": "worker hand-over", "start": handed_over, "end": reset_began})
        start_up.append({"phase": "job reset", "start": reset_began, "end": time.time()})
        if request.get("lease") is not None:
            os.environ["FABENCH_DEVICE_LEASE"] = json.dumps(request["lease"], sort_keys=True)
        with output_to(conn):
            code = self.job.measure_to_file(
                spec, Path(request["aiter_config"]) if request.get("aiter_config") else None,
                request.get("project_commit"), request["process"], Path(request["out"]),
                start_up=start_up, worker=worker)
        conn.sendall(MARK + json.dumps({"exit_code": code}).encode() + b"\n")


@dataclass(frozen=True)
class Adoption:
    """A run's claim on a spare: the worker it becomes (its address, socket and lock, taken), and
    what that run's jobs need of it."""

    where: Address
    facts: dict
    idle_s: float
    start_up: list[str]
    inputs: list[tuple]
    server: socket.socket
    lock: int
    at: float


# How long a spare waits for a connected client's request before it serves the next one.
ANSWER_S = 10.0


class Spare:
    """A worker left by a run for the next one (Worker.leave_spare), from its start until a run adopts
    it: a thread answers its socket, taking an adoption (worker_client.adopt_spare) or a stop while
    the worker still imports, so that the run waits for no more of the start-up than is left. A spare
    nobody adopts within its idle time ends, as does one asked to stop."""

    def __init__(self, where: Address, lock: int, server: socket.socket, facts: dict, idle_s: float) -> None:
        self.where, self.lock, self.server, self.facts, self.idle_s = where, lock, server, facts, idle_s
        self.taken: Adoption | None = None
        self.decided = threading.Event()
        # Its record from its first moment: stop_workers finds workers by their records.
        write_record(where, facts, where.log, spare_s=idle_s)
        threading.Thread(target=self.answer, name="fabench-spare", daemon=True).start()

    def wait(self) -> Adoption:
        self.decided.wait()
        return self.taken

    def answer(self) -> None:
        self.server.settimeout(self.idle_s)
        while True:
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                self.end(f"not adopted within {self.idle_s:g} s: ending")
            conn.settimeout(ANSWER_S)  # a client that connects and says nothing does not hold the spare
            with conn:
                try:
                    _, fds, _, _ = socket.recv_fds(conn, 1, 4)
                    for fd in fds:  # a spare holds no lease
                        os.close(fd)
                    request = json.loads(conn.makefile("rb").readline() or b"{}")
                except (OSError, ValueError):  # a gone or garbled client: the spare waits on
                    continue
                if request.get("stop"):
                    self.end("asked to stop: ending")
                taken, why = self.take(request.get("adopt") or {})
                with contextlib.suppress(OSError):
                    conn.sendall(MARK + json.dumps({"adopted": taken is not None, "reason": why}).encode() + b"\n")
            if taken is not None:
                self.server.close()
                remove(self.where.socket, self.where.record, self.where.lock)  # its log goes on, its worker's
                os.close(self.lock)
                self.taken = taken
                self.decided.set()
                return

    def take(self, wanted: dict) -> tuple[Adoption | None, str]:
        """The adoption asked for, its name's lock taken and its socket listening; or None and why
        not: another identity than this spare's (code, interpreter, GPU, round, environment), or a
        worker of that name already running."""
        facts = wanted.get("identity") or {}
        try:
            if spare_facts(facts) != self.facts or wanted.get("name") != name_of(facts):
                return None, "another identity"
            idle_s = config_bounded("measure", "worker_idle_s")(str(wanted["idle_s"]))
            start_up = [str(name) for name in wanted.get("start_up") or []]
            inputs = checked_inputs(wanted.get("inputs") or [])
        except (KeyError, TypeError, ValueError, argparse.ArgumentTypeError) as err:
            return None, f"not an adoption: {err}"
        where = Address(name_of(facts), self.where.folder)
        lock = take_lock(where.lock)
        if lock is None:
            return None, "a worker of that name runs"
        try:
            server = listening(where)
        except OSError as err:
            os.close(lock)
            return None, f"its socket: {err}"
        if facts.get("workflow"):  # from now on it ends with the workflow that adopted it
            os.environ[WORKFLOW_ENV] = facts["workflow"]
            watch_workflow()
        # Found by stop_workers under its new name at once (Worker.adopted completes the record).
        write_record(where, facts, self.where.log)
        print(f"[fabench worker] spare {self.where.name} adopted as {where.name}", flush=True)
        return Adoption(where, facts, idle_s, start_up, inputs, server, lock, time.time()), "adopted"

    def end(self, why: str) -> None:
        """The spare ends where it stands, even mid-import: it holds no device and measured nothing."""
        print(f"[fabench worker] spare {self.where.name}: {why}", flush=True)
        remove(self.where.socket, self.where.record, self.where.log, self.where.lock)
        os._exit(0)


@contextlib.contextmanager
def output_to(conn: socket.socket):
    """This process's stdout and stderr (file descriptors 1 and 2, so C libraries' output too) go
    to the connection while the job runs."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(conn.fileno(), 1)
    os.dup2(conn.fileno(), 2)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):  # what a gone launcher cannot read is dropped
            sys.stdout.flush()
            sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def draw_inputs_ahead(wanted: list[tuple], into: dict) -> None:
    """fabench.measure.job.draw_inputs_ahead on `wanted` ([batch, seq, heads, head_dim, dtype, seed]);
    into["inputs_drawn"]: how many, or why none (a draw that fails costs only speed: the job draws)."""
    from fabench.measure.job import draw_inputs_ahead as draw

    try:
        into["inputs_drawn"] = draw(wanted)
    except Exception as err:  # any failure: the jobs draw their own
        into["inputs_drawn"] = f"none ({type(err).__name__}: {err})"


def reset_between_jobs(seed: int) -> None:
    """What one job could leave to the next, put back as a fresh process has it: the allocator's
    cache and peak statistics, Dynamo's compiled frames (keyed on the variant's tiles, with a
    recompile limit), aiter's loaded config, and the random generators (seeded as the job's)."""
    import torch

    from fabench.measure.device.accelerator import here

    torch.compiler.reset()
    forget_aiter_configs()
    # The job's garbage, and what the resets let go, collected; what survives (the modules the job
    # imported: Triton's compiler, Inductor, aiter, and their module state) lives as long as the
    # worker and is frozen out of later collections, as the worker's own imports are: the first
    # job's imports left every later hand-over a collection of ~1 s (0.86 s a job on an H100, 1.0 s
    # on an H200; 1.2-1.8 s on the 2-core CPU host), now one of what the last job made.
    gc.collect()
    gc.freeze()
    here().release_memory()
    random.seed(seed)
    torch.manual_seed(seed)
    with contextlib.suppress(ImportError):
        import numpy

        numpy.random.seed(seed)


def forget_aiter_configs() -> list[str]:
    """Drop the config every loaded aiter loader module keeps (its lru_cached _get_config and the
    parsed file on it): the next job's patched file is read anew. The modules it cleared."""
    from fabench.measure.backends.aiter_kernel import forget_loaded_config

    cleared = []
    for name, module in list(sys.modules.items()):
        if name.startswith("aiter") and module is not None and callable(getattr(module, "_get_config", None)):
            forget_loaded_config(module)
            cleared.append(name)
    return cleared


if __name__ == "__main__":
    sys.exit(main())
