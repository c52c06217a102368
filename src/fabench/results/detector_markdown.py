"""The detector check (fabench.analysis.detector) as Markdown: what a user reads to decide how
far to trust `fabench compare` on their archive, per kind of pair."""

from __future__ import annotations

from fabench.analysis.detector import ACCEPTANCE, RULES

RULE_NAMES = {"ours": "fabench (the comparison policy)", "asv": "asv (factor 1.1 and Mann-Whitney p < 0.002)",
              "nvbench": "nvbench robust compare ([min, q3] apart by 0.5%)"}
ROW_TEXT = {row.name: row.text for row in ACCEPTANCE}
FIGURE_TEXT = {"false_changes": "False changes per cell", "pairs_with_a_false_change": "Pairs with a false change",
               "answered": "Answered", "+2%": "+2% flagged", "+5%": "+5% flagged",
               "pi_misses": "Beyond the 95% prediction"}


def pct(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}%}"


def with_interval(figure: dict, digits: int = 1) -> str:
    """A rate with its 95% interval over runs and what it counts."""
    if figure.get("value") is None:
        return "n/a (no such pair)"
    interval = "" if figure.get("low") is None else f" [{pct(figure['low'], digits)}, {pct(figure['high'], digits)}]"
    return f"{pct(figure['value'], digits)}{interval} of {figure['n']}"


def acceptance_table(check: dict) -> list[str]:
    lines = ["| Row | Pairs | Measured [95% interval over runs] | Floor | Holds |", "|---|---|---|---|---|"]
    for item in check["acceptance"]:
        if item["sense"] == "band":
            floor = f"interval holds {pct(item['floor'], 0)}"
        else:
            floor = f"{item['sense']} {pct(item['floor'], 1)}"
        interval = "" if item["low"] is None else f" [{pct(item['low'])}, {pct(item['high'])}]"
        holds = (f"n/a ({item['why']})" if item.get("why") else "n/a") if item["holds"] is None else (
            "yes" if item["holds"] else "**no**")
        lines.append(f"| {ROW_TEXT[item['name']]} | {item['kind']} | {pct(item['value'], 2)}{interval} | {floor} | {holds} |")
    return lines


def summary_table(check: dict) -> list[str]:
    return _summary_rows(check["summary"], "Pair type", lambda kind: kind)


def scope_table(check: dict) -> list[str]:
    """The per-kind figures of every scope's pairs (fitted, validation, test): in-sample beside out."""
    lines = []
    for scope, totals in check["by_scope"].items():
        rows = _summary_rows(totals, "Scope: pair type", lambda kind, scope=scope: f"{scope}: {kind}")
        lines += rows if not lines else rows[2:]
    return lines


def _summary_rows(totals: dict, title: str, label) -> list[str]:
    names = list(FIGURE_TEXT)
    lines = [f"| {title} | Margin (fitted as) | " + " | ".join(FIGURE_TEXT[n] for n in names) +
             " | False alarms per 100 cells: " + " / ".join(RULES) + " |", "|---|---|" + "---|" * (len(names) + 1)]
    for kind, s in totals.items():
        alarms = " / ".join("n/a" if s["peers_false_alarms"][r] is None else f"{100 * s['peers_false_alarms'][r]:.1f}"
                            for r in RULES)
        margin = f"{s['margin']['value']:.2%}" + ("" if s["margin"]["fitted_as"] == kind else f" ({s['margin']['fitted_as']})")
        lines.append(f"| {label(kind)} ({s['answered']['pairs']} pairs) | {margin} | " +
                     " | ".join(with_interval(s[n], 2 if n == "false_changes" else 1) for n in names) +
                     f" | {alarms} |")
    return lines


def components_table(check: dict) -> list[str]:
    lines = ["| Pair type | Class | Unseen noise (sd a cell) | Degrees of freedom | Share of the process noise kept | "
             "Pairs | Runs | Cells | Margin |", "|---|---|---|---|---|---|---|---|---|"]
    for kind, values in check["components"].items():
        for klass in ("steady", "capped"):
            if klass in values:
                v = values[klass]
                df = "exact (none found)" if v["df"] is None else f"{v['df']:.1f}"
                lines.append(f"| {kind} | {klass} | {v['noise']:.2%} | {df} | {v['scale']:.2f} | {v['pairs']} | "
                             f"{v['runs']} | {v['cells']} | {v['margin']:.2%} |")
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


