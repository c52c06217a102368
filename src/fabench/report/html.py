"""A Markdown report as one self-contained HTML page, for Snakemake's HTML report, which shows an
HTML result as a page (in a frame) where it offers any other text file only as a download.

    markdown_page(markdown_text, base_dir, title)

Tables and code blocks are rendered by the `markdown` library; each picture the Markdown links
by a relative path under base_dir is embedded as a data URI, because the frame that shows the
page cannot reach files next to it.
"""

from __future__ import annotations

import base64
import html
import mimetypes
import re
from pathlib import Path

import markdown

# Markdown's image syntax with a relative target: ![alt](path)
IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<path>[^)\s:]+)\)")
STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem auto; max-width: 80rem; padding: 0 1rem; color: #222; }
table { border-collapse: collapse; margin: 0.8rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #bbb; padding: 0.25rem 0.6rem; text-align: left; }
th { background: #f0f0f0; }
pre { background: #f6f6f6; padding: 0.6rem; overflow-x: auto; }
img { max-width: 100%; }
"""


def markdown_page(text: str, base_dir: Path, title: str) -> str:
    body = markdown.markdown(embed_images(text, Path(base_dir)), extensions=["tables", "fenced_code"],
                             output_format="html")
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n")


def embed_images(text: str, base_dir: Path) -> str:
    """Each ![alt](relative path) of a picture under base_dir as ![alt](data:...); others unchanged."""
    root = base_dir.resolve()

    def inline(match: re.Match) -> str:
        path = (root / match["path"]).resolve()
        mime = mimetypes.guess_type(path.name)[0] or ""
        if not (path.is_relative_to(root) and path.is_file() and mime.startswith("image/")):
            return match[0]
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return f"![{match['alt']}](data:{mime};base64,{data})"

    return IMAGE.sub(inline, text)
