# Collect the job results, check them against the result schema and the config, render the report.


rule collect:
    input:
        results=lambda wildcards: result_paths(wildcards.run),
    output:
        json="results/{run}/results.json",
        # one row per (variant, shape, backend) cell, for pandas
        csv="results/{run}/results.csv",
    log:
        "logs/{run}/collect.log",
    params:
        schema=SCHEMA_DIR / "result.schema.json",
        variants=VARIANTS,
        expected=expected_jobs,
    script:
        "../scripts/collect.py"


rule render_report:
    input:
        results="results/{run}/results.json",
        templates=REPORT_TEMPLATES,
        published=published_numbers(),
        plots=[
            "results/{run}/plots/latency.png",
            "results/{run}/plots/speedup.png",
            "results/{run}/plots/roofline.png",
        ],
        sweep=sweep_summary,
        # Not read here: the run's resolved config is written with its report, so that a run made by
        # the report target alone is complete for `fabench archive store` (rule resolved_config).
        config="results/{run}/config.json",
    output:
        markdown="results/{run}/report.md",
        # The same report as a page of its own, pictures embedded: the HTML report shows it.
        html=report(
            "results/{run}/report.html",
            caption="../report/run.rst",
            category="Run {run}",
            labels={"figure": "report"},
        ),
    log:
        "logs/{run}/report.log",
    params:
        # What the report reads of the config: a change (a title, the order) re-renders it.
        config=lambda wildcards: config,
        template_dir=TEMPLATE_DIR,
        workflow_started=WORKFLOW_STARTED,
    script:
        "../scripts/render_report.py"
