# Helpers shared by the rules: the checked config, the job list, paths, and how a job is launched.
import functools
import json
import os
import re
import shlex
import sys
import time
from pathlib import Path

import yaml

from snakemake.utils import min_version, update_config, validate

min_version("9.0")

from fabench import config as fabench_config
from fabench import config_layers as fabench_layers
from fabench.container import aiter_config as fabench_aiter
from fabench.container import image as fabench_image
from fabench.container import job as fabench_job
from fabench.files import write_json
from fabench.gitinfo import git_commit
from fabench.measure import lease as fabench_lease
from fabench.measure.devices import DeviceError
from fabench.run_platform import PLATFORM_HINT, PlatformError, planned_platform
from fabench.results import archive_read as fabench_archive
from fabench.shapes import SHAPE_ID_PATTERN, shape_id
from fabench.tune import settings as fabench_sweep
from fabench.tune.space import stages as sweep_stages
from fabench.watchdog import WORKFLOW_ENV, workflow_marker

SCHEMAS = Path(workflow.basedir) / "workflow" / "schemas"


def project_path(path):
    """Paths in the config are relative to the project, whatever the working directory."""
    return path if os.path.isabs(path) else os.path.join(workflow.basedir, path)


def layer_user_config():
    """A user's --configfile files, then --config, on top of config.yaml (fabench.config_layers):
    a block takes the keys a user sets and keeps the others; variants, shapes and platforms are
    taken whole from the last source that sets them; --config values typed as in a YAML file.
    """
    schema = yaml.safe_load((SCHEMAS / "config.schema.yaml").read_text())
    from_command_line = fabench_layers.command_line_values(
        dict(workflow.config_settings.config), schema, sys.argv
    )
    files = [
        yaml.safe_load(Path(path).read_text()) or {}
        for path in workflow.config_settings.configfiles
    ]
    update_config(config, from_command_line)
    fabench_layers.replace_whole_values(config, [*files, from_command_line])


def check_config():
    """One clear error naming the key, before any job starts; then the schema's defaults, and the
    roles of the platform the jobs will run on: that platform."""
    try:
        fabench_config.check(config, SCHEMAS, Path(workflow.basedir))
    except fabench_config.ConfigError as err:
        raise WorkflowError(f"invalid config: {err}") from None
    validate(config, schema=str(SCHEMAS / "config.schema.yaml"), set_default=True)
    try:
        if use_docker():  # the image settings are read in the docker runtime only
            fabench_config.check_build_args(config, Path(workflow.basedir))
    except fabench_config.ConfigError as err:
        raise WorkflowError(f"invalid config: {err}") from None
    try:
        platform = planned_platform(use_docker())
        fabench_config.check_roles(config, platform)
    except PlatformError as err:
        raise WorkflowError(str(err)) from None
    except fabench_config.ConfigError as err:
        raise WorkflowError(f"invalid config: {err}; {PLATFORM_HINT}") from None
    return platform


def check_devices():
    """A bad FABENCH_GPUS or visibility variable stops the run before any job starts."""
    try:
        fabench_lease.check_environment()
    except DeviceError as err:
        raise WorkflowError(f"invalid environment: {err}") from None


@functools.lru_cache(maxsize=1)
def use_docker():
    """runtime docker: yes; local: no; auto: with several platform images, or on a ROCm host whose
    Docker engine answers."""
    if config["runtime"] != "auto":
        return config["runtime"] == "docker"
    if config["platforms"]:
        return True
    return fabench_job.rocm_devices_present() and fabench_image.engine_answers(
        timeout=5
    )


layer_user_config()
# The platform the jobs will measure on, known without importing torch (fabench.run_platform).
PLATFORM = check_config()
check_devices()
# Jobs on this host stop when this Snakemake is gone (see fabench.watchdog).
os.environ[WORKFLOW_ENV] = workflow_marker()

RUN = config["run"]
# One run per platform image when config lists several (run <run>-<label>), else the one run.
RUNS = {f"{RUN}-{label}": label for label in config["platforms"]} or {RUN: None}
PYTHON = sys.executable
SHAPES = {shape_id(shape): shape for shape in config["shapes"]}
VARIANTS = list(config["variants"])
# Measuring processes per job: the count of the platform the jobs run on (a GPU's timing.repeats,
# a CPU's cpu.repeats).
PROCESSES = fabench_config.processes(config, PLATFORM)


