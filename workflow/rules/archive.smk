# Keep every finished run, compare the archived versions.
#   snakemake --cores 1 archive    each finished results/<run> not yet archived stored as
#                                  archive/<platform-version>/<run-id>/
#   snakemake --cores 1 compare    every archived entry side by side, regressions flagged
# The work is in fabench.results.archive_store, .unarchived, .archive_read, .compare and fabench.report.compare_markdown,
# .plots.
from fabench.analysis.calibration import CalibrationError
from fabench.analysis.policy import (
    Rule as ComparisonRule,
    RuleError as ComparisonRuleError,
    refuse_retired as refuse_retired_comparison_keys,
)


rule archive_run:
    input:
        results="results/{run}/results.json",
        report="results/{run}/report.md",
        config="results/{run}/config.json",
        plots=[
            rules.write_report.output.latency,
            rules.write_report.output.speedup,
            rules.write_report.output.roofline,
        ],
        kernel_configs=expand(
            "results/{{run}}/aiter-config/{variant}.{kind}",
            variant=VARIANTS,
            kind=["json", "meta.json"],
        ),
        manifest=docker_manifest,
    output:
        "results/{run}/archived.json",
    log:
        "logs/{run}/archive.log",
    params:
        run_dir=lambda wildcards, output: os.path.dirname(output[0]),
        root=config["archive"]["root"],
        label=config["archive"]["label"],
        schema=SCHEMA_DIR / "result.schema.json",
    script:
        "../scripts/archive_run.py"


# No output, so it runs each time: the runs under results/ are found when it runs, and each
# finished one the archive does not hold is stored (this config's own through rule archive_run).
rule archive:
    input:
        all_runs(archive_receipt),
    log:
        "logs/archive-finished-runs.log",
    localrule: True
    params:
        root=config["archive"]["root"],
        own_runs=list(RUNS),
        # this config's runs when they are previews, which are not archived (said so)
        previews=list(RUNS) if config.get("preview") else [],
        schema=SCHEMA_DIR / "result.schema.json",
    script:
        "../scripts/archive_finished.py"


# The comparison policy from the config, refused with one line before any job starts.
try:
    refuse_retired_comparison_keys(config)
    COMPARISON = ComparisonRule.of(config).as_dict()
except (ComparisonRuleError, CalibrationError) as err:
    raise WorkflowError(f"invalid config: {err}") from None


rule compare:
    input:
        receipts=all_runs(archive_receipt),
        entries=archive_state,
        published=published_numbers(),
    output:
        markdown="compare/compare.md",
        # The comparison as a page of its own, pictures embedded: the HTML report shows it.
        html=report(
            "compare/compare.html",
            caption="../report/compare.rst",
            category="Across versions",
            labels={"figure": "comparison"},
        ),
        json="compare/compare.json",
        # one row per cell and entry, for pandas
        csv="compare/compare.csv",
        # versions-<variant>.png for each variant the archived entries hold: the job finds them in the
        # comparison, so the plan need not read the archive's configs to name them.
        plots=report(
            directory("compare/plots"),
            patterns=["versions-{variant}.png"],
            caption="../report/versions.rst",
            category="Across versions",
            labels={"figure": "variant {variant} across versions"},
        ),
        # every archived run's report as a page, so that the HTML report holds each, not only the config's
        runs=report(
            directory("compare/runs"),
            patterns=["{entry}.html"],
            caption="../report/archived_run.rst",
            category="Archived runs",
            labels={"figure": "{entry}"},
        ),
    log:
        "logs/compare.log",
    params:
        root=config["archive"]["root"],
        rule=COMPARISON,
        baseline=config["archive"]["baseline"],
        # every entry's files as they are now: an entry added, deleted or changed in any byte
        # changes this, so compare re-runs (and its reader verifies every entry)
        entries=archive_fingerprint,
    script:
        "../scripts/compare.py"
