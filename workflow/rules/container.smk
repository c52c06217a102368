# The docker runtime's image (one per content hash) and aiter's config patched per variant.


rule build_image:
    output:
        "build/images/{image}.json",
    log:
        "logs/images/{image}.log",
    wildcard_constraints:
        image=r"[A-Za-z0-9._-]+",
    params:
        image=image_to_build,
    script:
        "../scripts/build_image.py"


rule patch_config:
    input:
        manifest=docker_manifest,
    output:
        config="results/{run}/aiter-config/{variant}.json",
        meta="results/{run}/aiter-config/{variant}.meta.json",
    log:
        "logs/{run}/patch_config/{variant}.log",
    # Before any measuring process, so that the rounds of processes span every variant.
    priority: (PROCESSES + 1) * len(PLAN.job_order)
    params:
        overrides=lambda wildcards: PLAN.triton_overrides(wildcards.variant),
    script:
        "../scripts/patch_config.py"
