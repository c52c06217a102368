# Collect the job results, check them against the result schema, render the report.


rule collect:
    input:
        results=result_paths(),
    output:
        "results/{run}/results.json",
    log:
        "logs/{run}/collect.log",
    conda:
        "../../envs/fabench.yaml"
    params:
        python=PYTHON,
        schema=project_path("workflow/schemas/result.schema.json"),
    shell:
        "{params.python} -m fabench.results.collect --schema {params.schema} "
        "--out {output} {input.results} > {log} 2>&1"


rule freeze_report_config:
    output:
        "results/{run}/report-config.json",
    log:
        "logs/{run}/freeze_report_config.log",
    params:
        frozen=lambda wildcards: config,
    run:
        write_json(output[0], params.frozen)


rule render_report:
    input:
        results="results/{run}/results.json",
        config="results/{run}/report-config.json",
        template=project_path("report/report.md.j2"),
        published=published_numbers(),
    output:
        "results/{run}/report.md",
    log:
        "logs/{run}/report.log",
    conda:
        "../../envs/fabench.yaml"
    params:
        python=PYTHON,
        published=lambda wildcards, input: f"--published {input.published}" if input.published else "",
        templates=lambda wildcards, input: os.path.dirname(input.template),
    shell:
        "{params.python} -m fabench.report.render --results {input.results} --config {input.config} "
        "--templates {params.templates} {params.published} --out {output} > {log} 2>&1"
