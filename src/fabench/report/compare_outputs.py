"""The one writer of a comparison's outputs (fabench.results.compare): `fabench compare` and the
workflow's rule compare both call write_comparison, so a new output format is one edit here and
the two cannot drift.

The versions figures are one per variant of the comparison itself (not of the config), written
into a folder; the Markdown links them relative to where it is written, and the HTML page embeds
them, so it is written last.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fabench.files import write_atomic, write_json
from fabench.report.compare_markdown import render_markdown
from fabench.report.findings import compare_summary
from fabench.report.html import markdown_page
from fabench.report.plots import compared_variants, write_version_plots
from fabench.report.sections.compare_summary import compare_context, judged_pair, software_changes
from fabench.results.compare_csv import comparison_csv

PAGE_TITLE = "Comparison across versions"
# The verdicts of the newest judged pair, in the order the page's summary gives them.
VERDICT_WORDS = {"regression": "regression", "improvement": "improvement", "now_available": "now available",
                 "same": "the same", "cannot tell": "cannot tell"}


@dataclass(frozen=True)
class ComparisonOutputs:
    """Where each output goes; None: not written (the Markdown is returned either way)."""

    markdown: Path | None = None
    json: Path | None = None
    csv: Path | None = None  # one row per cell and entry, for pandas
    html: Path | None = None  # the Markdown as a page of its own, the figures embedded
    plots: Path | None = None  # a folder: versions-<variant>.png for every variant compared


def figure_links(plots: list[tuple[str, Path]], page: Path | None) -> list[tuple[str, str]]:
    """(title, path relative to the page's folder) of each figure; none without a page to link from."""
    if page is None:
        return []
    here = Path(page).resolve().parent
    return [(f"variant {variant} across the archived versions", os.path.relpath(path.resolve(), here))
            for variant, path in plots]


def write_comparison(comparison: dict, outputs: ComparisonOutputs) -> str:
    """Every output `outputs` names; returns the Markdown (linking the figures from outputs.markdown)."""
    plots = []
    if outputs.plots is not None:
        variants = compared_variants(comparison)
        plots = list(zip(variants, write_version_plots(comparison, outputs.plots, variants)))
    markdown = render_markdown(comparison, figures=figure_links(plots, outputs.markdown))
    if outputs.markdown is not None:
        write_atomic(outputs.markdown, markdown)
    if outputs.json is not None:
        # The page's findings as data beside the comparison (schemas/compare_summary.schema.json).
        write_json(outputs.json, {**comparison, "summary": compare_summary(comparison)})
    if outputs.csv is not None:
        write_atomic(outputs.csv, comparison_csv(comparison))
    if outputs.html is not None:
        # Linked from the page's own folder (it may lie elsewhere than the Markdown); after the pictures it embeds.
        page = render_markdown(comparison, figures=figure_links(plots, outputs.html))
        write_atomic(outputs.html, markdown_page(page, Path(outputs.html).parent, PAGE_TITLE))
    return markdown


def result_line(comparison: dict) -> str:
    """The comparison in one line, for the terminal and a CI log: the newest two runs the policy
    judged against each other, its verdicts on their cells, and any label whose runs ran other
    software (the page's summary in full: fabench.report.sections.compare_summary.compare_context)."""
    count = len(comparison["entries"])
    summary = compare_context(comparison)
    if summary is None:
        return f"{count} archived run: nothing to compare it with yet"
    old, new, _ = judged_pair(comparison)
    verdicts = ", ".join(f"{summary['counts'][kind]} {words}" for kind, words in VERDICT_WORDS.items()
                         if summary["counts"].get(kind)) or "none"
    line = f"{count} archived runs; {new} against {old}: {summary['cells']} cells judged: {verdicts}"
    for found in software_changes(comparison):
        line += (f"; label {found['label']} holds runs of other software ("
                 + ", ".join(f"{c['name']} {' -> '.join(c['values'])}" for c in found["changed"]) + ")")
    return line


def write_entry_pages(entries: list, folder: Path) -> list[Path]:
    """Each intact entry's archived report as a page of its own, its figures embedded, into
    folder/<label>--<run-id>.html (the folder replaced whole): Snakemake's HTML report shows every
    archived run beside the comparison, not only the config's own. A broken entry gets no page."""
    folder = Path(folder)
    pages = []
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.html"):
        old.unlink()
    for entry in entries:
        report = entry.path / "report.md"
        if not entry.ok or not report.is_file():
            continue
        page = folder / f"{entry.label}--{entry.run_id}.html"
        write_atomic(page, markdown_page(report.read_text(), entry.path, f"Archived run {entry.id}"))
        pages.append(page)
    return pages
