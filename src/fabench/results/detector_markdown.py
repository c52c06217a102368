"""The detector check (fabench.analysis.detector) as Markdown: what a user reads to decide how
far to trust `fabench compare` on their archive."""

from __future__ import annotations

RULES = {"ours": "fabench (the comparison policy)", "asv": "asv (factor 1.1 and Mann-Whitney p < 0.002)",
         "nvbench": "nvbench robust compare ([min, q3] apart by 0.5%)"}
DONE_WHEN_TEXT = {
    "answered": "ok cells answered (same or changed), same-experiment pairs",
    "flagged": "cells flagged changed, same-experiment pairs",
    "unstable_per_run": "cells unstable, the worst run",
    "+2%": "ok cells flagged as a regression, +2% injected",
    "+5%": "ok cells flagged as a regression, +5% injected",
    "+5% stable": "cells stable in both flagged, +5% injected",
    "pi_misses": "medians outside the other run's 95% PI (limit: the binomial bound)",
}
COUNTS = ("flagged", "pi_misses")


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def figure_text(name: str, value: float | None) -> str:
    if value is None:
        return "n/a (no such pair)"
    return f"{value:d}" if name in COUNTS else f"{value:.1%}"


def trade_off_table(check: dict) -> list[str]:
    """The designs of the rule tried on the same pairs, one row each (fabench.analysis.detector.trade_off_rules)."""
    names = list(DONE_WHEN_TEXT)
    lines = ["| Design | " + " | ".join(names) + " | All rows hold |", "|---|" + "---|" * (len(names) + 1)]
    for row in check["trade_off"]:
        lines.append(f"| {row['design']} | " + " | ".join(figure_text(n, row["figures"][n]) for n in names) +
                     f" | {'yes' if row['holds'] else 'no'} |")
    return lines


def components_table(check: dict) -> list[str]:
    lines = ["| Hardware | Runs | Pairs: same card / other card | Cells | Between runs (one card) | "
             "Between cards | Cells with an estimate of their own (2+ pairs; the rule uses the pooled) |", "|---|---|---|---|---|---|---|"]
    for c in check["components"]:
        sd = ["n/a (no such pair)" if c[k] is None else f"{c[k]:.2%}" for k in ("between_run", "between_card")]
        lines.append(f"| {c['hardware']} | {len(c['runs'])} | {c['pairs']['same card']} / {c['pairs']['other card']} | "
                     f"{c['cells']['same card']} / {c['cells']['other card']} | {sd[0]} | {sd[1]} | {c['per_cell']} |")
    lines += ["", "| Run | Scope | Within a process | Between processes | Between the cards of the run "
              "(two processes on one card) | Unstable |", "|---|---|---|---|---|---|"]
    for r in check["runs"]:
        within = "n/a" if r["within_process"] is None else f"{r['within_process']:.2%}"
        between = "n/a" if r["between_process"] is None else f"{r['between_process']:.2%}"
        cards = ("one card" if r["between_card_in_run"] is None else f"{r['between_card_in_run']:.2%}") + (
            "" if r["same_card_process_gap"] is None else f" ({r['same_card_process_gap']:.2%})")
        unstable = "n/a" if r["unstable_share"] is None else f"{r['unstable_share']:.1%}"
        lines.append(f"| {r['id']} | {r['scope']} | {within} | {between} | {cards} | {unstable} |")
    return lines


NO_PI = "n/a: no prediction interval (one process per job)"


def pi_text(s: dict, level: float) -> str:
    """The calibration cells of one summary row: the misses and the bounds, or why there are none."""
    if not s["pi_checks"]:
        return f"{NO_PI} | n/a"
    return (f"{s['pi_outside']} of {s['pi_checks']} ({s['pi_outside_share']:.1%}, nominal {1 - level:.0%}) | "
            f"{'yes' if s['pi_within_bound'] else 'no'} / {'yes' if s['pi_every_pair_within_bound'] else 'no'}")


