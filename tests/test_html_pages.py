"""report.html and compare.html as a reader sees them in a real headless Chromium (issue 40): every
list of the Markdown is a list on the page (not one paragraph of "- " items), every link to a
place in the page lands on an element of that id, and two variants with the same title get two
headings the summary can tell apart.

Blind side: the pages are built from committed runs (the CPU fixture and the H200 example archive),
not from a fresh workflow run; tests/test_archive_workflow.py opens Snakemake's own HTML report."""

from __future__ import annotations

import copy
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from fabench.analysis.policy import Rule
from fabench.report.compare_outputs import ComparisonOutputs, write_comparison
from fabench.report.html import markdown_page
from fabench.report.render import render
from fabench.results.archive_read import list_entries
from fabench.results.compare import compare_entries
from test_archive_workflow import browse, chromium
from workflow_util import REPO

CPU_RUN = Path(__file__).resolve().parent / "fixtures" / "cpu-run"
H200_ARCHIVE = REPO / "examples" / "h200" / "archive"


class Page(HTMLParser):
    """The ids, the in-page links, the paragraphs' text and the headings (id -> text) of a page."""

    def __init__(self, page: str):
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.paragraphs: list[str] = []
        self.headings: dict[str, str] = {}
        self._open: list[tuple[str, str | None, list[str]]] = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and (attrs.get("href") or "").startswith("#"):
            self.links.append(attrs["href"][1:])
        if tag == "p" or re.fullmatch(r"h[1-6]", tag):
            self._open.append((tag, attrs.get("id"), []))

    def handle_data(self, data):
        for _, _, text in self._open:
            text.append(data)

    def handle_endtag(self, tag):
        if self._open and self._open[-1][0] == tag:
            tag, ident, text = self._open.pop()
            if tag == "p":
                self.paragraphs.append("".join(text))
            elif ident:
                self.headings[ident] = "".join(text)


def shown(browser: str, html_page: str, tmp_path: Path, name: str) -> Page:
    """The page as Chromium builds it (--dump-dom), parsed."""
    path = tmp_path / name
    path.write_text(html_page)
    dom = browse(browser, path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    return Page(dom.stdout)


def flattened_lists(page: Page) -> list[str]:
    """Paragraphs that hold list items run together: "text: - item - item" or lines starting "- "."""
    return [p for p in page.paragraphs if re.search(r"(^|\n)\s*[-*] \S", p) or re.search(r": - \S.* - \S", p)]


def cpu_report(config_edit=None) -> str:
    collected = json.loads((CPU_RUN / "results.json").read_text())
    config = json.loads((CPU_RUN / "config.json").read_text())
    if config_edit:
        config_edit(config)
    return render(collected, config, None)


@pytest.fixture(scope="module")
def browser():
    return chromium()


def test_the_run_report_page_shows_its_lists_as_lists_and_its_links_land(browser, tmp_path):
    markdown = cpu_report()
    assert re.search(r"\S\n- ", markdown)  # the Markdown puts lists right under text (GitHub renders those)
    page = shown(browser, markdown_page(markdown, CPU_RUN, "Run"), tmp_path, "report.html")
    assert flattened_lists(page) == []
    assert page.links and [link for link in page.links if link not in page.ids] == []


def test_the_comparison_page_shows_its_lists_as_lists_and_its_links_land(browser, tmp_path):
    comparison = compare_entries(list_entries(H200_ARCHIVE), Rule.of({}), None, None)
    write_comparison(comparison, ComparisonOutputs(html=tmp_path / "compare.html"))
    page = shown(browser, (tmp_path / "compare.html").read_text(), tmp_path, "shown.html")
    assert flattened_lists(page) == []
    # the rule, the calibration note and the intervals' method: paragraphs of their own
    assert not [p for p in page.paragraphs if p.startswith("Rule.") and "95% confidence intervals" in p]
    assert page.links and [link for link in page.links if link not in page.ids] == []


def test_two_variants_with_one_title_get_two_headings_and_the_summary_links_the_last(browser, tmp_path):
    def same_titles(config):
        for variant in config["variants"].values():
            variant["title"] = "Same title"

    page = shown(browser, markdown_page(cpu_report(same_titles), CPU_RUN, "Run"), tmp_path, "twins.html")
    last = list(json.loads((CPU_RUN / "config.json").read_text())["variants"])[-1]
    twins = {ident: text for ident, text in page.headings.items() if text.startswith("Same title")}
    assert len(twins) == 2 and len(set(twins.values())) == 2, twins
    tuning = [link for link in page.links if link.startswith("same-title")]
    assert tuning and all(page.headings[link] == f"Same title ({last})" for link in tuning), (tuning, twins)


def test_headings_of_one_text_get_distinct_ids_as_github_numbers_them(tmp_path):
    """The page's own rule, without a browser: a repeated heading is numbered, code in a heading is its text."""
    page = Page(markdown_page("# A `b` c\n\ntext\n- one\n- two\n\n# A b c\n\n```\n- not a list\n```\n",
                              tmp_path, "x"))
    assert page.headings == {"a-b-c": "A b c", "a-b-c-1": "A b c"}
    assert flattened_lists(page) == [] and "- not a list" not in "".join(page.paragraphs)


def test_the_blank_line_rule_leaves_tables_and_code_alone(tmp_path):
    page = markdown_page("| a | b |\n|---|---|\n| - x | 1 |\n\n```\ntext\n- y\n```\n", tmp_path, "x")
    assert "<td>- x</td>" in page and "<li>" not in page


def test_a_number_that_wraps_to_the_start_of_a_line_stays_text(tmp_path):
    page = markdown_page("Measured in\n2026. A sentence.\n\nText\n1. first\n2. second\n", tmp_path, "x")
    assert "<ol>" in page and page.count("<li>") == 2 and "2026. A sentence." in page
