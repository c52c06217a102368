# Helpers shared by the rules: config validation, the job list, the command to run a job.
import functools
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from snakemake.utils import min_version, validate

min_version("9.0")

from fabench import config as fabench_config
from fabench.shapes import SHAPE_ID_PATTERN, shape_id


def validate_config():
    """One clear error naming the key, before any job starts."""
    try:
        validate(config, schema="../schemas/config.schema.yaml")
    except WorkflowError:
        schema = yaml.safe_load(open(os.path.join(workflow.basedir, "workflow/schemas/config.schema.yaml")))
        raise WorkflowError(f"invalid config: {fabench_config.schema_error(config, schema)}") from None


validate_config()

RUN = config["run"]
PYTHON = sys.executable
SHAPES = {shape_id(shape): shape for shape in config["shapes"]}
SHAPE_IDS = list(SHAPES)
VARIANTS = list(config["variants"])


wildcard_constraints:
    run=RUN,
    variant="|".join(VARIANTS),
    shape=SHAPE_ID_PATTERN,


def project_commit():
    """This checkout's commit, marked -dirty when files differ from it (recorded in every result)."""
    git = ["git", "-C", workflow.basedir]
    try:
        commit = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, OSError):
        # A copy without .git (a remote machine, an unpacked archive) can be told its commit.
        told = os.environ.get("FABENCH_PROJECT_COMMIT", "").strip()
        if told and not re.fullmatch(r"[0-9a-f]{7,40}(-dirty)?", told):
            raise WorkflowError(f"FABENCH_PROJECT_COMMIT: {told!r} is not a git commit id")
        return told or "unknown"
    return commit + ("-dirty" if dirty else "")


PROJECT_COMMIT = project_commit()


def run_dir():
    return f"results/{RUN}"


def result_paths():
    return expand("results/{run}/{variant}/{shape}.json", run=RUN, variant=VARIANTS, shape=SHAPE_IDS)


def report_path():
    return f"results/{RUN}/report.md"


def variant_overrides(wildcards):
    return json.dumps(config["variants"][wildcards.variant]["triton"], sort_keys=True)


def project_path(path):
    """Paths in config.yaml are relative to the project, whatever the working directory."""
    return path if os.path.isabs(path) else os.path.join(workflow.basedir, path)


def published_numbers():
    return project_path(config["published"]) if config.get("published") else []


def write_json(path, value):
    with open(path, "w") as handle:
        json.dump(value, handle, indent=2, sort_keys=True)
        handle.write("\n")


def job_spec_json(wildcards):
    shape = SHAPES[wildcards.shape]
    return json.dumps(fabench_config.job_spec(config, wildcards.variant, shape), sort_keys=True)


# --- the docker runtime ---------------------------------------------------------------------
# config["image"] (all optional):
#   dockerfile: Dockerfile      relative to the project root (the Snakefile's directory)
#   context: .                  build context, relative to the project root
#   name: fabench               image repository; the tag is <name>:<hash of Dockerfile, args, src>
#   build_args: {}              override the Dockerfile's ARG defaults (BASE_IMAGE, AITER_COMMIT,
#                               GPU_ARCHS, TRITON_VERSION, AITER_REPO, AITER_PREBUILD_KERNELS, MAX_JOBS)
#   cache_dir: build/container-cache   host dir for the job containers' Triton/aiter JIT caches
from fabench.container import image as fabench_container

_IMAGE = dict(config.get("image") or {})


IMAGE_DOCKERFILE = Path(project_path(_IMAGE.get("dockerfile") or "Dockerfile"))
IMAGE_CONTEXT = Path(project_path(_IMAGE.get("context") or "."))
IMAGE_NAME = _IMAGE.get("name") or fabench_container.DEFAULT_NAME
IMAGE_BUILD_ARGS = {str(k): "" if v is None else str(v) for k, v in (_IMAGE.get("build_args") or {}).items()}
IMAGE_CACHE_DIR = _IMAGE.get("cache_dir") or "build/container-cache"


def _engine_answers():
    return fabench_container.engine_answers(timeout=5)


@functools.lru_cache(maxsize=1)
def use_docker():
    """runtime docker: yes; local: no; auto: on a ROCm host whose Docker engine answers."""
    runtime = config.get("runtime", "auto")
    if runtime == "docker":
        return True
    if runtime == "local":
        return False
    return fabench_container.rocm_devices_present() and _engine_answers()


@functools.lru_cache(maxsize=1)
def image_tag():
    if not IMAGE_DOCKERFILE.is_file():
        raise WorkflowError(f"image.dockerfile: no Dockerfile at {IMAGE_DOCKERFILE}")
    return fabench_container.image_tag(IMAGE_DOCKERFILE, IMAGE_BUILD_ARGS, name=IMAGE_NAME,
                                       context=IMAGE_CONTEXT)


def image_manifest():
    """The image manifest (build/images/<tag>.json); a benchmark job in docker depends on it."""
    return f"build/images/{fabench_container.manifest_name(image_tag())}"


def job_launcher(wildcards, input):
    """The command a benchmark job's runner arguments follow: local python or the container.

    In docker, results/<run> is bind-mounted at the same absolute path and the working
    directory is the same, so the runner's relative paths under results/<run> hold.
    """
    if use_docker():
        return (f"{shlex.quote(PYTHON)} -m fabench.container.image run-job --manifest {image_manifest()} "
                f"--aiter-config {input.kernel_config} --results-dir results/{wildcards.run} "
                f"--cache-dir {shlex.quote(IMAGE_CACHE_DIR)} --")
    return f"{shlex.quote(PYTHON)} -m fabench.measure --aiter-config {shlex.quote(input.kernel_config)}"
