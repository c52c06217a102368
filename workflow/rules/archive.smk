# Keep every finished run, compare the archived versions, draw the pictures.
#
#   snakemake --cores 1 archive    the run, finished, stored as archive/<platform-version>/<run-id>/
#   snakemake --cores 1 compare    every archived entry side by side, regressions flagged
#
# Needs from common.smk: RUN, VARIANTS, SHAPE_IDS, report_path(), use_docker(), image_manifest(),
# project_path(), published_numbers(); and config["archive"] = {root, threshold, baseline}
# (optional, defaults below). The work is in fabench.results.archive / .compare and
# fabench.report.plots; the scripts in ../scripts only pass Snakemake's objects on.
import glob as _glob
import json
import os

ARCHIVE = {"root": "archive", "threshold": 0.05, "baseline": None, "tolerance": None,
           **(config.get("archive") or {})}
ARCHIVE_RECEIPT = f"results/{RUN}/archived.json"
COMPARE_DIR = "compare"


def archive_state(wildcards=None):
    """The checksum files of the entries now in the archive, so that compare re-runs when one
    appears, changes or goes. This run's own entry is left out: it stands in the DAG as the
    archive rule's receipt, which does not exist yet when the DAG is built before archiving."""
    own = None
    if os.path.exists(ARCHIVE_RECEIPT):
        with open(ARCHIVE_RECEIPT) as handle:
            own = os.path.normpath(os.path.join(json.load(handle)["path"], "SHA256SUMS"))
    found = _glob.glob(os.path.join(ARCHIVE["root"], "*", "*", "SHA256SUMS"))
    return sorted(p for p in found if os.path.normpath(p) != own)


localrules:
    plots,
    archive,
    compare,


rule plots:
    input:
        results="results/{run}/results.json",
    output:
        latency=report("results/{run}/plots/latency.png", caption="../report/latency.rst",
                       category="Run {run}", labels={"figure": "latency vs sequence length"}),
        speedup=report("results/{run}/plots/speedup.png", caption="../report/speedup.rst",
                       category="Run {run}", labels={"figure": "speedup before vs after tuning"}),
    log:
        "logs/{run}/plots.log",
    conda:
        "../../envs/fabench.yaml"
    script:
        "../scripts/plots.py"


rule archive:
    input:
        results=f"results/{RUN}/results.json",
        report=report_path(),
        config=f"results/{RUN}/report-config.json",
        plots=expand("results/{run}/plots/{name}.png", run=RUN, name=["latency", "speedup"]),
        kernel_configs=expand("results/{run}/aiter-config/{variant}.json", run=RUN, variant=VARIANTS),
        manifest=lambda wildcards: image_manifest() if use_docker() else [],
    output:
        ARCHIVE_RECEIPT,
    log:
        f"logs/{RUN}/archive.log",
    params:
        run_dir=f"results/{RUN}",
        root=ARCHIVE["root"],
        label=ARCHIVE.get("label"),
        schema=project_path("workflow/schemas/result.schema.json"),
        expected_jobs=[[variant, shape] for variant in VARIANTS for shape in SHAPE_IDS],
    conda:
        "../../envs/fabench.yaml"
    script:
        "../scripts/archive_run.py"


rule compare:
    input:
        receipt=ARCHIVE_RECEIPT,
        entries=archive_state,
        published=published_numbers(),
    output:
        markdown=report(f"{COMPARE_DIR}/compare.md", caption="../report/compare.rst",
                        category="Across versions", labels={"figure": "comparison (Markdown)"}),
        json=f"{COMPARE_DIR}/compare.json",
        plots=[report(f"{COMPARE_DIR}/versions-{variant}.png", caption="../report/versions.rst",
                      category="Across versions", labels={"figure": f"variant {variant} across versions"})
               for variant in VARIANTS],
    log:
        "logs/compare.log",
    params:
        root=ARCHIVE["root"],
        threshold=ARCHIVE["threshold"],
        baseline=ARCHIVE["baseline"],
        tolerance=ARCHIVE["tolerance"],
        variants=VARIANTS,
        # entries deleted since the last comparison change this, so compare re-runs
        entry_ids=lambda wildcards: [os.path.relpath(os.path.dirname(p), ARCHIVE["root"]) for p in archive_state()],
    conda:
        "../../envs/fabench.yaml"
    script:
        "../scripts/compare.py"
