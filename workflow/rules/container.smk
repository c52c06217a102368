# The docker runtime's image (one per content hash) and aiter's config patched per variant.
# The work is in fabench.container.image and fabench.container.aiter_config; helpers are in common.smk.


rule build_image:
    output:
        "build/images/{image}.json",
    log:
        "logs/images/{image}.log",
    conda:
        "../../envs/fabench.yaml"
    wildcard_constraints:
        image=r"[A-Za-z0-9._-]+",
    params:
        python=PYTHON,
        args=lambda wildcards: " ".join(
            ["--dockerfile", shlex.quote(str(IMAGE_DOCKERFILE)), "--context", shlex.quote(str(IMAGE_CONTEXT)),
             "--name", shlex.quote(IMAGE_NAME)]
            + [f"--build-arg {shlex.quote(f'{k}={v}')}" for k, v in sorted(IMAGE_BUILD_ARGS.items())]
        ),
    shell:
        "{params.python} -m fabench.container.image build {params.args} --manifest {output} --log {log}"


rule patch_config:
    input:
        manifest=lambda wildcards: image_manifest() if use_docker() else [],
    output:
        "results/{run}/aiter-config/{variant}.json",
    log:
        "logs/{run}/patch_config/{variant}.log",
    conda:
        "../../envs/fabench.yaml"
    params:
        python=PYTHON,
        overrides=lambda wildcards: shlex.quote(variant_overrides(wildcards)),
        command=lambda wildcards, input: (
            f"-m fabench.container.image patch-config --manifest {input.manifest} --variant-json"
            if use_docker()
            else "-m fabench.container.aiter_config patch --overrides"
        ),
    shell:
        "{params.python} {params.command} {params.overrides} --out {output} > {log} 2>&1"
