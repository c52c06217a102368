"""The comparison of archived entries (compare.compare_entries) as Markdown: one table per variant,
the flagged cells, each entry's versions and the published-vs-reproduced flags, rendered through
the template fabench/report/templates/compare.md.j2.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Sequence

from fabench.analysis.figures import cell_metric
from fabench.analysis.result_types import cell_stats
from fabench.report.format import fmt_ms_fine
from fabench.report.render import template_env
from fabench.report.sections.compare_summary import compare_context
from fabench.resources import TEMPLATE_DIR
from fabench.analysis.policy import Code
from fabench.platforms import PlatformName
from fabench.results.compare import FLAGGED
from fabench.shapes import shape_text

TEMPLATE = "compare.md.j2"
PUBLISHED_FLAGS = ("slower", "faster", "unstable", "matches", "not measured", "not comparable")
VERSION_ORDER = ("hip", "rocm", "cuda", "cudnn", "driver", "torch", "triton", "aiter", "aiter_commit", "runtime",
                 "image", "image_id")

# A verdict's code as a table cell shows it after the change: changes bold, reasons for no verdict in italics.
CODE_WORDS = {Code.REGRESSION: "**regression**", Code.IMPROVEMENT: "**improvement**",
              Code.NOW_AVAILABLE: "*now available*", Code.SMALL_CHANGE: "small change", Code.UNSTABLE: "*unstable*",
              Code.OTHER_HARDWARE: "*other hardware*", Code.OTHER_EXPERIMENT: "*other experiment*",
              Code.CLOCK: "*clock*", Code.ONE_PROCESS: "*one process*"}


def median_text(cell: dict) -> str:
    """A cell's median and 95% CI (device time, else wall-clock), or its status."""
    if cell["status"] is None:
        return "—"
    if cell["status"] != "ok":
        return cell["status"] + (f" ({cell['failure_kind']})" if cell.get("failure_kind") else "")
    metric = cell_metric(cell) if cell_stats(cell) else ("wall_mean_ms" if cell.get("wall_mean_ms") else None)
    if metric is None:
        return "ok, no median"
    stat = cell[metric]
    unit = "" if metric == "device_ms" else " wall"
    if not stat.get("ci95"):
        return f"{fmt_ms_fine(stat['median'])}{unit} (no CI)"
    return f"{fmt_ms_fine(stat['median'])} [{fmt_ms_fine(stat['ci95'][0])}, {fmt_ms_fine(stat['ci95'][1])}]{unit}"


def change_text(found: dict | None, prefix: str) -> str:
    if not found:
        return ""
    ratio = f"{found['ratio'] - 1:+.1%}" if found["ratio"] is not None else ""
    word = CODE_WORDS.get(found["code"], "")
    text = " ".join(part for part in (prefix, ratio, word) if part)
    return text if (ratio or word) else ""


def cell_text(cell: dict) -> str:
    parts = [median_text(cell), change_text(cell.get("vs_previous"), ""),
             change_text(cell.get("vs_baseline"), "vs baseline")]
    return " · ".join(p for p in parts if p)


def markdown_context(comparison: dict) -> dict:
    """What the template lays out: the entries, the flagged cells, one table per variant and the
    published-vs-reproduced sections."""
    entries = comparison["entries"]
    shapes = {r["shape_id"]: r["shape"] for r in comparison["rows"]}
    return {
        "rule": comparison["rule"],
        "rule_text": rule_text(comparison["rule"], noise_sources(comparison)),
        "experiments": comparison.get("experiments") or [],
        "baseline": comparison["baseline"],
        "entries": entries_table(entries),
        "count": len(entries),
        "left_out": comparison["left_out"],
        "flags": {kind: flag_lines_of([f for f in comparison["flags"] if f["code"] == kind], shapes)
                  for kind in FLAGGED},
        "tables": variant_tables(comparison),
        "published": published_context(comparison.get("published")),
        "ci_methods": ci_method_names(comparison),
    }


def variant_tables(comparison: dict) -> list[dict]:
    """One table per variant (in the rows' order): a row per shape and backend, a column per entry."""
    header = ["Config (B,S,H,D)", "Backend", *(e["id"] for e in comparison["entries"])]
    tables = []
    for variant in dict.fromkeys(r["variant"] for r in comparison["rows"]):
        rows = [[shape_text(r["shape"]), r["label"], *(cell_text(c) for c in r["cells"])]
                for r in comparison["rows"] if r["variant"] == variant]
        tables.append({"variant": variant, "header": list(header), "rows": rows})
    return tables


def entries_table(entries: list[dict]) -> dict:
    """A row per entry: its run, when it finished, its device and card, and the versions any entry names."""
    present = {k for e in entries for k, v in e["versions"].items() if v is not None}
    # The known versions in their usual order, then any others alphabetically.
    versions = [k for k in VERSION_ORDER if k in present] + sorted(present - set(VERSION_ORDER))
    # The GPU column where any entry's results name their card (a record may predate the record's
    # own gpu field: the results' hardware identity still names it).
    gpu = ["GPU"] if any(gpu_text(e) for e in entries) else []
    rows = [[e["id"], e["run"] or "", (e["finished"] or e["archived_at"] or "")[:19], e["device"] or "",
             *(gpu_text(e) for _ in gpu), *(version_text(e["versions"].get(k)) for k in versions)]
            for e in entries]
    return {"header": ["Entry", "Run", "Finished", "Device", *gpu, *versions], "rows": rows}


