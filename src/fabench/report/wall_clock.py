"""Where a run's time went: the measuring processes' recorded phases, summed by kind of work.

Each process records its phases (fabench.measure.timeline) and the runner when it started the
process and saw it end (method.process_exits). Two phases are derived here from those: the
interpreter's start-up (spawned until the imports began) and writing and exiting (the last phase's
end until the process had ended). The groups separate the measurement itself (warm-up, the timed
loops) from everything a faster pipeline can cut.

Also whether any two processes measured on one GPU at the same time, from the same records: the
discipline is one timed process per GPU, and a run on several GPUs has to show it. And the time on
each device between one process and the next (between_jobs), which no process records: Snakemake
starting the next job and that job's launcher getting its lease.

A job's process measured by a measuring worker (fabench.measure.launch.worker) records which worker and
how many jobs it had run before: the worker's start-up (interpreter start, imports) lies in its
first job alone, and each job has the worker's hand-over instead.

On a CPU nothing compiles and the warm-up before the timed loops is empty (cpu.max_warmup_ms: 0):
the warm-up is the checked first call, so there that phase counts as warm-up, where a GPU files it
under compiling. The fp32 reference is a kind of work of its own: it grows with the shapes, and on
a CPU it can take most of a process. Each kind of work names the config setting that cuts it
(SETTINGS); the GPU trials' stop reasons (fabench.measure.stopping: converged, noise_converged,
timeout at timing.max_trial_ms) are counted, since timed-out trials are what timing.max_trial_ms
costs.
"""

from __future__ import annotations

from collections import defaultdict

from fabench.analysis.result_types import BackendEntry, Method, backend_dicts, method_of
from fabench.platforms import PlatformName
from fabench.report.precompile_summary import compile_ahead_summary

# Phase -> the kind of work it is, in the order the report lists the kinds.
GROUPS = {
    "start-up": ("interpreter start", "imports", "worker hand-over", "job reset", "device set-up",
                 "aiter config read-back"),
    "inputs and fp32 reference": ("inputs and fp32 reference",),
    "compiling and the correctness check": ("prepare", "first call and check"),
    "kernel identification": ("profiler start-up", "kernel identification", "device timer set-up"),
    "measuring: warm-up": ("warm-up",),
    "measuring: timed loops": ("device loop", "kernel loop", "wall loop"),
    "independent checks": ("do_bench", "profiler", "kernel-time check"),
    "ending": ("release", "provenance", "write and exit"),
}
GROUP_OF = {phase: group for group, phases in GROUPS.items() for phase in phases}
# A measuring worker's own start-up, before any job handed it a GPU (recorded in its first job).
WORKER_START_UP = ("interpreter start", "imports")
# On a CPU the checked first call is the warm-up (see the module's docstring).
CPU_GROUP_OF = {**GROUP_OF, "first call and check": "measuring: warm-up"}
MEASURING = ("measuring: warm-up", "measuring: timed loops")
# The setting that cuts each kind of work, on a GPU and on a CPU (None: no setting does).
SETTINGS = {
    "start-up": ("measure.mode", "cpu.repeats"),
    "inputs and fp32 reference": ("shapes", "shapes"),
    "compiling and the correctness check": ("backends", "cpu.leave_out"),
    "kernel identification": (None, None),
    "measuring: warm-up": ("timing.max_warmup_ms", "shapes"),
    "measuring: timed loops": ("timing.trials", "cpu.min_trial_ms"),
    "independent checks": ("timing.do_bench", None),
    "ending": (None, None),
    "other": (None, None),
}
# Why a GPU trial's profiled stream stopped (fabench.measure.stopping.STOP_REASONS; the analysis
# does not import the measuring package): its noise fell under timing.max_noise, its noise settled
# above it, or timing.max_trial_ms ran out.
STOP_REASONS = ("converged", "noise_converged", "timeout")
TIMEOUT = "timeout"
# Of the timeouts, those whose samples cost the host more than the settled clause needs within
# timing.max_trial_ms (the trial's stop record: settle_reachable false; docs/timing.md states the bound).
OUT_OF_REACH = "timeout_settle_out_of_reach"


def process_phases(timeline: dict, ended: dict | None) -> list[dict]:
    """A process's phases, with the two the runner's record gives (start-up, exit) added."""
    phases = list(timeline.get("phases") or [])
    if not phases:
        return []
    first = min(p["start"] for p in phases)
    last = max(p["end"] for p in phases)
    spawned = (ended or {}).get("spawned_at") or timeline.get("spawned_at")
    derived = []
    if (timeline.get("worker") or {}).get("jobs_before", 0) > 0:
        spawned = None  # the worker started long before, for an earlier job that shows it
    if spawned is not None and spawned <= first:
        derived.append({"phase": "interpreter start", "start": spawned, "end": first})
    exited = (ended or {}).get("exited_at")
    if exited is not None and exited >= last:
        derived.append({"phase": "write and exit", "start": last, "end": exited})
    return derived + phases


