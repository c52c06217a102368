"""Stage 4, report: a collected run rendered as the published report's Markdown.

    render.py     render(collected, config, published, template_dir) -> str: the entry point
    model.py      Run: results and config indexed (variant order, shapes, roles, speedups)
    format.py     numbers, shapes, statuses, and the Markdown escaping of data text
    sections/     one module per part of the report, computing the values its template shows
    published.py  the published numbers: load_published(path), lookup, recast as a run

The templates are in the repository's report/ folder: report.md.j2 includes sections/*.md.j2,
which write the sentences. A new section: see fabench.report.sections.
"""
