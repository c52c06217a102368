"""Render a collected run as the published report's Markdown, section for section.

Everything shown comes from the data: rows are the shapes that were measured, columns are the
three roles (baseline, vendor, triton) labelled with the backends that filled them on the run's
platform. The modules in fabench.report.sections compute each part's values; the templates in
fabench/report/templates/ (report.md.j2 and the sections/*.md.j2 it includes) write them out. Rendering
returns text: the caller writes the file (fabench.files.write_atomic).
"""

from __future__ import annotations

import os
from typing import Sequence

import jinja2

from fabench.report.format import fmt_ms, md_text
from fabench.report.model import ROLES, Run
from fabench.resources import TEMPLATE_DIR
from fabench.report.sections import appendix, comparison, correctness, limits, overview, precision, results, timing
from fabench.report.sections import published_claims, summary
from fabench.report.sections import timeline as timeline_section
from fabench.report.sections import sweep as sweep_section

TEMPLATE = "report.md.j2"
# Context name -> module computing it; report.md.j2 includes sections/<name>.md.j2 for each
# (overview.md.j2 includes the summary's, after the title).
SECTIONS = {"overview": overview, "summary": summary, "results": results, "limits": limits, "comparison": comparison,
            "published_claims": published_claims,
            "correctness": correctness, "timing": timing, "timeline": timeline_section, "precision": precision,
            "sweep": sweep_section,
            "appendix": appendix}


def template_env(template_dir: str | os.PathLike) -> jinja2.Environment:
    # StrictUndefined: a name a template expects but the context lacks fails the render loudly
    # instead of printing nothing.
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(template_dir), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
    env.filters["ms"] = fmt_ms
    return env


def render(collected: dict, config: dict, published: dict | None = None,
           template_dir: str | os.PathLike = TEMPLATE_DIR, figures: Sequence[tuple[str, str]] = (),
           sweep: dict | None = None, started_at: float | None = None) -> str:
    """The report as Markdown. `collected` is results.json as fabench.results.collect writes it,
    `config` the run's config in the user's order (variants: first is the reference, last the one
    compared with it), `published` the loaded report/published/*.yaml or None (no comparison),
    `figures` (title, path relative to the report) of the pictures drawn from the same results,
    `sweep` the tuning sweep's record (results/<run>/tune/sweep.json) or None, `started_at` when
    the workflow rendering it started (seconds since the epoch), for the run's time line."""
    run = Run(collected, config, sweep, started_at)
    context = {name: module.context(run, published) for name, module in SECTIONS.items()}
    context["labels"] = {role: md_text(run.label(role)) for role in ROLES}
    context["figures"] = [{"title": md_text(title), "path": path} for title, path in figures]
    return template_env(template_dir).get_template(TEMPLATE).render(**context)
