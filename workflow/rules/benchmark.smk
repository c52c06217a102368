# One job per (variant, shape): one process, one GPU, one JSON result.


# What the jobs read, frozen: a change re-runs them (the params trigger), a title change does not.
rule freeze_config:
    output:
        "results/{run}/config.json",
    log:
        "logs/{run}/freeze_config.log",
    params:
        frozen=lambda wildcards: fabench_config.job_config(config),
    run:
        write_json(output[0], params.frozen)


rule benchmark:
    input:
        config="results/{run}/config.json",
        kernel_config="results/{run}/aiter-config/{variant}.json",
        manifest=lambda wildcards: image_manifest() if use_docker() else [],
    output:
        "results/{run}/{variant}/{shape}.json",
    log:
        "logs/{run}/{variant}/{shape}.log",
    resources:
        gpu=1,
    conda:
        "../../envs/fabench.yaml"
    params:
        launch=job_launcher,
        runner=runner_args,
    shell:
        "{params.launch} {params.runner} > {log} 2>&1"