def trial_stops(results: list[dict]) -> dict[str, int] | None:
    """How many trials stopped for each reason (STOP_REASONS, then any other recorded); None
    where no trial recorded one (a CPU run, or results from before the stopping rule)."""
    counts = dict.fromkeys(STOP_REASONS, 0)
    recorded = False
    for result in results:
        for backend in backend_dicts(result).values():
            if backend.get("measured_in"):  # a report's copy of a cell measured once per shape
                continue
            for trial in BackendEntry.of(backend).trials:
                stopped = (trial.get("stop") or {}).get("stopped")
                if stopped == TIMEOUT and (trial["stop"]).get("settle_reachable") is False:
                    counts[OUT_OF_REACH] = counts.get(OUT_OF_REACH, 0) + 1
                if stopped:
                    recorded = True
                    counts[stopped] = counts.get(stopped, 0) + 1
    return counts if recorded else None


def loops_at_minimum(results: list[dict]) -> bool:
    """Whether every trial ran only its job's least iterations (method.iters): no trial was
    lengthened to last min_trial_ms, so lowering that setting would shorten nothing."""
    trials = [(t.get("iters"), Method.of(r).iters) for r in results
              for b in backend_dicts(r).values() for t in BackendEntry.of(b).trials]
    return bool(trials) and all(ran is not None and ran == least for ran, least in trials)


def largest_item(groups: list[dict], cpu: bool, stops: dict | None, workers: int,
                 at_minimum: bool = False) -> dict | None:
    """The kind of work that took the most time, and the setting that would cut it: on a GPU,
    timed loops whose trials ran out of time are cut by timing.max_trial_ms, and start-up that
    measuring workers already pay once each by fewer processes per job (timing.repeats); on a CPU,
    timed loops whose trials all ran their least iterations (`at_minimum`) by fewer trials."""
    if not groups:
        return None
    top = max(groups, key=lambda g: g["seconds"])
    setting = SETTINGS.get(top["group"], (None, None))[1 if cpu else 0]
    if top["group"] == "measuring: timed loops" and cpu and at_minimum:
        setting = "cpu.trials"
    if top["group"] == "measuring: timed loops" and not cpu and stops and stops.get("timeout"):
        setting = "timing.max_trial_ms"
    if top["group"] == "start-up" and not cpu and workers:
        setting = "timing.repeats"
    return {"group": top["group"], "seconds": top["seconds"], "share": top["share"], "setting": setting}


def job_processes(result: dict) -> list[dict]:
    """Each process of a job's result: its index, GPU, span and phases (none for results measured
    before time lines were recorded)."""
    exits = {e["index"]: e for e in method_of(result).get("process_exits") or []}
    processes = []
    for timeline in result.get("timelines") or []:
        ended = exits.get(timeline.get("process"))
        phases = process_phases(timeline, ended)
        if not phases:
            continue
        start = min(p["start"] for p in phases)
        # On its GPU from its job's hand-over: a worker's start-up touches no device, and one
        # started ahead (fabench.measure.launch.worker_client.start_ahead) made it while another
        # job measured on that GPU.
        on_device = [p["start"] for p in phases if p["phase"] not in WORKER_START_UP] if timeline.get("worker") else []
        on_gpu_from = min(on_device, default=start)
        started_up = [p["end"] for p in phases if p["phase"] in WORKER_START_UP and p["end"] <= on_gpu_from]
        processes.append({"job": f"{result['variant']} {result['shape_id']}", "process": timeline.get("process"),
                          "gpu": (ended or {}).get("gpu_uuid"), "host": (ended or {}).get("host"),
                          "start": start, "end": max(p["end"] for p in phases),
                          "on_gpu_from": on_gpu_from,
                          "launcher": (ended or {}).get("launcher"),
                          # A worker started ahead, idle from its start-up's end to its first job:
                          # no work of the run's, so not in the processes' time.
                          "waiting_s": on_gpu_from - max(started_up) if on_device and started_up else 0.0,
                          "worker": worker_name(timeline, ended),
                          # A spare an earlier run left (worker.Worker.leave_spare), adopted by this one.
                          "adopted": bool((timeline.get("worker") or {}).get("adoption")),
                          "phases": phases})
    return processes


