# The container (docker runtime) and aiter's patched config per variant.
# (Placeholder: the local runtime only; the docker rules arrive with the container work.)


def use_docker():
    return config["runtime"] == "docker"


def image_manifest():
    return []


rule patch_config:
    output:
        "results/{run}/aiter-config/{variant}.json",
    log:
        "logs/{run}/patch_config/{variant}.log",
    params:
        python=PYTHON,
        overrides=variant_overrides,
    shell:
        "{params.python} -m fabench.aiter_config patch --overrides '{params.overrides}' --out {output} > {log} 2>&1"
