# The config checked and the plan made (fabench.plan), and the input functions the rules call.
import os
import re
import shlex
import sys
from pathlib import Path

from snakemake.utils import min_version, update_config, validate

min_version("9.0")

from fabench import config_layers
from fabench.plan import Plan, PlanError
from fabench.planned_platform import use_docker
from fabench.workflow_config import layer_user_config
from fabench.workflow_hooks import WORKFLOW_STARTED, WorkflowHooks
from fabench.results import archive_read
from fabench.results.output_digests import (
    changed_outputs,
    make_stale,
    set_aside,
    unreadable_process_files,
)
from fabench.resources import SCHEMA_DIR, TEMPLATE_DIR
from fabench.shapes import SHAPE_ID_PATTERN
from fabench.measure.launch.worker_client import SPARES_ENV
from fabench.watchdog import WORKFLOW_ENV, workflow_marker


def make_plan():
    """A user's --configfile files, then --config, on top of config.yaml (fabench.config_layers);
    the config checked, then the schema's defaults; the plan. One line for anything wrong.
    """
    settings = workflow.config_settings
    user = layer_user_config(
        settings.config, settings.configfiles, settings.config_args
    )
    update_config(config, user["command_line"])
    config_layers.replace_whole_values(config, [*user["files"], user["command_line"]])
    Plan.check(config, Path(workflow.basedir))
    validate(config, schema=str(SCHEMA_DIR / "config.schema.yaml"), set_default=True)
    plan = Plan.checked(config, Path(workflow.basedir), use_docker(config))
    if note := plan.unused_on_cpu(user["command_line"]):
        print(note, file=sys.stderr)
    return plan


# Whether the jobs are submitted to a cluster executor, decided once, from Snakemake's own settings
# (fabench.plan.submits_jobs): the slots, the measure mode and the handlers all read this.
CLUSTER = Plan.submits_jobs(workflow.resource_settings.nodes, workflow.remote_exec)


# How many measure jobs run at once (resource `gpu`, one per measure job; fabench.plan, fabench.slots):
# one at a time on a CPU host; on a GPU host's local executor, two per GPU where the run measures on
# every GPU it may lease, one measuring and the next job's launcher ready beside it.
def measuring_slots():
    given = workflow.global_resources.get("gpu")
    given = getattr(given, "value", given)
    slots, note = PLAN.measuring_slots(given, workflow.resource_settings.cores, CLUSTER)
    if slots is not None:
        workflow.register_resource("gpu", slots)
    if note:
        print(note, file=sys.stderr)


try:
    PLAN = make_plan()
    measuring_slots()
    # What the workflow does to the machine as it starts and ends (fabench.workflow_hooks).
    HOOKS = WorkflowHooks(PLAN, CLUSTER)
except PlanError as err:
    raise WorkflowError(str(err)) from None
# Jobs on this host stop when this Snakemake is gone (see fabench.watchdog).
os.environ[WORKFLOW_ENV] = workflow_marker()
RUNS, SHAPES, VARIANTS = PLAN.runs, PLAN.shapes, PLAN.variants
PROCESSES, PROJECT_COMMIT = PLAN.processes, PLAN.commit
PYTHON = PLAN.python


wildcard_constraints:
    run="|".join(map(re.escape, RUNS)),
    variant="|".join(map(re.escape, VARIANTS)),
    shape=SHAPE_ID_PATTERN,
    process=r"\d+",


def planned(method, *args):
    """A plan's answer, its PlanError as Snakemake's one-line error."""
    try:
        return method(*args)
    except PlanError as err:
        raise WorkflowError(str(err)) from None


# --- paths and input functions ------------------------------------------------------------------
def result_paths(run):
    return expand(
        "results/{run}/{variant}/{shape}.json",
        run=run,
        variant=VARIANTS,
        shape=list(SHAPES),
    )


def run_process_paths(wildcards):
    """Every measuring process file of the run, one per (variant, shape, process): the files rule
    write_report merges, each cell's from the folder named as its result."""
    return process_paths(wildcards.run)


def process_paths(run):
    return expand(
        rules.measure.output[0],
        run=run,
        variant=VARIANTS,
        shape=list(SHAPES),
        process=range(PROCESSES),
    )


def process_priority(wildcards):
    return PLAN.process_priority(
        wildcards.run, wildcards.variant, wildcards.shape, wildcards.process
    )


def report_path(run):
    return f"results/{run}/report.md"


def all_runs(path_of):
    return [path for run in RUNS for path in flatten([path_of(run)])]


def published_numbers():
    return PLAN.path(config["published"]) if config["published"] else []


def job_spec_json(wildcards):
    return PLAN.job_spec_json(wildcards.run, wildcards.variant, wildcards.shape)


def image_to_build(wildcards):
    return planned(PLAN.image_to_build, wildcards.image)


def docker_manifest(wildcards):
    """The run's image manifest in docker. While the image is still to be built, a dry run is told
    too when no engine answers; a real run refuses before its first job (Snakefile onstart).
    """
    if not PLAN.docker:
        return []
    manifest = planned(PLAN.image_manifest, wildcards.run)
    if warning := HOOKS.engine_warning(manifest):
        print(warning, file=sys.stderr)
    return manifest


def compile_ahead_first(wildcards):
    """The run's compile-ahead record, made by checkpoint compile_ahead, which holds a GPU and the host's
    cores while it runs, so its measuring processes wait for it. ancient(): a record written anew
    (measure.compile_ahead changed, a job's spec changed) makes only the jobs to run anyway
    measure, not every job of the run."""
    return ancient(checkpoints.compile_ahead.get(run=wildcards.run).output[0])


