# The docker runtime: the benchmark image (one per content hash) and aiter's config per variant.
# The work is in fabench.container; these rules only name files.
#
# config["image"] (all optional):
#   dockerfile: Dockerfile      relative to the project root (the Snakefile's directory)
#   context: .                  build context, relative to the project root
#   name: fabench               image repository; the tag is <name>:<hash of Dockerfile, args, src>
#   build_args: {}              override the Dockerfile's ARG defaults (BASE_IMAGE, AITER_COMMIT,
#                               GPU_ARCHS, TRITON_VERSION, AITER_REPO, AITER_PREBUILD_KERNELS, MAX_JOBS)
#   cache_dir: build/container-cache   host dir for the job containers' Triton/aiter JIT caches
import functools
import os
import shlex
from pathlib import Path

from fabench import container as fabench_container
from fabench import docker_engine as fabench_docker_engine

_IMAGE = dict(config.get("image") or {})
_PROJECT_ROOT = Path(workflow.basedir)


def _project_path(key, default):
    path = Path(_IMAGE.get(key) or default)
    return path if path.is_absolute() else _PROJECT_ROOT / path


IMAGE_DOCKERFILE = _project_path("dockerfile", "Dockerfile")
IMAGE_CONTEXT = _project_path("context", ".")
IMAGE_NAME = _IMAGE.get("name") or fabench_container.DEFAULT_NAME
IMAGE_BUILD_ARGS = {str(k): "" if v is None else str(v) for k, v in (_IMAGE.get("build_args") or {}).items()}
IMAGE_CACHE_DIR = _IMAGE.get("cache_dir") or "build/container-cache"


def _rocm_host():
    return os.path.exists("/dev/kfd") and os.path.isdir("/dev/dri")


def _engine_answers():
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    return fabench_docker_engine.ping(host, timeout=5)


@functools.lru_cache(maxsize=1)
def use_docker():
    """runtime docker: yes; local: no; auto: on a ROCm host whose Docker engine answers."""
    runtime = config.get("runtime", "auto")
    if runtime == "docker":
        return True
    if runtime == "local":
        return False
    return _rocm_host() and _engine_answers()


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
        return (f"{shlex.quote(PYTHON)} -m fabench.container run-job --manifest {image_manifest()} "
                f"--aiter-config {input.kernel_config} --results-dir results/{wildcards.run} "
                f"--cache-dir {shlex.quote(IMAGE_CACHE_DIR)} --")
    return f"{shlex.quote(PYTHON)} -m fabench.run --aiter-config {input.kernel_config}"


rule build_image:
    output:
        "build/images/{image}.json",
    log:
        "logs/images/{image}.log",
    wildcard_constraints:
        image=r"[A-Za-z0-9._-]+",
    params:
        python=PYTHON,
        args=lambda wildcards: " ".join(
            ["--dockerfile", shlex.quote(str(IMAGE_DOCKERFILE)), "--context", shlex.quote(str(IMAGE_CONTEXT)),
             "--name", shlex.quote(IMAGE_NAME)]
            + [f"--build-arg {shlex.quote(f'{k}={v}')}" for k, v in sorted(IMAGE_BUILD_ARGS.items())]
        ),
    run:
        # The file name carries the tag: a stale name (Dockerfile, args or src changed since
        # the DAG was made) must not get a manifest of another image.
        expected = Path(image_manifest()).name
        if Path(output[0]).name != expected:
            raise WorkflowError(f"{output[0]}: the image inputs now give {expected}")
        shell("{params.python} -m fabench.container build {params.args} --manifest {output} --log {log}")


rule patch_config:
    input:
        manifest=lambda wildcards: image_manifest() if use_docker() else [],
    output:
        "results/{run}/aiter-config/{variant}.json",
    log:
        "logs/{run}/patch_config/{variant}.log",
    params:
        python=PYTHON,
        overrides=lambda wildcards: shlex.quote(variant_overrides(wildcards)),
        command=lambda wildcards, input: (
            f"-m fabench.container patch-config --manifest {input.manifest} --variant-json"
            if use_docker()
            else "-m fabench.aiter_config patch --overrides"
        ),
    shell:
        "{params.python} {params.command} {params.overrides} --out {output} > {log} 2>&1"
