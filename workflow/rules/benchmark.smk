# One result per (variant, shape), from `repeats` measuring processes, each a job of its own:
# one process, one GPU, one JSON file, which rule write_report (report.smk) merges. The job's spec
# is its params: a job re-runs when what it measures changes, and only then.
#
# The processes run in rounds across the run (priority: process 0 of every job first, then
# process 1, ...), so the processes of one cell lie minutes apart. Back to back, both processes
# of a job shared the machine's state of that minute: on an H200 every backend of one job moved
# together by up to 0.9% between two runs while its two processes agreed within 0.1%, and the
# interval over the processes could not show it.
#
# Each job's process N is measured by the measuring worker of its GPU and round N (measure.mode
# worker, the default on the local executor) or by a new process (isolate); see docs/worker.md.


# Before a run's first measuring process, the kernels of its jobs built at once, side by side on one
# leased GPU, and that GPU's measuring workers started (they import meanwhile), so that no job
# compiles while it holds a GPU (fabench.measure.launch.precompile; docs/worker.md). The run's
# measure jobs wait for its record (compile_ahead_first); rule write_report reads it. It runs when
# its record is missing or its params change (a job's spec, measure.compile_ahead), not when only
# some processes are measured again (their kernels are in the compile cache; each job's launcher
# starts its worker). Where it compiles nothing (measure.compile_ahead, the docker runtime, a
# cluster executor: Plan.not_compiling_ahead) its record says why, and no device is touched. It
# never fails: what went wrong is in its record, and the jobs compile for themselves.
#
# A checkpoint, not a rule: Snakemake 9 masks the jobs downstream of a job to run, and drops those
# whose only link to it is an ancient input without checking their own reasons (a changed spec:
# the measure jobs were not measured again and the report refused their results). Jobs after a
# checkpoint are judged again once it has run, each on its own reasons; a dry run lists them all
# while it is still to run.
checkpoint compile_ahead:
    output:
        "results/{run}/compile-ahead.json",
    log:
        "logs/{run}/compile-ahead.log",
    priority: PLAN.compile_ahead_priority
    params:
        python=PYTHON,
        ahead=lambda wildcards: PLAN.compile_ahead_args(wildcards.run, CLUSTER),
        measure=measure_options,
    shell:
        "PYTHONUNBUFFERED=1 {params.python:q} -m fabench.measure.launch.precompile {params.ahead} {params.measure} "
        "--out {output:q} 2>&1 | tee {log:q}"


rule measure:
    input:
        kernel_config="results/{run}/aiter-config/{variant}.json",
        manifest=docker_manifest,
        compile_ahead=compile_ahead_first,
    output:
        "results/{run}/{variant}/{shape}/process-{process}.json",
    log:
        "logs/{run}/{variant}/{shape}/process-{process}.log",
    priority: process_priority
    # On a GPU host's local executor no core and two measuring slots per GPU (common.smk): the next
    # job's launcher starts while the job before it measures, and waits, ready, for its GPU's lease.
    threads: measure_threads
    resources:
        gpu=1,
    params:
        launch=job_launcher,
        measure=measure_options,
        again=measure_again_option,
        spec=job_spec_json,
        commit=PROJECT_COMMIT,
    # The job's progress lines, live on the terminal and in its log; under Snakemake's bash strict
    # mode (pipefail) the job fails when the launcher does, its last line being the reason.
    shell:
        "PYTHONUNBUFFERED=1 {params.launch} {params.measure}{params.again} --spec {params.spec:q} --process {wildcards.process:q} "
        "--out {output:q} --project-commit {params.commit:q} 2>&1 | tee {log:q}"