def measure_threads(wildcards):
    """Rule measure's threads: 0 where its jobs lease this host's GPUs on the local executor, which
    they measure on without computing on the host's cores, so that the next job's launcher starts
    beside the one measuring (the measuring slots bound them); 1 on a CPU host (the job times the
    cores) and under a cluster executor (a job's threads are its cpus there)."""
    return PLAN.measure_threads(CLUSTER)


def job_launcher(wildcards, input):
    return PLAN.launcher(wildcards.run, input.manifest, input.kernel_config)


REPORT_TEMPLATES = sorted(map(str, TEMPLATE_DIR.rglob("*.j2")))


def measure_options(wildcards):
    # How the job is measured: not a param Snakemake tracks (fabench.plan.HowToMeasure).
    return PLAN.measure_options(CLUSTER)


def measure_again_option(wildcards):
    # A process file that records a lost process (killed, crashed, timed out) changes this tracked
    # option, so that Snakemake measures that process again (fabench.plan.Plan.measured_again).
    # From the wildcards, not `output`: Snakemake compares no params derived from a job's files.
    process_file = expand(rules.measure.output[0], **wildcards)[0]
    return PLAN.measured_again(process_file)


def say_what_was_made():
    """The workflow's last lines: each report and comparison it wrote, in one line with its path."""
    from fabench.report.last_lines import finished_lines

    for line in finished_lines(RUNS, PLAN.started_at):
        print(line, file=sys.stderr)


def check_engine(jobs):
    """A docker run whose engine does not answer stops before its first job (fabench.workflow_hooks)."""
    if problem := HOOKS.engine_problem_for([job.rule.name for job in jobs]):
        raise WorkflowError(problem)


def export_spares(jobs):
    """How long the spares wait that the workers leave as the report starts (docs/worker.md, Spares;
    0: none then), for the jobs to come (the Snakefile's onstart, once the jobs to run are known).
    In the environment, as the workflow's marker: as a param of rule write_report it would render a
    report again whenever the jobs asked for change."""
    os.environ[SPARES_ENV] = str(
        PLAN.spares_once_measured(CLUSTER, [job.rule.name for job in jobs])
    )


def stop_measuring_workers():
    """The Snakefile's handlers: never an error of their own (fabench.workflow_hooks)."""
    if note := HOOKS.stop_measuring_workers():
        print(note, file=sys.stderr)


def expected_jobs(wildcards):
    return PLAN.expected_jobs(wildcards.run)


def archive_receipt(run):
    # A preview is never archived (the store refuses it: fabench.results.archive_run_check), so
    # `snakemake archive` and `compare` with config/preview.yaml wait for no receipt of it.
    return [] if config.get("preview") else f"results/{run}/archived.json"


def archive_state(wildcards):
    return PLAN.archive_state(all_runs(archive_receipt))


def archive_fingerprint(wildcards):
    return archive_read.archive_fingerprint(config["archive"]["root"])


# --- the tuning sweep (workflow/rules/tune.smk) ---------------------------------------------------
SWEEP = PLAN.sweep
SWEEP_VARIANT = PLAN.sweep_variant


def sweep_jobs(run, stages=PLAN.sweep_stages):
    """The sweep jobs' records of the given stages: one per (stage, shape)."""
    return expand(
        "results/{run}/tune/{stage}/{shape}.json",
        run=run,
        stage=stages,
        shape=list(PLAN.sweep_shapes),
    )


def sweep_variants_file(run):
    planned(PLAN.require_sweep)
    return f"results/{run}/tune/variants.yaml"


def sweep_summary(wildcards):
    if SWEEP and SWEEP_VARIANT in VARIANTS:
        planned(PLAN.require_sweep)
        return f"results/{wildcards.run}/tune/sweep.json"
    return []


def sweep_reference_config(wildcards):
    return f"results/{wildcards.run}/aiter-config/{SWEEP['reference']}.json"


def sweep_shortlist(wildcards):
    if wildcards.stage == "refine":
        return f"results/{wildcards.run}/tune/shortlist.json"
    return []


def sweep_shortlist_args(wildcards, input):
    return shlex.join(["--shortlist", input.shortlist]) if input.shortlist else ""


def sweep_job_spec_json(wildcards):
    return PLAN.sweep_job_spec_json(wildcards.stage, wildcards.shape)


def sweep_launcher(wildcards, input):
    return PLAN.launcher(wildcards.run, input.manifest, input.reference, "fabench.tune")


def report_outputs_checked(wildcards):
    """Every file write_report makes, for each run: one deleted is made again, and so is one
    whose bytes are no longer those it wrote, or whose measuring process file the merge would
    now refuse (given an old modification time, with a note).
    """
    paths = []
    for run in RUNS:
        outputs = expand(list(rules.write_report.output), run=run)
        record = rules.write_report.output.digests.format(run=run)
        changed = changed_outputs([p for p in outputs if p != record], record)
        for path, why in changed:
            print(
                f"fabench: {path}: {why}; write_report makes it again",
                file=sys.stderr,
            )
        # A process file changed since its process wrote it into what the merge refuses: that
        # process is measured again (checked here, before Snakemake first lists the run's folders).
        unreadable = unreadable_process_files(process_paths(run), record)
        moved = set_aside([path for path, _ in unreadable])
        for (path, why), aside in zip(unreadable, moved):
            print(
                f"fabench: {why}; kept as {aside}, its process is measured again",
                file=sys.stderr,
            )
        # A missing process file alone is no reason for Snakemake to make its report again.
        stale = outputs if unreadable else [path for path, _ in changed]
        make_stale([path for path in stale if os.path.lexists(path)])
        paths += outputs
    return paths
