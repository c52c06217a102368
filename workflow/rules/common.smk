# Helpers shared by the rules: config validation, the job list, the command to run a job.
import json
import shlex
import subprocess
import sys

from snakemake.utils import min_version, validate

min_version("9.0")

from fabench import config as fabench_config
from fabench.shapes import SHAPE_ID_PATTERN, shape_id


validate(config, schema="../schemas/config.schema.yaml")
try:
    fabench_config.check(config)
except fabench_config.ConfigError as err:
    raise WorkflowError(f"config.yaml: {err}") from None

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
        return "unknown"
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
