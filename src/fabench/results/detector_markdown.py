"""The detector check (fabench.analysis.detector) as Markdown: what a user reads to decide how
far to trust `fabench compare` on their archive."""

from __future__ import annotations

RULES = {"ours": "fabench (pooled noise, t-test at 0.5%)", "asv": "asv (factor 1.1 and Mann-Whitney p < 0.002)",
         "nvbench": "nvbench robust compare ([min, q3] apart by 0.5%)"}


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def render(check: dict) -> str:
    lines = ["# Detector check", "",
             "How `fabench compare` behaves on these archived runs: false alarms between runs of the same "
             "experiment, the calibration of the 95% prediction interval, and the share of stable cells flagged "
             "when a known change is injected into one run (every trial's time scaled, the run analysed again). "
             "asv's and nvbench's rules judge the same pairs from the same trials. Cells whose implementation "
             "differs between two runs are not repeats and are left out (listed per pair).", "",
             "## Runs", "", "| Entry | Hardware | Cards |", "|---|---|---|"]
    lines += [f"| {r['id']} | {r['hardware']} | {', '.join(c[:12] for c in r['cards']) or '-'} |" for r in check["runs"]]
    summary = check["summary"]
    lines += ["", "## Summary", "", "| Pairs | Cells | False alarms per 100 cells: " + " / ".join(RULES) +
              " | Outside the 95% PI | Every pair within the binomial bound |", "|---|---|---|---|---|"]
    for name in ("same card", "other card"):
        if name in summary:
            s = summary[name]
            alarms = " / ".join(f"{s['false_alarms_per_100'][rule]:.1f}" for rule in RULES)
            lines.append(f"| {s['pairs']} pair(s), {name} | {s['cells']} | {alarms} | {s['pi_outside']} "
                         f"({s['pi_outside_share']:.1%}, nominal {1 - check['level']:.0%}) | "
                         f"{'yes' if s['pi_within_bound'] else 'no'} |")
    lines += ["", "| Injected change | Stable cells | Flagged: " + " / ".join(RULES) + " |", "|---|---|---|"]
    for change in check["injected"]:
        s = summary.get(f"+{change:.0%}")
        if s:
            lines.append(f"| +{change:.0%} | {s['stable_cells']} | " +
                         " / ".join(pct(s["flagged_share"][rule]) for rule in RULES) + " |")
    lines += ["", "## Pairs", "", "| Old | New | Card | Cells | False alarms (ours/asv/nvbench) | Outside PI "
              "(bound) | +2% flagged (ours/asv/nvbench) | +5% flagged | Left out: other code |",
              "|---|---|---|---|---|---|---|---|---|"]
    for p in check["pairs"]:
        fa = "/".join(str(p["false_alarms"][r]) for r in RULES)
        inj = ["/".join(str(s["flagged"][r]) for r in RULES) + f" of {s['stable_cells']}" for s in p["sensitivity"]]
        lines.append(f"| {p['old']} | {p['new']} | {'same' if p['same_card'] else 'other'} | {p['cells']} | {fa} | "
                     f"{p['pi_outside']} ({p['pi_bound']}) | {' | '.join(inj)} | {len(p['other_code'])} |")
    left = sorted({cell for p in check["pairs"] for cell in p["other_code"]})
    if left:
        lines += ["", "Cells left out of some pair because their implementation differs: " + ", ".join(
            f"`{c}`" for c in left) + "."]
    return "\n".join(lines) + "\n"
