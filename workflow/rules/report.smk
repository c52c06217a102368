# From the measuring processes' files to the report, in one host job (rule write_report): each
# (variant, shape)'s processes merged into its result, the results checked against the result
# schema and the config and collected, the plots drawn, the report rendered and the resolved config
# written, all in one Python process. As separate jobs (merge per cell, collect, plots, render,
# config) the chain cost ~12 s on a CPU host and ~14 s on an H200 after the last measuring process
# ended, most of it Snakemake's per-job start and each job's Python and library start-up; in one
# process the work itself takes a few seconds. Every file stays a declared output.


rule write_report:
    input:
        processes=run_process_paths,
        templates=REPORT_TEMPLATES,
        published=published_numbers(),
        sweep=sweep_summary,
        # What checkpoint compile_ahead did before the measuring processes, for the report's time line.
        compile_ahead=rules.compile_ahead.output[0],
    output:
        # per (variant, shape): its processes merged (fabench.results.merge)
        cells=expand(
            "results/{{run}}/{variant}/{shape}.json",
            variant=VARIANTS,
            shape=list(SHAPES),
        ),
        json="results/{run}/results.json",
        # one row per (variant, shape, backend) cell, for pandas
        csv="results/{run}/results.csv",
        latency=report(
            "results/{run}/plots/latency.png",
            caption="../report/latency.rst",
            category="Run {run}",
            labels={"figure": "latency vs sequence length"},
        ),
        speedup=report(
            "results/{run}/plots/speedup.png",
            caption="../report/speedup.rst",
            category="Run {run}",
            labels={"figure": "speedup before vs after tuning"},
        ),
        # A GPU run's cells against its GPU's limits; a run without them (a CPU) gets a figure that
        # says why, which its report does not show.
        roofline=report(
            "results/{run}/plots/roofline.png",
            caption="../report/roofline.rst",
            category="Run {run}",
            labels={"figure": "roofline"},
        ),
        markdown="results/{run}/report.md",
        # The same report as a page of its own, pictures embedded: the HTML report shows it.
        html=report(
            "results/{run}/report.html",
            caption="../report/run.rst",
            category="Run {run}",
            labels={"figure": "report"},
        ),
        # The run's resolved config, defaults filled in, written with its report, so that a run
        # made by the report target alone is complete for `fabench archive store`.
        config="results/{run}/config.json",
        # The digest of every file above, written last: one changed since is made again
        # (report_outputs_checked, fabench.results.output_digests).
        digests="results/{run}/output-digests.json",
    log:
        "logs/{run}/report.log",
    params:
        schema=SCHEMA_DIR / "result.schema.json",
        variants=VARIANTS,
        expected=expected_jobs,
        # What the report reads of the config: a change (a title, the order) re-renders it.
        config=lambda wildcards: config,
        # The speedup's marks are the comparison policy's claims: a change of `comparison:` redraws
        # them. (A function: COMPARISON is set in archive.smk, where the compare rule reads it too.)
        rule=lambda wildcards: COMPARISON,
        template_dir=TEMPLATE_DIR,
        workflow_started=WORKFLOW_STARTED,
    script:
        "../scripts/write_report.py"
