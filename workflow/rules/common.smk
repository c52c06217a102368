# Helpers shared by the rules: the checked config, the job list, paths, and how a job is launched.
import functools
import json
import os
import re
import shlex
import sys
from pathlib import Path

import yaml

from snakemake.utils import min_version, update_config, validate

min_version("9.0")

from fabench import config as fabench_config
from fabench.container import image as fabench_image
from fabench.container import job as fabench_job
from fabench.gitinfo import git_commit
from fabench.results import archive_read as fabench_archive
from fabench.shapes import SHAPE_ID_PATTERN, shape_id
from fabench.watchdog import WORKFLOW_ENV, workflow_marker

SCHEMAS = Path(workflow.basedir) / "workflow" / "schemas"


def project_path(path):
    """Paths in the config are relative to the project, whatever the working directory."""
    return path if os.path.isabs(path) else os.path.join(workflow.basedir, path)


def replace_keys_from_user_configfiles():
    """A top-level key set in a --configfile replaces config.yaml's value, mappings included.

    Snakemake merges mappings, so `variants: {mine: ...}` in a user's file would run config.yaml's
    variants as well; here a key the user sets means exactly what the user's file says. --config
    values still apply last.
    """
    for path in workflow.config_settings.configfiles:
        for key, value in (yaml.safe_load(Path(path).read_text()) or {}).items():
            config[key] = value
    update_config(config, workflow.config_settings.overwrite_config or {})


def check_config():
    """One clear error naming the key, before any job starts; then the schema's defaults."""
    try:
        fabench_config.check(config, SCHEMAS, Path(workflow.basedir))
    except fabench_config.ConfigError as err:
        raise WorkflowError(f"invalid config: {err}") from None
    validate(config, schema=str(SCHEMAS / "config.schema.yaml"), set_default=True)


replace_keys_from_user_configfiles()
check_config()
# Jobs on this host stop when this Snakemake is gone (see fabench.watchdog).
os.environ[WORKFLOW_ENV] = workflow_marker()

RUN = config["run"]
# One run per platform image when config lists several (run <run>-<label>), else the one run.
RUNS = {f"{RUN}-{label}": label for label in config["platforms"]} or {RUN: None}
PYTHON = sys.executable
SHAPES = {shape_id(shape): shape for shape in config["shapes"]}
VARIANTS = list(config["variants"])
# Measuring processes per job: as many as the most any platform asks for (a GPU timing.repeats, a
# CPU cpu.repeats); one beyond its own platform's count measures nothing (fabench.measure.job).
PROCESSES = max(config["timing"]["repeats"], config["cpu"]["repeats"])


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
        args = [
            "-m",
            "fabench.container",
            "run-job",
            "--manifest",
            input.manifest,
            "--aiter-config",
            input.kernel_config,
            "--results-dir",
            f"results/{wildcards.run}",
            "--cache-dir",
            image_settings(wildcards.run)["cache_dir"],
            "--",
        ]
    else:
        args = ["-m", "fabench.measure", "--aiter-config", input.kernel_config]
    return shlex.join([PYTHON, *args])


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
