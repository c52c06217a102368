"""The workflow's plan, made once when Snakemake reads the Snakefile: the checked config, the platform
and runtime the jobs run on, the runs, variants and shapes, how a job is launched, and what the
archive and the sweep add. workflow/rules/common.smk builds one Plan and its rules call it.

Every problem found here is a PlanError of one line (which key or setting, what was expected),
raised before any job starts. Nothing here imports Snakemake: the tests build plans directly. The
plan only decides, from what it reads (the config, the environment, the checkout's commit, the
installed aiter): it writes no file, compiles nothing, stops no worker and asks no Docker engine;
what the workflow does to the machine as it starts and ends is fabench.workflow_hooks'.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from functools import cached_property
from pathlib import Path

from fabench import aiter_config, slots
from fabench import config as fabench_config
from fabench.container import recipe as image_recipe
from fabench.gitinfo import git_commit
from fabench.measure.launch import lease
from fabench.measure.launch.devices import DECLARED_ENV, DeviceError
from fabench.measure.launch.runner import MEASURED_AGAIN_MAX
from fabench.measure.spec import CPU_OVERRIDES, Settings, job_settings, job_spec
from fabench.places import check_env_places
from fabench.results.merge import times_lost
from fabench.platforms import PlatformError, PlatformName
from fabench.planned_platform import PLATFORM_HINT, planned_platform
from fabench.shapes import shape_id
from fabench.tune import settings as sweep_settings
from fabench.tune.space import stages as sweep_stages
from fabench.workflow_config import check_config

# The schema's pattern for a variant's name (config.schema.yaml).
VARIANT_NAME = r"[A-Za-z0-9][A-Za-z0-9_-]*"


class PlanError(ValueError):
    """The workflow cannot run as configured: one line naming the key or setting."""


# The rules whose jobs measure on the workflow's GPUs apart from a run's report, which may come
# before them (Plan.spares_once_measured): the sweep's stages.
MEASURING_APART = frozenset({"sweep_stage"})


def submits_jobs(nodes: int | None, remote: bool) -> bool:
    """Whether this Snakemake submits its jobs to a cluster or cloud executor, each job in an
    allocation of its own (so this host's one-at-a-time rule for CPU jobs does not apply there),
    decided from Snakemake's own settings as the Snakefile has them when it is parsed: the
    executor itself is named to the Snakefile only once the jobs run, after the plan is made.

    Snakemake's own reading: a non-local executor runs only with --jobs
    (workflow.resource_settings.nodes; a local run's --jobs becomes its --cores), and with `nodes`
    set its job scheduler stops limiting this host's cores, "cluster/cloud submission". A job's
    own Snakemake on a cluster node runs in remote mode (workflow.remote_exec). The workflow
    decides this once (common.smk's CLUSTER) and every rule and handler reads that."""
    return nodes is not None or remote


def project_commit(project: Path, told: str = "") -> str:
    """This checkout's commit, marked -dirty when files differ from it (recorded in every result).

    `told` (FABENCH_PROJECT_COMMIT), when set, is taken instead: a copy of the checkout (a remote
    machine, an unpacked archive) may carry no .git, or another commit's .git, and is told its commit.
    """
    told = told.strip()
    if told:
        if not re.fullmatch(r"[0-9a-f]{7,40}(-dirty)?", told):
            raise PlanError(f"FABENCH_PROJECT_COMMIT: {told!r} is not a git commit id")
        return told
    return git_commit(project, mark_dirty=True) or "unknown"


def place_problems(env) -> list[str]:
    """Each environment variable that names a place (the workers' and the leases' folders and the
    like) checked before any job, a line each naming the variable and the fix: a file, a dangling
    link, a folder read-only, another user's or writable by others, a path too long for a socket.
    The check is fabench.places', the one the jobs make at run time too."""
    return check_env_places(dict(env))


class HowToMeasure:
    """How a job is measured, not what (mode, idle time, timeout): Snakemake records only plain values
    of a rule's params, so a change of these (a Slurm plan: isolate) leaves finished results finished."""

    def __init__(self, options: str):
        self.options = options

    def __str__(self) -> str:
        return self.options


class Plan:
    """What the rules need of a checked config. `project` is the folder of the Snakefile."""

    def __init__(self, config: dict, project: Path, docker: bool, platform: str):
        self.config, self.project, self.docker = config, Path(project), docker
        self.platform = PlatformName.parse(platform)
        run = config["run"]
        # One run per platform image when config lists several (run <run>-<label>), else the one run.
        self.runs = {f"{run}-{label}": label for label in config["platforms"]} or {run: None}
        self.shapes = {shape_id(shape): shape for shape in config["shapes"]}
        self.variants = list(config["variants"])
        # What every job measures with on the planned platform (a CPU's counts the cpu block's).
        self.settings = Settings.of(config, self.platform)
        self.processes = self.settings.timing.repeats  # measuring processes per job
        self.python = sys.executable
        self.started_at = time.time()
        self.commit = "unknown"  # the checkout's commit (project_commit), set by `checked`
        self._image_tags: dict[str, str] = {}  # run -> its image's tag, hashed once

    @staticmethod
    def check(config: dict, project: Path) -> None:
        """The config as the user layered it, before the schema's defaults fill it: PlanError."""
        try:
            check_config(config, Path(project))
        except fabench_config.ConfigError as err:
            raise PlanError(f"invalid config: {err}") from None

    @classmethod
    def checked(cls, config: dict, project: Path, docker: bool, env: dict | None = None) -> "Plan":
        """The plan of a checked config with the schema's defaults, once the environment and the
        platform's roles are checked too; PlanError otherwise. `docker`: whether the jobs run in
        containers (fabench.planned_platform.use_docker, asked by the workflow: it may ask the engine)."""
        project = Path(project)
        env = os.environ if env is None else env
        try:
            problem = docker and image_recipe.build_args_error(config, project)
            if problem:  # the image settings are read in the docker runtime only
                raise PlanError(f"invalid config: {problem}")
            platform = planned_platform(docker)
            fabench_config.check_roles(config, platform)
        except PlatformError as err:
            raise PlanError(str(err)) from None
        except fabench_config.ConfigError as err:
            raise PlanError(f"invalid config: {err}; {PLATFORM_HINT}") from None
        problems = place_problems(env)
        if problems:
            raise PlanError("invalid environment: " + "; ".join(problems))
        try:
            lease.check_environment(dict(env))
        except DeviceError as err:
            raise PlanError(f"invalid environment: {err}") from None
        plan = cls(config, project, docker, platform)
        plan.check_local_aiter()
        plan.commit = project_commit(project, env.get("FABENCH_PROJECT_COMMIT", ""))
        return plan

    def path(self, path: str) -> str:
        """Paths in the config are relative to the project, whatever the working directory."""
        return path if os.path.isabs(path) else str(self.project / path)

    def unused_on_cpu(self, command_line: dict) -> str | None:
        """One line when --config sets a count that a CPU run does not use (the cpu block's own apply
        there: fabench.measure.spec.Settings.timing_on) to a value other than the one in effect, else None.
        Config files may set both, for a GPU and a CPU; a command line is meant for this host."""
        if self.platform.is_gpu:
            return None
        used = vars(self.settings.timing)
        timing = command_line.get("timing") if isinstance(command_line.get("timing"), dict) else {}
        given = {**{key: command_line[key] for key in ("warmup", "iters") if key in command_line},
                 **{f"timing.{key}": timing[key] for key in CPU_OVERRIDES if key in timing}}
        unused = [f"{name}={value} (used: cpu.{name.split('.')[-1]}={used[name.split('.')[-1]]})"
                  for name, value in given.items() if value != used[name.split(".")[-1]]]
        if not unused:
            return None
        # the example sets, in the cpu block, the first count given that changes nothing here
        key, value = next((n.split(".")[-1], v) for n, v in given.items() if v != used[n.split(".")[-1]])
        return (f"warning: on a CPU {', '.join(unused)} changes nothing: set the cpu block instead, "
                f"e.g. --config 'cpu={{{key}: {value}}}' (docs/usage.md, On a CPU)")

    # --- checks before any job ---------------------------------------------------------------------
    def check_local_aiter(self) -> None:
        """Locally, an installed aiter whose MHA config is not found is refused in one line naming its
        version and the names looked for (in docker, the image build refuses it)."""
        if self.docker:
            return
        package = aiter_config.installed_aiter_dir()
        if package is None or not (package / "ops" / "triton").is_dir():
            return  # no AMD aiter: the Triton backend says so per cell
        try:
            aiter_config.require_mha_config(package)
        except aiter_config.MhaConfigNotFound as err:
            raise PlanError(f"invalid setup: {err}") from None

    submits_jobs = staticmethod(submits_jobs)
    def measuring_slots(self, given: int | None, cores: int | None,
                        cluster: bool = False) -> tuple[int | None, str | None]:
        """How many measuring jobs (resource `gpu`, one per job) may run at once, and a warning line: on
        a GPU host's local executor fabench.slots' (GPUs declared in FABENCH_GPUS count as GPUs); under a
        cluster executor (each job in an allocation of its own) the user's --resources gpu; on a CPU one
        at a time whatever --cores says (the jobs time the cores they share), a --resources gpu above 1 refused."""
        if cluster:
            return given, None
        if self.platform.is_gpu or os.environ.get(DECLARED_ENV):
            return slots.gpu_host_slots(given, cores, self.leasable_gpus)
        if given is not None and given > 1:
            raise PlanError(f"--resources gpu={given}: the jobs measure on this host's CPU, and jobs timed side "
                            "by side share its cores; leave gpu unset (or 1) on a CPU host")
        note = (f"note: --cores {cores} on a CPU host: the measuring jobs run one at a time (each times the "
                "cores the others would share); only the host steps run beside them") if (cores or 1) > 1 else None
        return 1, note

    def measure_threads(self, cluster: bool) -> int:
        """Rule measure's threads: none where its jobs lease this host's GPUs on the local executor
        (fabench.slots), else one (a CPU job times the cores; a cluster job's threads are its cpus)."""
        return 0 if not cluster and self.leasable_gpus else 1

    @cached_property
    def leasable_gpus(self) -> int:
        """The GPUs a measure job leases among on this host (fabench.slots); 0 on a CPU host."""
        return slots.leasable_gpus(dict(os.environ)) if self.platform.is_gpu or os.environ.get(DECLARED_ENV) else 0

    def require_sweep(self) -> None:
        """One line naming what stops this run from sweeping, before any job starts: the config, or
        a host whose jobs cannot run the swept kernel (aiter's Triton kernel needs a GPU: importing
        it queries Triton's GPU driver)."""
        problem = sweep_settings.usage_error(self.config)
        if problem:
            raise PlanError(f"invalid config: {problem}")
        if not self.platform.is_gpu and not self.sweep["kernel_module"]:
            raise PlanError("cannot sweep here: the jobs would run on this host's CPU, and aiter's Triton kernel "
                            "needs a GPU (run the sweep on a GPU host, or set sweep.kernel_module to a kernel "
                            "that runs on a CPU)")

    # --- jobs ---------------------------------------------------------------------------------------
    @cached_property
    def job_order(self) -> dict:
        """Every (run, variant, shape) in one fixed order, the order of each round of processes."""
        jobs = [(run, v, s) for run in self.runs for v in self.variants for s in self.shapes]
        return {job: i for i, job in enumerate(jobs)}

    def process_priority(self, run: str, variant: str, shape: str, process: int) -> int:
        """Process 0 of every job first, then process 1, ..., each round in the same order of jobs,
        so that the processes of one cell lie a whole round apart (never back to back)."""
        position = self.job_order[(run, variant, shape)]
        return (self.processes - int(process)) * len(self.job_order) - position

    def job_spec_json(self, run: str, variant: str, shape: str) -> str:
        """What the job measures, as its params: it re-runs when this changes, and only then."""
        return job_spec(self.config, variant, self.shapes[shape], run=run, platform=self.platform,
                        shared_from=self.shared_from(variant)).to_json()

    def shared_from(self, variant: str) -> str | None:
        """The config's first variant, whose jobs measure the backends that read no variant config
        (each says so in its registration; the job picks them: fabench.results.shared); None for it."""
        first = self.variants[0]
        return None if variant == first else first

    def launcher(self, run: str, manifest: str, kernel_config: str, module: str = "fabench.measure") -> str:
        """The command that the runner's arguments follow: this Python, or the job's container.

        In docker, results/<run> is bind-mounted at the same absolute path and the working directory
        is the same, so the runner's relative paths under results/<run> hold."""
        if self.docker:
            chosen = [] if module == "fabench.measure" else ["--module", module]
            args = ["-m", "fabench.container", "run-job", *chosen, "--manifest", manifest,
                    "--aiter-config", kernel_config, "--results-dir", f"results/{run}",
                    "--cache-dir", self.image_settings(run)["cache_dir"], "--"]
        else:
            args = ["-m", module, "--aiter-config", kernel_config]
        return shlex.join([self.python, *args])

    # --- how measure jobs run their processes (fabench.measure.launch.worker_client; docs/worker.md) -------
    def measure_mode(self, cluster: bool) -> str:
        """measure.mode on the local executor. In the docker runtime (a container per job: a worker
        inside it would die with it) and under cluster executors (each job its own allocation) every
        measuring process is a process of its own: isolate."""
        return "isolate" if self.docker or cluster else self.config["measure"]["mode"]

    def measure_options(self, cluster: bool) -> HowToMeasure:
        """The runner's --mode, --worker-idle-s and --timeout-s (only the timeout in docker): not part
        of a result's identity (HowToMeasure)."""
        settings = self.config["measure"]
        options = ["--timeout-s", str(settings["job_timeout_s"])]
        if not self.docker:
            options += ["--mode", self.measure_mode(cluster), "--worker-idle-s", str(settings["worker_idle_s"])]
        return HowToMeasure(shlex.join(options))

    def spare_worker_s(self, cluster: bool) -> float:
        """How long each measuring worker this workflow ends leaves a spare waiting for the next run
        (fabench.measure.launch.worker.Worker.leave_spare): measure.spare_worker_s in worker mode on
        a GPU run; 0 on a CPU, whose cores a spare's imports would take from the next run's timed
        jobs (no worker is started ahead there either)."""
        if self.measure_mode(cluster) != "worker" or not self.platform.is_gpu:
            return 0
        return self.config["measure"]["spare_worker_s"]

    def spares_once_measured(self, cluster: bool, rules_to_run) -> float:
        """spare_worker_s where the report of the workflow's one run comes after its last measuring
        job, so that the workers leave their spares then (worker_client.leave_spares) and these
        import beside the report and Snakemake's end: one run, and none of the jobs to run
        (`rules_to_run`, their rules' names, as the Snakefile's onstart has them) measuring outside
        the report's inputs (MEASURING_APART: the sweep's stages). Else 0: their spares come at the
        workflow's end."""
        if len(self.runs) != 1 or MEASURING_APART & set(rules_to_run):
            return 0
        return self.spare_worker_s(cluster)

    @staticmethod
    def measured_again(process_file: str) -> str:
        """The runner's --measured-again for a job's process file (fabench.results.merge.times_lost):
        a count once the process was lost, so that the job's params change and Snakemake measures it
        again; nothing for a process never lost, whose params stay as they were."""
        count = times_lost(Path(process_file))
        return f" --measured-again {count}" if 0 < count <= MEASURED_AGAIN_MAX else ""

    def not_compiling_ahead(self, cluster: bool) -> str | None:
        """Why checkpoint compile_ahead compiles nothing, or None where it compiles: on the local executor in
        the local runtime only (a cluster job's node, a container's image have caches of their own), on
        a GPU run unless told `always` or `never`."""
        wanted = self.config["measure"]["compile_ahead"]
        if self.docker:
            return "the docker runtime: each job's container has the image's caches"
        if cluster:
            return "a cluster executor: each job's node has caches of its own"
        if wanted == "never" or (wanted == "gpu" and not self.platform.is_gpu):
            return f"measure.compile_ahead: {wanted}" + ("" if wanted == "never" else " on a CPU run")
        return None

    def compile_ahead_args(self, run: str, cluster: bool) -> str:
        """What checkpoint compile_ahead passes fabench.measure.launch.precompile: the spec of every measure
        job of the run, in the plan's order of jobs (stamps make a job compiled ahead before cost no
        process), or --skip and why it compiles nothing. A params of the rule: it runs again when a
        job's spec changes (its measure job does too)."""
        why = self.not_compiling_ahead(cluster)
        if why is not None:
            return shlex.join(["--skip", why])
        cells = [cell for cell in self.job_order if cell[0] == run]  # job_order is in the plan's order
        return shlex.join([arg for cell in cells for arg in ("--spec", self.job_spec_json(*cell))])

    @cached_property
    def compile_ahead_priority(self) -> int:  # above every process_priority: each run's compile ahead first
        return (self.processes + 1) * len(self.job_order)

    def triton_overrides(self, variant: str) -> dict:
        """The variant's entry for aiter's config, canonical (key order changes nothing)."""
        return fabench_config.variant_triton(self.config, variant)

    def expected_jobs(self, run: str) -> dict:
        """What the collector checks each result against: the job it should be, run as configured."""
        config = self.config
        return {
            "run": run,
            "settings_sha256": fabench_config.sha256_json(self.settings.to_dict()),
            "iterations": {"gpu": {k: config[k] for k in ("warmup", "iters")}, "cpu": config["cpu"]},
            "jobs": {f"{v}/{s}": fabench_config.variant_triton(config, v) for v in self.variants for s in self.shapes},
        }

    # --- the docker runtime -------------------------------------------------------------------------
    def image_settings(self, run: str) -> dict:
        """config's image, with the run's platform entry (several platform images) merged over it."""
        label = self.runs[run]
        override = self.config["platforms"][label] if label else {}
        build_args = {**self.config["image"]["build_args"], **override.get("build_args", {})}
        merged = {**self.config["image"], **override, "build_args": build_args}
        return {"dockerfile": Path(self.path(merged["dockerfile"])), "context": Path(self.path(merged["context"])),
                "name": merged["name"],
                "build_args": {str(k): "" if v is None else str(v) for k, v in build_args.items()},
                "cache_dir": self.path(merged["cache_dir"])}

    def image_manifest(self, run: str) -> str:
        """The run's image manifest (build/images/<tag>.json); its docker jobs depend on it."""
        if run not in self._image_tags:
            image = self.image_settings(run)
            if not image["dockerfile"].is_file():
                raise PlanError(f"invalid config: image.dockerfile: no Dockerfile at {image['dockerfile']}")
            self._image_tags[run] = image_recipe.image_tag(image["dockerfile"], image["build_args"],
                                                              name=image["name"], context=image["context"])
        return f"build/images/{image_recipe.manifest_name(self._image_tags[run])}"

    def image_to_build(self, manifest_stem: str) -> dict:
        """The image settings behind a manifest name (the build rule's params)."""
        for run in self.runs:
            if self.image_manifest(run) == f"build/images/{manifest_stem}.json":
                return self.image_settings(run)
        raise PlanError(f"no image of this config has the manifest build/images/{manifest_stem}.json")

    # --- archive and compare ------------------------------------------------------------------------
    def archive_state(self, own_receipts: list[str]) -> list[str]:
        """The checksum files of the entries now in the archive but this config's own runs (which
        stand in the DAG as their archive receipts), so that compare re-runs when one appears,
        changes or goes."""
        own = set()
        for receipt in map(Path, own_receipts):
            if receipt.is_file():
                own.add(os.path.normpath(Path(json.loads(receipt.read_text())["path"]) / "SHA256SUMS"))
        found = Path(self.config["archive"]["root"]).glob("*/*/SHA256SUMS")
        return sorted(str(p) for p in found if os.path.normpath(p) not in own)

    # --- the tuning sweep ---------------------------------------------------------------------------
    @property
    def sweep(self) -> dict | None:
        return self.config.get("sweep")

    @cached_property
    def sweep_stages(self) -> tuple:
        return sweep_stages(self.sweep["strategy"]) if self.sweep else ()

    @cached_property
    def sweep_shapes(self) -> dict:
        return sweep_settings.sweep_shapes(self.config) if self.sweep else {}

    @property
    def sweep_variant(self) -> str | None:
        return self.sweep["variant"]["name"] if self.sweep else None

    def sweep_base_variants(self) -> dict:
        """The config's variants but the sweep's own: the same whether or not the run was given the
        sweep's variants.yaml, so that giving it re-runs no step of the sweep."""
        return {k: v for k, v in self.config["variants"].items() if k != self.sweep_variant}

    def sweep_job_spec_json(self, stage: str, shape: str) -> str:
        """What a sweep job measures, as its params: it re-runs when this changes, and only then."""
        spec = sweep_settings.sweep_job_spec(self.config, job_settings(self.config), stage, self.sweep_shapes[shape])
        return json.dumps(spec, sort_keys=True)

