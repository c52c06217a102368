# Collect the job results, check them against the result schema, render the report.


rule collect:
    input:
        result_paths(),
    output:
        "results/{run}/results.json",
    log:
        "logs/{run}/collect.log",
    params:
        python=PYTHON,
    shell:
        "{params.python} -m fabench.collect --out {output} {input} > {log} 2>&1"


rule render_report:
    input:
        results="results/{run}/results.json",
        config="results/{run}/config.json",
        published=config["published"] or [],
    output:
        "results/{run}/report.md",
    log:
        "logs/{run}/report.log",
    params:
        python=PYTHON,
        published=lambda wildcards, input: f"--published {input.published}" if input.published else "",
    shell:
        "{params.python} -m fabench.report --results {input.results} --config {input.config} "
        "{params.published} --out {output} > {log} 2>&1"