wildcard_constraints:
    run="|".join(map(re.escape, RUNS)),
    variant="|".join(map(re.escape, VARIANTS)),
    shape=SHAPE_ID_PATTERN,
    process=r"\d+",


def project_commit():
    """This checkout's commit, marked -dirty when files differ from it (recorded in every result).

    FABENCH_PROJECT_COMMIT, when set, is taken instead: a copy of the checkout (a remote machine,
    an unpacked archive) may carry no .git, or another commit's .git, and is told its commit.
    """
    told = os.environ.get("FABENCH_PROJECT_COMMIT", "").strip()
    if told:
        if not re.fullmatch(r"[0-9a-f]{7,40}(-dirty)?", told):
            raise WorkflowError(
                f"FABENCH_PROJECT_COMMIT: {told!r} is not a git commit id"
            )
        return told
    return git_commit(workflow.basedir, mark_dirty=True) or "unknown"


PROJECT_COMMIT = project_commit()


def result_paths(run):
    return expand(
        "results/{run}/{variant}/{shape}.json",
        run=run,
        variant=VARIANTS,
        shape=list(SHAPES),
    )


def process_paths(wildcards):
    """The process files a job's result is merged from."""
    return expand(
        rules.measure.output[0],
        run=wildcards.run,
        variant=wildcards.variant,
        shape=wildcards.shape,
        process=range(PROCESSES),
    )


@functools.lru_cache(maxsize=None)
def job_order():
    """Every (run, variant, shape) in one fixed order, the order of each round of processes."""
    jobs = [(run, v, s) for run in RUNS for v in VARIANTS for s in SHAPES]
    return {job: i for i, job in enumerate(jobs)}


def process_priority(wildcards):
    """Process 0 of every job first, then process 1, ..., each round in the same order of jobs, so
    that the processes of one cell lie a whole round apart (never back to back across rounds).
    """
    order = job_order()
    position = order[(wildcards.run, wildcards.variant, wildcards.shape)]
    return (PROCESSES - int(wildcards.process)) * len(order) - position


def report_path(run):
    return f"results/{run}/report.md"


def all_runs(path_of):
    """A per-run path (or list of paths) for every run of this config."""
    return [path for run in RUNS for path in flatten([path_of(run)])]


def published_numbers():
    return project_path(config["published"]) if config["published"] else []


def job_spec_json(wildcards):
    """What the job measures, as its params: it re-runs when this changes, and only then."""
    spec = fabench_config.job_spec(
        config, wildcards.variant, SHAPES[wildcards.shape], run=wildcards.run
    )
    return json.dumps(spec, sort_keys=True)


# --- the docker runtime -------------------------------------------------------------------------
def image_settings(run):
    """config's image, with the run's platform entry (several platform images) merged over it."""
    label = RUNS[run]
    override = config["platforms"][label] if label else {}
    build_args = {**config["image"]["build_args"], **override.get("build_args", {})}
    merged = {**config["image"], **override, "build_args": build_args}
    return {
        "dockerfile": Path(project_path(merged["dockerfile"])),
        "context": Path(project_path(merged["context"])),
        "name": merged["name"],
        "build_args": {
            str(k): "" if v is None else str(v) for k, v in build_args.items()
        },
        "cache_dir": project_path(merged["cache_dir"]),
    }


# The rules whose jobs talk to the Docker engine when the runtime is docker.
# When this Snakemake started (its Snakefile parsed), written once the workflow runs (onstart), so
# that the report can say how long the whole run took, from Snakemake's start to the report.
WORKFLOW_STARTED = Path(".snakemake") / "fabench-workflow-started.json"
WORKFLOW_STARTED_AT = time.time()


def record_workflow_start():
    write_json(
        WORKFLOW_STARTED, {"started_at": WORKFLOW_STARTED_AT, "pid": os.getpid()}
    )


ENGINE_RULES = {"build_image", "patch_config", "measure"}


def check_engine(jobs):
    """Before the first job: a docker run whose engine does not answer stops with one line saying
    where it looked and how to point at one. A dry run, or a run with nothing for the engine to
    do (archive, compare, a finished run), needs none."""
    if use_docker() and any(job.rule.name in ENGINE_RULES for job in jobs):
        try:
            fabench_image.client(timeout=10).close()
        except fabench_image.NoEngineError as err:
            raise WorkflowError(f"runtime docker: {err}") from None