PUBLISHED_HEADER = ["Variant", "Config (B,S,H,D)", "Backend", "Published ms", "Ours: wall median [95% CI] ms",
                    "Flag", "Why"]


def published_context(published: dict | None) -> dict | None:
    """The published-vs-reproduced sections, one per entry; None when the comparison has none."""
    if not published:
        return None
    return {"source": published["source"], "rule": published["rule"],
            "entries": [published_section(section) for section in published["entries"]]}


def published_section(section: dict) -> dict:
    """One entry's published times: how many got each flag, and a row for each cell that differs or
    is unstable (the cells that match or could not be compared are only counted)."""
    counts = Counter(c["flag"] for c in section["cells"])
    rows = [published_row(c) for c in section["cells"] if c["flag"] in ("slower", "faster", "unstable")]
    return {"entry": section["entry"], "skipped": section["skipped"], "total": len(section["cells"]),
            "counts": [(flag, counts[flag]) for flag in PUBLISHED_FLAGS if counts[flag]],
            "header": list(PUBLISHED_HEADER), "rows": rows}


def published_row(cell: dict) -> list[str]:
    # The published numbers are wall-clock means, so ours is shown as its wall-clock median.
    ours = median_text({"status": "ok", "wall_mean_ms": {"median": cell["median"], "ci95": cell["ci95"]}})
    flag = f"**{cell['flag']}**" if cell["flag"] in ("slower", "faster") else f"*{cell['flag']}*"
    return [cell["variant"], shape_text(cell["shape"]), cell["backend"], f"{cell['published_ms']:g}", ours, flag,
            cell["why"]]


def flag_lines_of(flags: list[dict], shapes: dict) -> list[str]:
    """One line per cell and entry: its comparisons with the previous run and with the baseline."""
    grouped: dict[tuple, list[dict]] = {}
    for f in flags:
        grouped.setdefault((f["variant"], f["shape_id"], f["label"], f["entry"]), []).append(f)
    return [f"{variant} {shape_text(shapes[sid])} {label} in `{entry}`: "
            + "; ".join(f"vs {f['against_kind']} `{f['against']}`: {f['why']}" for f in found)
            for (variant, sid, label, entry), found in grouped.items()]


def gpu_text(entry: dict) -> str:
    """The cards an entry's results ran on (the policy's hardware identity), else its record's."""
    if entry.get("platform") == PlatformName.CPU:
        return ""
    return version_text((entry.get("hardware") or {}).get("cards") or entry.get("gpu"))


def version_text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return " / ".join(map(str, value))
    text = str(value)
    if text.startswith("sha256:"):
        return text[:19]
    return text[:12] if len(text) == 40 and all(c in "0123456789abcdef" for c in text) else text


def step_text(step: dict) -> str:
    what = "device time" if step["metric"] == "device_ms" else "wall-clock time"
    return (f"`{step['variant']}` {step['shape_id']} {step['label']}: {step['ratio'] - 1:+.1%} {what} from "
            f"`{step['before']}` to `{step['after']}` (over {step['runs']} runs of one GPU model"
            + ("; another card from there on)" if step.get("card_changed") else ")"))


def rule_text(rule: dict, sources: list[dict]) -> str:
    """The rule's text: it names each kind of pair's margin; the page lists the pairs below it."""
    return rule["text"]


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2%}"


def noise_sources(comparison: dict) -> list[dict]:
    """Per pair of entries judged: its kind, the margin its verdicts used (the smallest change it can
    see; a power-capped cell's apart), the noise no run sees by itself, and their one source (the
    config, or a calibration fitted on this hardware or on other hardware)."""
    calibrated = set((comparison.get("calibration") or {}).get("calibrated") or [])
    hardware = {e["id"]: e.get("hardware") or {} for e in comparison.get("entries") or []}
    found = []
    for pair in comparison.get("pairs") or []:
        if pair["kind"] is None:
            continue
        text = " ".join(str(v) for v in (hardware.get(pair["old"], {}).get(k) for k in ("platform", "device", "arch")) if v)
        source = pair["source"]
        if source.startswith("calibration "):
            source += f", fitted on {'this' if text in calibrated else 'other'} hardware"
        found.append({"pair": f"{pair['new']} against {pair['old']}", "kind": pair["kind"],
                      "margin": pct(pair["margin"]), "capped_margin": pct(pair.get("capped_margin")),
                      "unseen": pct((pair.get("unseen") or {}).get("steady")), "source": source})
    return found


def ci_method_names(comparison: dict) -> list[str]:
    """The distinct ways the runs' 95% confidence intervals were made, as the cells show them: each
    run's recorded method up to its prediction interval, which the page does not show."""
    methods = (c.get("ci_method") for r in comparison["rows"] for c in r["cells"] if c.get("ci_method"))
    return sorted({m.split("; pi95:")[0] for m in methods})


def render_markdown(comparison: dict, template_dir: str | Path | None = None,
                    figures: Sequence[tuple[str, str]] = ()) -> str:
    """The comparison as Markdown; `figures` (title, path relative to it) are shown at its end."""
    context = {**markdown_context(comparison), "figures": [{"title": t, "path": p} for t, p in figures],
               "steps": [step_text(step) for step in comparison.get("steps") or []],
               "noise": noise_sources(comparison),
               "unarchived": comparison.get("unarchived") or [],
               "compare_summary": compare_context(comparison)}
    return template_env(template_dir or TEMPLATE_DIR).get_template(TEMPLATE).render(**context)