def worker_name(timeline: dict, ended: dict | None) -> str | None:
    """The measuring worker that measured the process (on its host), None for a process of its own."""
    worker = timeline.get("worker")
    return f"{(ended or {}).get('host')}:{worker['name']}:{worker['pid']}" if worker else None


def run_time_line(results: list[dict], workflow_started_at: float | None = None,
                  report_at: float | None = None, compile_ahead: dict | None = None) -> dict | None:
    """The run's time by kind of work, summed over its processes, and its spans; None when no
    result recorded a time line. `compile_ahead`: the record of the kernels compiled before the
    measuring processes (fabench.measure.launch.precompile), if the run has one."""
    processes = [p for r in results for p in job_processes(r)]
    if not processes:
        return None
    cpu = all(r.get("platform") == PlatformName.CPU for r in results)
    by_group, by_phase = seconds_by_kind(processes, CPU_GROUP_OF if cpu else GROUP_OF)
    waiting = sum(p["waiting_s"] for p in processes)
    in_processes = sum(p["end"] - p["start"] for p in processes) - waiting
    first, last = min(p["start"] for p in processes), max(p["end"] for p in processes)
    ahead = _this_workflows(compile_ahead, workflow_started_at)
    # The measuring workers it started import beside it: the jobs' span begins when it ended.
    first_job = max(first, ahead["ended_at"]) if ahead else first
    groups = group_shares(by_group, in_processes)
    workers = len({p["worker"] for p in processes if p["worker"]})
    stops = trial_stops(results)
    return {
        "cpu": cpu,
        "jobs": len({p["job"] for p in processes}),
        "processes": len(processes),
        "in_processes_s": in_processes,
        "workers_waiting_s": waiting,
        "measuring_s": sum(by_group[g] for g in MEASURING),
        "groups": groups,
        "phases": dict(sorted(by_phase.items(), key=lambda item: -item[1])),
        "measure_span_s": last - first_job,
        **workflow_spans(processes, first, last, workflow_started_at, report_at),
        **_compile_ahead_spans(ahead, processes, workflow_started_at),
        "gpus": sorted({p["gpu"] for p in processes if p["gpu"]}),
        "workers": workers,
        "in_workers": sum(1 for p in processes if p["worker"]),
        "adopted_workers": adopted_workers(processes),
        "overlaps": gpu_overlaps(processes) + compiled_while_measuring(processes, ahead),
        "compile_ahead": ahead and compile_ahead_summary(ahead),
        "between_jobs": between_jobs(processes),
        "trial_stops": stops,
        "largest": largest_item(groups, cpu, stops, workers, loops_at_minimum(results)),
    }


def adopted_workers(processes: list[dict]) -> int:
    """How many of the measuring workers were spares an earlier run left (docs/worker.md, Spares)."""
    return len({p["worker"] for p in processes if p["worker"] and p["adopted"]})


def _this_workflows(compile_ahead: dict | None, workflow_started_at: float | None) -> dict | None:
    """Only this workflow's compile ahead: one recorded by an earlier Snakemake is not in its span."""
    if compile_ahead and not (workflow_started_at and compile_ahead.get("started_at", 0) < workflow_started_at):
        return compile_ahead
    return None


def _compile_ahead_spans(ahead: dict | None, processes: list[dict], workflow_started_at: float | None) -> dict:
    """With a compile ahead: Snakemake's time before it, and from its end to the first job on a device."""
    return {
        "before_compile_ahead_s": (ahead["started_at"] - workflow_started_at) if ahead and workflow_started_at else None,
        "after_compile_ahead_s": (min(_on_gpu_from(p) for p in processes) - ahead["ended_at"]) if ahead else None,
    }


def seconds_by_kind(processes: list[dict], group_of: dict[str, str]) -> tuple[dict[str, float], dict[str, float]]:
    """The processes' seconds summed by kind of work (a phase no group names is "other") and by phase."""
    by_group: dict[str, float] = defaultdict(float)
    by_phase: dict[str, float] = defaultdict(float)
    for process in processes:
        for phase in process["phases"]:
            seconds = phase["end"] - phase["start"]
            by_phase[phase["phase"]] += seconds
            by_group[group_of.get(phase["phase"], "other")] += seconds
    return by_group, by_phase


def group_shares(by_group: dict[str, float], in_processes: float) -> list[dict]:
    """Each kind of work that took any time, in the report's order, with its share of the processes' time."""
    return [{"group": g, "seconds": by_group[g], "share": by_group[g] / in_processes if in_processes else 0.0}
            for g in [*GROUPS, "other"] if by_group.get(g)]


