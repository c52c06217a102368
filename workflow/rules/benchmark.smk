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


rule measure:
    input:
        kernel_config="results/{run}/aiter-config/{variant}.json",
        manifest=docker_manifest,
    output:
        "results/{run}/{variant}/{shape}/process-{process}.json",
    log:
        "logs/{run}/{variant}/{shape}/process-{process}.log",
    priority: process_priority
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
