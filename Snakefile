# Flash-attention benchmark reproduction: `snakemake --cores 1 report`.
# The experiment is config.yaml (checked against workflow/schemas/config.schema.yaml); the rules
# are thin and the work is in the fabench package, one sub-package per stage.


# The project's config.yaml, also when snakemake works in another --directory.
configfile: os.path.join(workflow.basedir, "config.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/container.smk"
include: "workflow/rules/benchmark.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/archive.smk"
include: "workflow/rules/tune.smk"


# Host steps run where Snakemake runs, never as cluster jobs and never waiting for a GPU: under a
# cluster executor (profiles/slurm) only the measure jobs, one GPU each, are submitted.
localrules:
    build_image,
    compile_ahead,
    patch_config,
    write_report,
    archive_run,
    compare,


report: "workflow/report/workflow.rst"


onstart:
    check_engine(workflow.dag.needrun_jobs())
    export_spares(workflow.dag.needrun_jobs())
    HOOKS.record_start()


onsuccess:
    stop_measuring_workers()
    say_what_was_made()


onerror:
    stop_measuring_workers()


# The report and every job result it is made from: a result deleted after the report was
# rendered is measured again, and the report rebuilt, instead of "Nothing to be done"; so is any
# file of the report deleted or changed since it was written (report_outputs_checked).
rule report:
    default_target: True
    input:
        all_runs(report_path),
        all_runs(result_paths),
        report_outputs_checked,
