# The tuning sweep of aiter's Triton MHA config (config key sweep; the work is in fabench.tune):
#   snakemake --cores 1 tune
# One job per (stage, shape), each timing every candidate of its stage in one process on one GPU;
# coarse_refine shortlists between its two stages; the pick writes the winner as aiter's config
# and as a variant (results/<run>/tune/variants.yaml) for the benchmark's own jobs.


rule sweep_stage:
    input:
        reference=sweep_reference_config,
        shortlist=sweep_shortlist,
        manifest=docker_manifest,
    output:
        "results/{run}/tune/{stage}/{shape}.json",
    log:
        "logs/{run}/tune/{stage}/{shape}.log",
    wildcard_constraints:
        stage="sweep|coarse|refine",
    resources:
        gpu=1,
    params:
        launch=sweep_launcher,
        spec=sweep_job_spec_json,
        shortlist=sweep_shortlist_args,
    shell:
        "{params.launch} --spec {params.spec:q} --out {output:q} {params.shortlist} > {log:q} 2>&1"


rule sweep_shortlist:
    input:
        lambda wildcards: sweep_jobs(wildcards.run, ["coarse"]),
    output:
        "results/{run}/tune/shortlist.json",
    log:
        "logs/{run}/tune/shortlist.log",
    params:
        sweep=SWEEP,
    script:
        "../scripts/sweep_shortlist.py"


rule sweep_pick:
    input:
        jobs=lambda wildcards: sweep_jobs(wildcards.run),
        manifest=docker_manifest,
    output:
        summary="results/{run}/tune/sweep.json",
        config=f"results/{{run}}/tune/aiter-config/{SWEEP_VARIANT}.json",
        meta=f"results/{{run}}/tune/aiter-config/{SWEEP_VARIANT}.meta.json",
        variants="results/{run}/tune/variants.yaml",
    log:
        "logs/{run}/tune/pick.log",
    params:
        sweep=SWEEP,
        variants=PLAN.sweep_base_variants(),
    script:
        "../scripts/sweep_pick.py"


# A function, so that a config that cannot sweep fails only when the sweep is asked for.
rule tune:
    input:
        lambda wildcards: all_runs(sweep_variants_file),