def render(check: dict) -> str:
    lines = ["# Detector check", "",
             "How `fabench compare` behaves on these archived runs, by exactly the rule it applies (below): false "
             "alarms between runs of the same experiment, how often it answers, the calibration of the 95% "
             "prediction interval, and the share of stable cells flagged when a known change is injected into one "
             "run of a pair (each run in turn: every trial's time scaled, the run analysed again). asv's and "
             "nvbench's rules judge the same pairs from the same trials. Each pair of runs on one GPU model is "
             "counted once; cells that ran other code in the two runs are not repeats and are left out (listed).",
             "", f"**Rule.** {check['rule']['text']} (margin {check['rule']['margin']:.2%}, alpha "
             f"{check['rule']['alpha']:.1%}, equivalence alpha {check['rule']['equivalence_alpha']:.0%}; fitted "
             f"values from calibration {check['rule']['fit']}" + (f", set by the config: {', '.join(check['rule']['chosen'])}"
                                                                  if check['rule']['chosen'] else "") + ").",
             "", "## Runs", "", "| Entry | Hardware | Cards |", "|---|---|---|"]
    lines += [f"| {r['id']} | {r['hardware']} | {', '.join(c[:12] for c in r['cards']) or '-'} |" for r in check["runs"]]
    lines += ["", "## Noise components", "", "Standard deviations of log time (fabench.analysis.components): "
              "between runs and between cards estimated from these runs' pairs of one experiment, pooled over "
              "their stable cells; within a process and between processes, the median over a run's stable cells.",
              "", *components_table(check)]
    lines += ["", f"## Acceptance (issue 36), on the {check['acceptance_on']} pairs", "",
              "| Figure | Measured | Limit | Holds |", "|---|---|---|---|"]
    for item in check["done_when"]:
        sense = ">=" if item["name"] in ("answered", "+2%", "+5%", "+5% stable") else "<="
        holds = "n/a" if item["holds"] is None else ("yes" if item["holds"] else "**no**")
        lines.append(f"| {DONE_WHEN_TEXT[item['name']]} | {figure_text(item['name'], item['value'])} | "
                     f"{sense} {figure_text(item['name'], item['limit'])} | {holds} |")
    summary = check["summary"]
    lines += ["", "## Summary", "", "| Pairs | Cells | Answered (of them stable) | False alarms per 100 cells: " +
              " / ".join(RULES) + " | Outside the other run's 95% PI (each way) | "
              "Within the binomial bound: all pairs / every pair |",
              "|---|---|---|---|---|---|"]
    for name in ("same card", "other card"):
        if name in summary:
            s = summary[name]
            alarms = " / ".join(f"{s['false_alarms_per_100'][rule]:.1f}" for rule in RULES)
            lines.append(f"| {s['pairs']} pair(s), {name} | {s['cells']} | {s['answered']} ({s['stable_cells']}) | "
                         f"{alarms} | {pi_text(s, check['level'])} |")
    lines += ["", "| Injected change | Ok cells (both runs of each pair in turn) | Flagged: " + " / ".join(RULES) +
              " |", "|---|---|---|"]
    for change in check["injected"]:
        s = summary.get(f"+{change:.0%}")
        if s:
            lines.append(f"| +{change:.0%} | {s['cells']} | " +
                         " / ".join(pct(s["flagged_share"][rule]) for rule in RULES) + " |")
    if check.get("trade_off"):
        lines += ["", "## Trade-off: the same pairs by other designs of the rule", "", *trade_off_table(check)]
    lines += ["", "## Pairs", "", "| Old | New | Scope | Card | Cells | Answered (stable) | Flagged (ours/asv/nvbench) | "
              "Outside PI, each way (bound) | +2% flagged (ours/asv/nvbench) of ok cells | +5% flagged | Left out: other code |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in check["pairs"]:
        fa = "/".join(str(p["false_alarms"][r]) for r in RULES)
        inj = ["/".join(str(s["flagged"][r]) for r in RULES) + f" of {s['cells']}" for s in p["sensitivity"]]
        outside = f"{p['pi_outside']} ({p['pi_bound']})" if p["pi_checks"] else "n/a (no PI)"
        lines.append(f"| {p['old']} | {p['new']} | {p['scope']} | {'same' if p['same_card'] else 'other'} | {p['cells']} | "
                     f"{p['answered']} ({p['stable_cells']}) | {fa} | {outside} | "
                     f"{' | '.join(inj)} | {len(p['other_code'])} |")
    left = sorted({cell for p in check["pairs"] for cell in p["other_code"]})
    if left:
        lines += ["", "Cells left out of some pair because they ran other code: " + "; ".join(
            f"`{c}`" for c in left) + "."]
    return "\n".join(lines) + "\n"
