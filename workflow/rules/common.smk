# Helpers shared by the rules: config validation, the job list, the command to run a job.
import json
import os
import shlex
import subprocess
import sys

import yaml

from snakemake.utils import min_version, validate

min_version("9.0")

from fabench import config as fabench_config
from fabench.shapes import SHAPE_ID_PATTERN, shape_id


def validate_config():
    """One clear error naming the key, before any job starts."""
    try:
        validate(config, schema="../schemas/config.schema.yaml")
        fabench_config.check(config)
    except WorkflowError:
        schema = yaml.safe_load(open(os.path.join(workflow.basedir, "workflow/schemas/config.schema.yaml")))
        raise WorkflowError(f"invalid config: {fabench_config.schema_error(config, schema)}") from None
    except fabench_config.ConfigError as err:
        raise WorkflowError(f"invalid config: {err}") from None


validate_config()

RUN = config["run"]
PYTHON = sys.executable
SHAPE_IDS = [shape_id(shape) for shape in config["shapes"]]
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
        return os.environ.get("FABENCH_PROJECT_COMMIT", "unknown")
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


def runner_args(wildcards, input, output):
    return (
        f"--config {input.config} --variant {wildcards.variant} --shape {wildcards.shape} "
        f"--out {output} --project-commit {PROJECT_COMMIT}"
    )
