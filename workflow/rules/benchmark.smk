# One job per (variant, shape): one process, one GPU, one JSON result.
# The job's spec is its params: a job re-runs when what it measures changes, and only then.


rule benchmark:
    input:
        kernel_config="results/{run}/aiter-config/{variant}.json",
        manifest=docker_manifest,
    output:
        "results/{run}/{variant}/{shape}.json",
    log:
        "logs/{run}/{variant}/{shape}.log",
    resources:
        gpu=1,
    params:
        launch=job_launcher,
        spec=job_spec_json,
        commit=PROJECT_COMMIT,
    shell:
        "{params.launch} --spec {params.spec:q} --out {output:q} "
        "--project-commit {params.commit:q} > {log:q} 2>&1"