def trade_off_table(check: dict) -> list[str]:
    """The designs of the rule tried on the same pairs (fabench.analysis.detector.trade_off_rules)."""
    names = list(check["trade_off"][0]["figures"]) if check["trade_off"] else []
    lines = ["| Design | " + " | ".join(names) + " | All rows hold |", "|---|" + "---|" * (len(names) + 1)]
    for row in check["trade_off"]:
        lines.append(f"| {row['design']} | " + " | ".join(pct(row["figures"].get(n), 2) for n in names) +
                     f" | {'yes' if row['holds'] else 'no'} |")
    return lines


def render(check: dict) -> str:
    rule = check["rule"]
    margins = ", ".join(f"{kind} {margin:.2%}" for kind, margin in rule["margins"].items())
    lines = ["# Detector check", "",
             "How `fabench compare` behaves on these archived runs, by exactly the rule it applies (below), per kind "
             "of pair (the same card, another card of one host, another host, a run over several cards of one host "
             "or of two): false "
             "changes between runs of unchanged software, how often it answers, how often a change lies beyond its "
             "95% prediction (both ways), and the share of ok cells flagged when a known change is injected into one "
             "run of a pair (each run in turn: every trial's time scaled, the run analysed again). Every rate has "
             "its 95% interval from a bootstrap over runs, the unit all of a run's cells share. Cells that ran other "
             "code in the two runs are no repeats and are left out (listed).",
             "", f"**Rule.** {rule['text']} (margins: {margins}; alpha {rule['alpha']:.1%}, equivalence alpha "
             f"{rule['equivalence_alpha']:.0%}; fitted values from calibration {rule['fit']}" +
             (f", set by the config: {', '.join(rule['chosen'])}" if rule["chosen"] else "") + ").",
             "", "## Runs", "", "| Entry | Hardware | Cards | Scope |", "|---|---|---|---|"]
    lines += [f"| {r['id']} | {r['hardware']} | {', '.join(c[:12] for c in r['cards']) or '-'} | {r['scope']} |"
              for r in check["runs"]]
    lines += ["", f"## Acceptance, on the {check['acceptance_on']} pairs", "",
              "Runs are `fitted` (a calibration fit was made on them), `validation` (a design decision of the rule "
              "saw them) or `test` (every other run): the acceptance is measured on the pairs furthest from the fit.",
              "", *acceptance_table(check)]
    lines += ["", "## Per kind of pair", "", *summary_table(check)]
    if len(check.get("by_scope") or {}) > 1:
        lines += ["", "## Per kind of pair, every scope", "",
                  "The same figures on the pairs of each scope: `fitted` pairs are in-sample (the fit was made on "
                  "them), the others are not.", "", *scope_table(check)]
    lines += ["", "## Noise components, estimated from these runs", "",
              "What two runs of each kind of pair differ by in a cell beyond their processes' noise "
              "(fabench.analysis.components.fit: steady cells and cells held at a power cap apart; degrees of freedom "
              "from a bootstrap over runs), and the margin fitted from it; per run, the spread within and between its "
              "processes (median over its stable cells).", "", *components_table(check)]
    if check.get("trade_off"):
        lines += ["", "## Trade-off: the same pairs by other designs of the rule", "", *trade_off_table(check)]
    lines += ["", "## Pairs", "", "| Old | New | Kind | Scope | Cells | Answered | Flagged (ours/asv/nvbench) | "
              "Beyond the prediction (bound) | +2% flagged | +5% flagged | Left out: other code |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in check["pairs"]:
        fa = "/".join(str(p["false_alarms"][r]) for r in RULES)
        inj = [f"{s['flagged']['ours']} of {s['cells']}" for s in p["sensitivity"]]
        outside = f"{p['pi_misses']} of {p['pi_checks']} ({p['pi_bound']})" if p["pi_checks"] else "n/a"
        lines.append(f"| {p['old']} | {p['new']} | {p['kind']} | {p['scope']} | {p['cells']} | {p['answered']} | {fa} | "
                     f"{outside} | {' | '.join(inj)} | {len(p['other_code'])} |")
    left = sorted({cell for p in check["pairs"] for cell in p["other_code"]})
    if left:
        lines += ["", "Cells left out of some pair because they ran other code: " + "; ".join(
            f"`{c}`" for c in left) + "."]
    return "\n".join(lines) + "\n"
