"""fabench detector-check: the change detector's false alarms, answers, calibration and sensitivity on
archived runs, a known change injected."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fabench.cli.common import (INTEGRITY, REGRESSION, USAGE, UsageError, add_rule_options, comparison_rule,
                                     entries_from, fail, output_or_discard, write_outputs)


def add_parser(commands) -> None:
    """`detector-check` on the subparsers of the fabench command."""
    check = commands.add_parser("detector-check", help="the change detector's false alarms, answers, calibration "
                                "and sensitivity on archived runs (a known change injected)")
    check.add_argument("entries", nargs="*", metavar="ENTRY", help="entries to use (default: all in --root)")
    check.add_argument("--root", type=Path, action="append", help="an archive folder (repeatable: the runs of "
                       "several archives together; default: archive)")
    check.add_argument("--out-md", type=output_or_discard, help="write the Markdown here (default: standard output; "
                       f"{os.devnull}: nowhere)")
    check.add_argument("--out-json", type=output_or_discard, help="write the check as JSON here")
    check.add_argument("--trade-off", action="store_true", help="also judge the same pairs by other designs of the "
                       "rule (margins, with and without the noise no run sees by itself): the table in docs/archive.md")
    check.add_argument("--fail-on", choices=["acceptance"], help="exit with status 3 when an acceptance row "
                       "fails (fabench.analysis.detector.ACCEPTANCE), or none could be measured")
    add_rule_options(check)


def cmd_detector_check(args) -> int:
    from fabench.analysis.detector import detector_check, holds
    from fabench.results.detector_markdown import render

    prog = "fabench detector-check"
    try:
        rule = comparison_rule(args)
        entries = _entries(args)
    except UsageError as err:
        return fail(prog, f"error: {err}", USAGE)
    runs = _usable_runs(prog, entries)
    if len(runs) < 2:
        return fail(prog, f"error: {len(runs)} usable entr{'y' if len(runs) == 1 else 'ies'}: the check needs "
                          f"two runs of one experiment on the same GPU model", USAGE)
    check = detector_check(runs, rule, trade_off=args.trade_off)
    write_outputs(args, render(check), check)
    if len(runs) < len(entries):
        return INTEGRITY
    if args.fail_on == "acceptance" and not holds(check):
        failed = [f"{i['name']} ({i['kind']})" for i in check["acceptance"] if i["holds"] is False]
        print(f"{prog}: failing on the acceptance (--fail-on acceptance): " +
              (", ".join(failed) if failed else "no row could be measured"), file=sys.stderr)
        return REGRESSION
    return 0


def _entries(args) -> list:
    """The entries of every --root (or those named, under one root); UsageError on a run given twice."""
    roots = args.root or [Path("archive")]
    if args.entries and len(roots) > 1:
        raise UsageError("name entries with one --root only (several roots: every entry of each)")
    entries = [e for root in roots for e in entries_from(argparse.Namespace(entries=args.entries, root=root))]
    twice = sorted({e.id for e in entries if [x.id for x in entries].count(e.id) > 1})
    if twice:
        raise UsageError(f"entry {twice[0]} is in more than one --root: give each run once")
    return entries


def _usable_runs(prog: str, entries: list) -> list[tuple[str, list[dict]]]:
    """(id, results) of each entry whose results can be used, oldest first; each left out said on standard error."""
    from fabench.results.compare import usable_results

    runs = []
    for entry in sorted(entries, key=lambda e: e.sort_key):
        results, problems = usable_results(entry)
        if results is None:
            print(f"{prog}: left out {entry.id}: {'; '.join(problems)}", file=sys.stderr)
        else:
            runs.append((entry.id, results))
    return runs
