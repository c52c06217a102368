"""How values are spelled in the report: numbers, shapes, statuses, and Markdown escaping.

Text that comes from the data (config titles, labels and values, backend labels and reasons,
provenance, the published source) enters the Markdown through md_text, or md_code inside a
code span, so that no input can split a table row, hide the text after it as raw HTML or turn
the report's own markup around it into something else.
"""

from __future__ import annotations

import html
import json
import math
import re

from fabench.shapes import shape_text  # noqa: F401 (the sections spell shapes through this module)

# Words for a failed backend's failure_kind, one for each kind of the result contract
# (fabench.results.contract.FAILURE_KINDS; a test keeps the two the same).
FAILURE_WORDS = {
    "oom": "out of memory",
    "out_of_resources": "out of resources",
    "unsupported": "unsupported",
    "correctness": "wrong result",
    "fallback": "fell back to slow code",
    "config_mismatch": "ran another config",
    "error": "error",
}

# The report's own markup (* and `), what starts raw HTML or an entity (< > &), what starts a
# link or picture ([ ]: a title "[x](javascript:...)" stays text), what splits a table cell (|),
# and the backslash, so that a backslash in the data cannot escape what follows.
# str.translate replaces each character once: the backslash added before | is not doubled.
_MD_ESCAPES = str.maketrans({"\\": "\\\\", "`": "\\`", "*": "\\*", "|": "\\|", "[": "\\[", "]": "\\]",
                             "<": "&lt;", ">": "&gt;", "&": "&amp;"})
_LINE_BREAKS = re.compile(r"\r\n|\r|\n")


def md_text(value) -> str:
    """Data text as Markdown that shows exactly that text, on one line."""
    return _LINE_BREAKS.sub(" ", str(value)).translate(_MD_ESCAPES)


def md_code(value) -> str:
    """Data text as a code span: fenced by more backticks than it holds, so none can close it."""
    text = _LINE_BREAKS.sub(" ", str(value))
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def fmt(value, spec: str, missing: str = "n/a") -> str:
    return missing if value is None else format(value, spec)


def fmt_ms(value) -> str:
    """Milliseconds as the published report prints them: 3 decimals."""
    return fmt(value, ".3f")


def fmt_ms_fine(value) -> str:
    """Milliseconds to 3 decimals, 4 below 0.1 ms: the comparison's medians and intervals, where a
    short kernel's interval needs the digit."""
    return fmt(value, ".3f" if value is None or abs(value) >= 0.1 else ".4f")


def fmt_sig(value, digits: int = 3) -> str:
    """`digits` significant digits without exponent (0.0236, 14.7, 530): small TFLOP/s stay visible."""
    if value is None:
        return "n/a"
    if value == 0 or not math.isfinite(value):
        return format(value, "g")
    rounded = float(f"{value:.{digits}g}")
    return f"{rounded:.{max(0, digits - 1 - math.floor(math.log10(abs(rounded))))}f}"


def fmt_times(value) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def bold(text: str, on: bool) -> str:
    return f"**{text}**" if on else text


def value_text(value) -> str:
    """A config value; JSON spelling for booleans and null, as in aiter's config file (PRELOAD_V=false)."""
    return value if isinstance(value, str) else json.dumps(value)


def status_text(backend: dict | None) -> str:
    """A backend's state in a few words, for a cell where its time would be."""
    if backend is None:
        return "not run"
    if backend["status"] == "failed":
        return f"failed: {FAILURE_WORDS.get(backend['failure_kind'], md_text(backend['failure_kind']))}"
    return backend["status"]


def backend_name(name: str, backend: dict) -> str:
    """A backend as the tables name it: its label and, in code, the name the config uses."""
    return f"{md_text(backend['label'])} ({md_code(name)})"


def heading_anchor(heading: str) -> str:
    """The anchor of a heading, by GitHub's rule, which the HTML page follows too
    (fabench.report.html): the heading's text lower-cased, punctuation dropped, spaces as hyphens.
    Escapes are undone first, as the rendered text has none. A page gives the second heading of
    the same anchor "-1", the third "-2"."""
    text = html.unescape(re.sub(r"\\(.)", r"\1", heading)).strip().lower()
    text = re.sub(r"[`*_]", "", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