def check_local_aiter():
    """Locally, an installed aiter whose MHA config is not found is refused before any job, in one
    line naming its version and the names looked for (in docker, the image build refuses it).
    """
    if use_docker():
        return
    package = fabench_aiter.installed_aiter_dir()
    if package is None or not (package / "ops" / "triton").is_dir():
        return  # no AMD aiter: the Triton backend says so per cell
    try:
        fabench_aiter.require_mha_config(package)
    except fabench_aiter.MhaConfigNotFound as err:
        raise WorkflowError(f"invalid setup: {err}") from None


check_local_aiter()


@functools.lru_cache(maxsize=None)
def image_tag(run):
    image = image_settings(run)
    if not image["dockerfile"].is_file():
        raise WorkflowError(
            f"invalid config: image.dockerfile: no Dockerfile at {image['dockerfile']}"
        )
    return fabench_image.image_tag(
        image["dockerfile"],
        image["build_args"],
        name=image["name"],
        context=image["context"],
    )


def image_manifest(run):
    """The run's image manifest (build/images/<tag>.json); its docker jobs depend on it."""
    return f"build/images/{fabench_image.manifest_name(image_tag(run))}"


def image_to_build(wildcards):
    """The image settings behind a manifest name (the build rule's params)."""
    for run in RUNS:
        if image_manifest(run) == f"build/images/{wildcards.image}.json":
            return image_settings(run)
    raise WorkflowError(
        f"no image of this config has the manifest build/images/{wildcards.image}.json"
    )


def docker_manifest(wildcards):
    return image_manifest(wildcards.run) if use_docker() else []


def job_launcher(wildcards, input):
    """The command that the runner's arguments follow: this Python, or the job's container.

    In docker, results/<run> is bind-mounted at the same absolute path and the working directory
    is the same, so the runner's relative paths under results/<run> hold.
    """
    if use_docker():
        args = container_job_args(wildcards.run, input.manifest, input.kernel_config)
    else:
        args = ["-m", "fabench.measure", "--aiter-config", input.kernel_config]
    return shlex.join([PYTHON, *args])


def container_job_args(run, manifest, aiter_config, module=None):
    """`-m fabench.container run-job ... --`: a job in the run's container (`module` in place of
    fabench.measure), with aiter_config mounted over aiter's packaged file."""
    chosen = ["--module", module] if module else []
    return [
        "-m",
        "fabench.container",
        "run-job",
        *chosen,
        "--manifest",
        manifest,
        "--aiter-config",
        aiter_config,
        "--results-dir",
        f"results/{run}",
        "--cache-dir",
        image_settings(run)["cache_dir"],
        "--",
    ]


# --- how measure jobs run their processes (fabench.measure.worker_client; docs/worker.md) ---------
def measure_mode():
    """measure.mode on the local executor. In the docker runtime (a container per job: a worker
    inside it would die with it) and under cluster executors (each job its own allocation) every
    measuring process is a process of its own: isolate."""
    if use_docker() or workflow.non_local_exec or workflow.remote_exec:
        return "isolate"
    return config["measure"]["mode"]


def measure_options(wildcards):
    """The runner's --mode, --worker-idle-s and --timeout-s (only the timeout in docker)."""
    settings = config["measure"]
    options = ["--timeout-s", str(settings["job_timeout_s"])]
    if not use_docker():
        options += [
            "--mode",
            measure_mode(),
            "--worker-idle-s",
            str(settings["worker_idle_s"]),
        ]
    return shlex.join(options)


def stop_measuring_workers():
    """At the workflow's end, its measuring workers end at once instead of when idle."""
    from fabench.measure.worker_client import stop_workers

    if measure_mode() == "worker":
        stop_workers(os.environ[WORKFLOW_ENV])


# --- collect and report ---------------------------------------------------------------------------
REPORT_TEMPLATE_DIR = Path(workflow.basedir) / "report"
REPORT_TEMPLATES = sorted(map(str, REPORT_TEMPLATE_DIR.rglob("*.j2")))


def expected_jobs(wildcards):
    """What the collector checks each result against: the job it should be, run as configured."""
    return {
        "run": wildcards.run,
        "settings_sha256": fabench_config.sha256_json(
            fabench_config.job_settings(config)
        ),
        "iterations": {
            "gpu": {k: config[k] for k in ("warmup", "iters")},
            "cpu": config["cpu"],
        },
        "jobs": {
            f"{variant}/{shape}": config["variants"][variant]["triton"]
            for variant in VARIANTS
            for shape in SHAPES
        },
    }


