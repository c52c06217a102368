# Flash-attention benchmark reproduction: `snakemake --cores 1 report`.
# The experiment is config.yaml; the rules are thin and the work is in the fabench package.

configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/container.smk"
include: "workflow/rules/benchmark.smk"
include: "workflow/rules/report.smk"


rule report:
    default_target: True
    input:
        report_path(),
