"""Markup from config never reaches a page live (issue 26): a title or label holding a Markdown
link to javascript: or raw HTML is text in report.md and inert in the HTML page, through the real
renderer and the real Markdown-to-HTML conversion (fabench.report.html)."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from fabench.report.html import markdown_page
from fabench.report.render import render

CPU_RUN = Path(__file__).resolve().parent / "fixtures" / "cpu-run"
LINK = "[click me](javascript:alert(document.cookie))"
RAW = '<img src=x onerror="alert(1)"><script>alert(2)</script>'


class Elements(HTMLParser):
    """Every element of a page with its attributes."""

    def __init__(self, page: str):
        super().__init__()
        self.found: list[tuple[str, dict]] = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))


def live_parts(page: str) -> list[str]:
    """What could run code: scripts, event handlers, addresses that are not a page or a picture."""
    found = []
    for tag, attrs in Elements(page).found:
        if tag in ("script", "iframe", "object", "embed"):
            found.append(tag)
        found += [f"{tag} {name}" for name in attrs if name.startswith("on")]
        for name in ("href", "src"):
            value = (attrs.get(name) or "").replace("\t", "").strip().lower()
            if value.startswith(("javascript:", "vbscript:", "data:text")):
                found.append(f"{tag} {name}={value}")
    return found


@pytest.fixture
def hostile_report() -> str:
    collected = json.loads((CPU_RUN / "results.json").read_text())
    config = json.loads((CPU_RUN / "config.json").read_text())
    first, last = list(config["variants"])[0], list(config["variants"])[-1]
    config["variants"][first]["title"] = f"Title {LINK}"
    config["variants"][first]["label"] = f"Label {RAW}"
    config["variants"][last]["label"] = f"![pic](javascript:alert(3)) {LINK}"
    return render(collected, config, None)


def test_a_link_or_html_in_config_text_is_plain_text_in_report_md(hostile_report):
    assert "Title \\[click me\\](javascript:alert(document.cookie))" in hostile_report
    assert "](javascript:" not in hostile_report.replace("\\](javascript:", "")
    assert "<img" not in hostile_report and "<script" not in hostile_report


def test_the_html_report_of_that_run_has_nothing_live(hostile_report, tmp_path):
    page = markdown_page(hostile_report, tmp_path, "Run")
    assert live_parts(page) == []
    assert "Title [click me](javascript:alert(document.cookie))" in page  # shown as the text it is


@pytest.mark.parametrize("markdown", [
    LINK, RAW, "[a](JaVaScRiPt:alert(1))", "[a](java&#x09;script:alert(1))", "[a](  javascript:alert(1))",
    "![a](javascript:alert(1))", "[a](data:text/html;base64,PHNjcmlwdD4=)", "[a][r]\n\n[r]: javascript:alert(1)",
    '<div onclick="alert(1)">x</div>', "<a href=\"javascript:alert(1)\">x</a>", "[a](vbscript:msgbox(1))",
])
def test_markdown_given_to_the_page_directly_is_inert(markdown, tmp_path):
    """However the Markdown came to hold it: the page conversion itself keeps nothing live."""
    assert live_parts(markdown_page(markdown, tmp_path, "x")) == []


def test_pages_keep_their_links_and_embedded_pictures(tmp_path):
    png = Path(__file__).resolve().parents[1] / "examples" / "h200" / "compare"
    picture = next(png.glob("*.png"))
    page = markdown_page(f"[next](compare.html) [web](https://example.org)\n\n![plot]({picture.name})", png, "x")
    attrs = [a for _, a in Elements(page).found]
    assert {"href": "compare.html"} in attrs and {"href": "https://example.org"} in attrs
    assert any(a.get("src", "").startswith("data:image/png;base64,") for a in attrs)
