# One job per (variant, shape): one process, one GPU, one JSON result.
# The job's spec is its params: a job re-runs when what it measures changes, and only then.


rule benchmark:
    input:
        kernel_config="results/{run}/aiter-config/{variant}.json",
        manifest=lambda wildcards: image_manifest() if use_docker() else [],
    output:
        "results/{run}/{variant}/{shape}.json",
    log:
        "logs/{run}/{variant}/{shape}.log",
    resources:
        gpu=1,
    params:
        spec=lambda wildcards: job_spec_json(wildcards),
        launch=job_launcher,
        commit=PROJECT_COMMIT,
    shell:
        "{params.launch} --spec {params.spec:q} --out {output:q} "
        "--project-commit {params.commit:q} > {log:q} 2>&1"
