"""A Markdown report as one self-contained HTML page, for Snakemake's HTML report, which shows an
HTML result as a page (in a frame) where it offers any other text file only as a download.

    markdown_page(markdown_text, base_dir, title)

Tables and code blocks are rendered by the `markdown` library, lists also where they follow a line
of text without a blank line (as GitHub renders them; the library would make them one paragraph),
and every heading gets the id GitHub gives it (fabench.report.format.heading_anchor, a repeated
one numbered -1, -2), so that the report's links to its sections land; each picture the Markdown links
by a relative path under base_dir is embedded as a data URI, because the frame that shows the
page cannot reach files next to it. Nothing in the Markdown becomes live on the page: raw HTML is
shown as text, and a link or picture whose address could run code (javascript:, vbscript:, a
data: link) loses the address. The report escapes config text already (report.format.md_text);
this holds for any Markdown given.
"""

from __future__ import annotations

import base64
import html
import mimetypes
import re
from pathlib import Path

import markdown
from markdown.extensions import Extension
from markdown.extensions.toc import render_inner_html, strip_tags
from markdown.preprocessors import Preprocessor
from markdown.treeprocessors import Treeprocessor

from fabench.report.format import heading_anchor

# Where an address may lead: links to the web, mail and places in the page or beside it; pictures
# from beside the page or embedded (embed_images).
LINK_SCHEMES = {"", "http", "https", "mailto"}
PICTURE_SCHEMES = {""}
PICTURE_DATA = re.compile(r"data:image/(png|jpeg|gif|webp);base64,", re.IGNORECASE)
# What a browser drops from an address before reading its scheme ("java\tscript:" is javascript:).
IGNORED_IN_URLS = re.compile(r"[\x00-\x20\x7f]")
# Markdown's image syntax with a relative target: ![alt](path)
IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<path>[^)\s:]+)\)")
# A list item; after a line of text only a bullet or "1." starts a list (GitHub's rule: "2026. " in a
# wrapped sentence does not).
LIST_ITEM = re.compile(r"\s*([-*+]|\d+[.)])\s")
LIST_START = re.compile(r"\s*([-*+]|1[.)])\s")
HEADING = re.compile(r"h[1-6]")
STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem auto; max-width: 80rem; padding: 0 1rem; color: #222; }
table { border-collapse: collapse; margin: 0.8rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #bbb; padding: 0.25rem 0.6rem; text-align: left; }
th { background: #f0f0f0; }
pre { background: #f6f6f6; padding: 0.6rem; overflow-x: auto; }
img { max-width: 100%; }
"""


class InertMarkup(Extension):
    """Raw HTML kept as text, and addresses that could run code dropped."""

    def extendMarkdown(self, md):  # noqa: N802 (the markdown library's name)
        md.preprocessors.deregister("html_block")
        md.inlinePatterns.deregister("html")
        md.treeprocessors.register(SafeAddresses(md), "safe_addresses", 0)


class GitHubLayout(Extension):
    """Lists right under a line of text, and the headings' ids, as GitHub renders them."""

    def extendMarkdown(self, md):  # noqa: N802 (the markdown library's name)
        # After the fenced code blocks are set aside (priority 25): a "- " line in code stays code.
        md.preprocessors.register(ListAfterText(md), "list_after_text", 20)
        # After the inline markup is rendered (priority 20): the id is made from the shown text.
        md.treeprocessors.register(HeadingIds(md), "heading_ids", 5)


class ListAfterText(Preprocessor):
    def run(self, lines):
        out = []
        for line in lines:
            if out and out[-1].strip() and LIST_START.match(line) and not LIST_ITEM.match(out[-1]):
                out.append("")
            out.append(line)
        return out


class HeadingIds(Treeprocessor):
    def run(self, root):
        seen: set[str] = set()
        for element in root.iter():
            if isinstance(element.tag, str) and HEADING.fullmatch(element.tag):
                base = name = heading_anchor(html.unescape(strip_tags(render_inner_html(element, self.md))))
                number = 0
                while name in seen:
                    number += 1
                    name = f"{base}-{number}"
                seen.add(name)
                element.set("id", name)


class SafeAddresses(Treeprocessor):
    def run(self, root):
        for element in root.iter():
            for attribute in ("href", "src"):
                address = element.get(attribute)
                if address is not None and not safe_address(address, picture=attribute == "src"):
                    del element.attrib[attribute]


def safe_address(address: str, picture: bool) -> bool:
    """Whether a link's (or, with `picture`, an image's) address leads only to a page or a picture."""
    address = IGNORED_IN_URLS.sub("", html.unescape(address))
    if picture and PICTURE_DATA.match(address):
        return True
    scheme = address.split(":", 1)[0].lower() if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", address) else ""
    return scheme in (PICTURE_SCHEMES if picture else LINK_SCHEMES)


def markdown_page(text: str, base_dir: Path, title: str) -> str:
    body = markdown.markdown(embed_images(text, Path(base_dir)),
                             extensions=["tables", "fenced_code", InertMarkup(), GitHubLayout()], output_format="html")
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