def workflow_spans(processes: list[dict], first: float, last: float, workflow_started_at: float | None,
                   report_at: float | None) -> dict:
    """The workflow's time around its processes, and which processes an earlier workflow measured."""
    measured_here = bool(workflow_started_at) and workflow_started_at <= first
    return {
        "workflow_s": (report_at - workflow_started_at) if workflow_started_at and report_at else None,
        # Only when this workflow measured (a later re-render starts after the processes ran): what
        # Snakemake did before the first process (checking the config, patching the Triton
        # configs, an image), and from the last process's end to this report (collecting, figures).
        "before_first_process_s": (first - workflow_started_at) if measured_here else None,
        "after_last_process_s": (report_at - last) if measured_here and report_at else None,
        # Processes an earlier Snakemake measured: all of them when this one only rendered the
        # report, some when it measured the others again (a failed process re-run).
        "measured_before_workflow": bool(workflow_started_at and first < workflow_started_at),
        "earlier_processes": sum(1 for p in processes if workflow_started_at and p["start"] < workflow_started_at),
    }


def gpu_overlaps(processes: list[dict]) -> list[str]:
    """Pairs of processes that measured on one GPU at the same time (there should be none); a
    process is on its GPU from `on_gpu_from` (its job's hand-over, in a worker) to its end."""
    found = []
    for latest, after in _one_after_another([p for p in processes if p["gpu"]]):
        if _on_gpu_from(after) < latest["end"]:
            together = min(latest["end"], after["end"]) - _on_gpu_from(after)
            found.append(f"{latest['job']} process {latest['process']} and {after['job']} process "
                         f"{after['process']} on {after['gpu']}: {together:.2f} s together")
    return found


def compiled_while_measuring(processes: list[dict], record: dict | None) -> list[str]:
    """Measuring processes on the compile ahead's GPU while it held it (there should be none: the
    Snakefile starts it before any job)."""
    if not record or not record.get("gpu_uuid"):
        return []
    return [f"{p['job']} process {p['process']} measured on {p['gpu']} while kernels were compiled ahead there"
            for p in processes
            if p["gpu"] == record["gpu_uuid"] and p["host"] == record.get("host")
            and _on_gpu_from(p) < record["ended_at"] and p["end"] > record["leased_at"]]


def between_jobs(processes: list[dict]) -> dict | None:
    """The time on each device between one process's end and the next one's measurement, summed
    (None when no process followed another). Where the next job's launcher recorded when it started
    and held its device (fabench.measure.launch.runner), each gap is split. A launcher started after
    the end: in three, until it started (Snakemake noticing the end and starting the next job, the
    last launcher's exit, the shell), in the launcher until it held the device (its interpreter,
    imports and lease), and from then to the measurement's start (the worker reached, the job
    handed over; in isolate mode the measuring process started). A launcher started before the end,
    ready and waiting for the lease (fabench.slots): in two, from the end to the lease (the previous
    launcher's exit, the lease's wake-up) and from the lease to the measurement's start. Jobs that
    ran side by side on one device leave no gap."""
    gaps, parts, ready = [], [], []
    for latest, after in _one_after_another(processes):
        begins = _on_gpu_from(after)
        if begins > latest["end"]:
            gaps.append(begins - latest["end"])
            launcher = after.get("launcher") or {}
            started, leased = launcher.get("started_at"), launcher.get("leased_at")
            if started is None or leased is None or not started <= leased <= begins:
                continue
            if latest["end"] <= started:
                parts.append((started - latest["end"], leased - started, begins - leased))
            elif latest["end"] <= leased:
                ready.append((leased - latest["end"], begins - leased))
    if not gaps:
        return None
    return {"gaps": len(gaps), "seconds": sum(gaps), "split": len(parts),
            "before_launcher_s": sum(p[0] for p in parts), "launcher_s": sum(p[1] for p in parts),
            "to_measuring_s": sum(p[2] for p in parts), "ready": len(ready),
            "ready_to_lease_s": sum(r[0] for r in ready), "ready_to_measuring_s": sum(r[1] for r in ready)}


def _one_after_another(processes: list[dict]):
    """On each device (host and GPU; a CPU's processes share theirs), each process in the order
    they reached it, with the process before it that ended last: the one it overlaps or follows."""
    by_device = defaultdict(list)
    for process in processes:
        by_device[(process["host"], process["gpu"])].append(process)
    for group in by_device.values():
        group.sort(key=_on_gpu_from)
        latest = group[0]
        for after in group[1:]:
            yield latest, after
            if after["end"] > latest["end"]:
                latest = after


def _on_gpu_from(process: dict) -> float:
    return process.get("on_gpu_from", process["start"])
