"""fabench compare: archived entries side by side, regressions flagged; the exit status a CI gate reads."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from fabench.cli.common import (INTEGRITY, REGRESSION, TOO_FEW_ANSWERED, USAGE, UsageError,
                                     add_rule_options, comparison_rule, entries_from, fail, output_or_discard,
                                     resolve, share_type, written)
from fabench.files import output_folder_arg



def add_parser(commands) -> None:
    """`compare` on the subparsers of the fabench command."""
    compare = commands.add_parser("compare", help="archived entries side by side, regressions flagged")
    compare.add_argument("entries", nargs="*", metavar="ENTRY", help="entries to compare (default: all in --root)")
    compare.add_argument("--root", type=Path, default=Path("archive"), help="the archive folder (default: archive)")
    compare.add_argument("--baseline", metavar="ENTRY", help="entry every other is also compared with "
                                                              "(default: the oldest)")
    compare.add_argument("--published", type=Path, help="report/published/*.yaml: also flag reproduced cells "
                                                         "that differ from the published ones")
    compare.add_argument("--out-md", type=output_or_discard, help="write the Markdown here (default: standard "
                         f"output; {os.devnull}: nowhere). The result line goes to standard error either way")
    compare.add_argument("--out-json", type=output_or_discard, help="write the comparison as JSON here")
    compare.add_argument("--out-csv", type=output_or_discard, help="write one row per cell and entry here (for pandas)")
    compare.add_argument("--out-html", type=output_or_discard, help="write the Markdown as a page here, the figures "
                         "embedded")
    compare.add_argument("--plots", type=output_folder_arg, metavar="DIR", help="write versions-<variant>.png here")
    compare.add_argument("--fail-on", choices=["regression"], help="exit with status 3 when a cell regressed beyond "
                         "what chance gives one of the cells compared (for CI)")
    compare.add_argument("--min-answered", type=share_type, metavar="SHARE",
                         help="exit with status 4 when fewer than this share of the ok cells compared with the previous "
                         "entry got an answer (same or changed) (default with --fail-on: what the cells' noise lets "
                         "unchanged software reach, between 50%% and 90%%; else never; 0: never)")
    add_rule_options(compare)


def cmd_compare(args) -> int:
    from fabench.results.compare import CompareError, NothingToCompare, compare_entries
    from fabench.report.compare_outputs import ComparisonOutputs, result_line, write_comparison

    prog = "fabench compare"
    try:
        published, rule, entries, baseline = _inputs(args)
    except UsageError as err:
        return fail(prog, f"error: {err}", USAGE)
    try:
        comparison = compare_entries(entries, rule, baseline, published, in_given_order=bool(args.entries))
    except CompareError as err:
        return fail(prog, f"error: {err}", INTEGRITY if isinstance(err, NothingToCompare) else USAGE)
    markdown = write_comparison(comparison, ComparisonOutputs(
        markdown=written(args.out_md), json=written(args.out_json), csv=written(args.out_csv),
        html=written(args.out_html), plots=args.plots))
    if not args.out_md:
        sys.stdout.write(markdown)
    for item in comparison["left_out"]:
        print(f"{prog}: left out {item['id']}: {'; '.join(item['problems'])}", file=sys.stderr)
    flags = [f for f in comparison["flags"] if f["code"] == "regression"]
    # The result in one line on standard error, a CI log's record of what was judged.
    page = written(args.out_md) or written(args.out_html)
    print(f"{prog}: {result_line(comparison)}" + (f"; see {page}" if page else ""), file=sys.stderr)
    if flags and args.out_md:
        print(f"{prog}: {len(flags)} regression flag(s)" + (f"; see {page}" if page else ""), file=sys.stderr)
    if any(not e.ok for e in entries):
        return INTEGRITY
    return _gate_status(prog, args, comparison, rule)


def _inputs(args) -> tuple:
    """(the published numbers or None, the comparison rule, the entries, the baseline's id or None)
    the arguments name; UsageError on a bad one."""
    from fabench.results.archive_read import load_entry

    published = None
    if args.published:
        from fabench.results.published import PublishedError, load_published

        try:
            published = load_published(args.published)
        except PublishedError as err:
            raise UsageError(f"--published {err}") from None
    rule = comparison_rule(args)
    entries = entries_from(args)
    baseline = None
    if args.baseline:
        base = load_entry(resolve(args.baseline, args.root))
        baseline = base.id
        if base.id not in {e.id for e in entries}:
            entries.append(base)
    return published, rule, entries, baseline


def _gate_status(prog: str, args, comparison: dict, rule) -> int:
    """The CI gate's exit status (results.gates): a regression that holds for the comparison as a
    whole with --fail-on regression, too few answers for --min-answered, else 0; said on standard error."""
    from fabench.results.gates import gate, no_evidence

    decided = gate(comparison, rule, args.min_answered)
    if decided["regressions"] and args.fail_on == "regression":
        print(f"{prog}: failing on {len(decided['regressions'])} regression flag(s) that hold for the comparison "
              f"as a whole (--fail-on regression)", file=sys.stderr)
        return REGRESSION
    if reason := no_evidence(comparison, args.fail_on, args.min_answered):
        return fail(prog, reason, TOO_FEW_ANSWERED)
    answers = comparison["answers"]
    if (args.fail_on or args.min_answered is not None) and not decided["answered_ok"]:
        got = f"({answers['share']:.0%})" if answers["share"] is not None else "(no cell in both)"
        print(f"{prog}: {answers['answered']} of {answers['judged']} ok cells compared got an answer "
              f"{got}, fewer than --min-answered {decided['least']:.0%}", file=sys.stderr)
        return TOO_FEW_ANSWERED
    return 0