# --- archive and compare -------------------------------------------------------------------------
def archive_state(wildcards):
    """The checksum files of the entries now in the archive (but this config's own runs, which
    stand in the DAG as their archive receipts), so that compare re-runs when one appears,
    changes or goes."""
    own = set()
    for run in RUNS:
        receipt = Path(archive_receipt(run))
        if receipt.is_file():
            own.add(
                os.path.normpath(
                    Path(json.loads(receipt.read_text())["path"]) / "SHA256SUMS"
                )
            )
    found = Path(config["archive"]["root"]).glob("*/*/SHA256SUMS")
    return sorted(str(p) for p in found if os.path.normpath(p) not in own)


def archive_fingerprint(wildcards):
    """Each archived entry's id and a digest of its files now (fabench.results.archive_read)."""
    return fabench_archive.archive_fingerprint(config["archive"]["root"])


def archive_receipt(run):
    return f"results/{run}/archived.json"


# The schema's pattern for a variant's name (workflow/schemas/config.schema.yaml).
VARIANT_NAME = r"[A-Za-z0-9][A-Za-z0-9_-]*"


def compared_variants():
    """This config's variants, then every other variant an archived entry holds (its config.json
    names them): compare draws a figure for each."""
    names = list(VARIANTS)
    for sums in archive_state(None):
        try:
            archived = json.loads((Path(sums).parent / "config.json").read_text())
            names += [
                name
                for name in archived["variants"]
                if isinstance(name, str) and re.fullmatch(VARIANT_NAME, name)
            ]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a broken entry: compare names it and leaves it out
    return list(dict.fromkeys(names))


COMPARED_VARIANTS = compared_variants()


# --- the tuning sweep (workflow/rules/tune.smk) ----------------------------------------------------
SWEEP = config.get("sweep")
SWEEP_STAGES = sweep_stages(SWEEP["strategy"]) if SWEEP else ()
SWEEP_SHAPES = fabench_sweep.sweep_shapes(config) if SWEEP else {}
SWEEP_VARIANT = SWEEP["variant"]["name"] if SWEEP else None


def sweep_jobs(run, stages=SWEEP_STAGES):
    """The sweep jobs' records of the given stages: one per (stage, shape)."""
    return expand(
        "results/{run}/tune/{stage}/{shape}.json",
        run=run,
        stage=stages,
        shape=list(SWEEP_SHAPES),
    )


def require_sweep():
    """One line naming the sweep key that stops a run from sweeping, before any job starts."""
    problem = fabench_sweep.usage_error(config)
    if problem:
        raise WorkflowError(f"invalid config: {problem}")


def sweep_variants_file(run):
    """The sweep's last output: the config's variants and the winner (a --configfile)."""
    require_sweep()
    return f"results/{run}/tune/variants.yaml"


def sweep_base_variants():
    """The config's variants but the sweep's own: the same whether or not the run was given the
    sweep's variants.yaml, so that giving it re-runs no step of the sweep."""
    return {k: v for k, v in config["variants"].items() if k != SWEEP_VARIANT}


def sweep_summary(wildcards):
    """The sweep's record, which the report shows when the run measures the sweep's variant."""
    if SWEEP and SWEEP_VARIANT in VARIANTS:
        require_sweep()
        return f"results/{wildcards.run}/tune/sweep.json"
    return []


def sweep_reference_config(wildcards):
    return f"results/{wildcards.run}/aiter-config/{SWEEP['reference']}.json"


def sweep_shortlist(wildcards):
    return (
        f"results/{wildcards.run}/tune/shortlist.json"
        if wildcards.stage == "refine"
        else []
    )


def sweep_shortlist_args(wildcards, input):
    return shlex.join(["--shortlist", input.shortlist]) if input.shortlist else ""


def sweep_job_spec_json(wildcards):
    """What a sweep job measures, as its params: it re-runs when this changes, and only then."""
    spec = fabench_sweep.job_spec(
        config,
        fabench_config.job_settings(config),
        wildcards.stage,
        SWEEP_SHAPES[wildcards.shape],
    )
    return json.dumps(spec, sort_keys=True)


def sweep_launcher(wildcards, input):
    """This Python, or the run's container, running fabench.tune with the reference's config."""
    if use_docker():
        args = container_job_args(
            wildcards.run, input.manifest, input.reference, "fabench.tune"
        )
    else:
        args = ["-m", "fabench.tune", "--aiter-config", input.reference]
    return shlex.join([PYTHON, *args])
