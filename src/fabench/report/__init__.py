"""Stage 4, report: a collected run rendered as the published report's Markdown."""
