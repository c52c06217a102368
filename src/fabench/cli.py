"""fabench: the archive of finished runs and their comparison, without running anything.

    fabench archive store RUN_DIR [--root archive] [--label L] [--extra NAME=PATH ...]
    fabench archive list [--root archive]
    fabench archive verify ENTRY [--root archive]
    fabench compare [ENTRY ...] [--root archive] [--configfile FILE] [--margin M] [--baseline ENTRY]
                    [--published FILE] [--out-md FILE] [--out-json FILE] [--out-csv FILE]
                    [--out-html FILE] [--plots DIR] [--fail-on regression] [--min-answered SHARE]
    fabench detector-check [ENTRY ...] [--root archive ...] [--configfile FILE] [--margin M]
                    [--out-md FILE] [--out-json FILE] [--trade-off]

Both judge by the comparison policy (fabench.analysis.policy) that `snakemake compare` applies:
its defaults, or the `comparison` key of --configfile (a workflow config), --margin over it.

An ENTRY is an entry's directory, or <label>/<run-id> (also <label>/<number>, or a bare <label>
for its newest intact entry) under --root. `compare` without entries compares every entry in --root.

Exit status: 0 done; 1 an integrity problem (a changed or missing archived file, an entry left
out of a comparison, a run refused as incomplete) or an entry that could not be written (a full
disk: nothing is left of it); 2 a usage error (bad option or --label, no such entry); 3 a
regression, with `compare --fail-on regression`; 4 too few cells judged: the share of ok cells
compared with the previous entry that got same or changed is below `compare --min-answered`
(with `--fail-on regression` its default is 0.9, else it is asked for alone), so a CI gate fails
where it has no evidence (a regression, 3, is reported first); 5 `archive store` of a run whose
measurements are already an intact entry (nothing stored; the entry is printed: a "store every
run" step may accept 0 and 5); 130 interrupted (SIGINT or SIGTERM: an entry is stored whole or
not at all).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Sequence

from fabench.analysis.calibration import CalibrationError
from fabench.files import OutputPathError, output_file_arg, output_folder_arg, write_atomic, write_json

USAGE, INTEGRITY, REGRESSION, TOO_FEW_ANSWERED, ALREADY_ARCHIVED, INTERRUPTED = 2, 1, 3, 4, 5, 130
MIN_ANSWERED = 0.9  # compare --min-answered's default: the share of cells the acceptance asks answered


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """Errors on one line, with where to look, and exit status 2."""

    def error(self, message: str):
        self.exit(USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def fail(prog: str, message: str, status: int) -> int:
    print(f"{prog}: {message}", file=sys.stderr)
    return status


# --out-md /dev/null (or any --out-* option naming the null device): the output is not wanted, and
# not written to standard output either; the result line still comes (cmd_compare).
DISCARD = Path(os.devnull)


def output_or_discard(text: str) -> Path:
    """argparse type of an --out-* option: the null device as DISCARD, else a file to write
    (output_file_arg refuses devices, links and missing folders)."""
    if Path(text).resolve() == DISCARD:
        return DISCARD
    return output_file_arg(text)


def written(path: Path | None) -> Path | None:
    """Where an output goes: nowhere for DISCARD."""
    return None if path == DISCARD else path


def margin_type(text: str) -> float:
    try:
        value = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (0.02 or 2%)") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a fraction between 0 and 1 (0.02 or 2%)")
    return value


def share_type(text: str) -> float:
    try:
        value = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (0.9 or 90%)") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a share between 0 and 1 (0.9 or 90%)")
    return value


def comparison_rule(args):
    """The comparison policy the user asked for: --configfile's `comparison` key (the policy's
    defaults without one), --margin over it. UsageError with one line if it cannot be used."""
    from fabench.analysis.policy import Rule, RuleError, refuse_retired
    from fabench.config import ConfigError, block_errors, read_config_file

    config = {}
    if args.configfile:
        try:
            config = read_config_file(args.configfile)  # a regular file, bounded, YAML, a mapping
        except ConfigError as err:
            raise UsageError(f"--configfile {err}") from None
        if problem := block_errors(config, ("comparison",)):  # checked as the workflow checks it
            raise UsageError(f"--configfile {args.configfile}: {problem}")
    if args.margin and isinstance(config.get("comparison") or {}, dict):
        config = {**config, "comparison": {**(config.get("comparison") or {}), "margin": args.margin}}
    try:
        refuse_retired(config)
        return Rule.of(config)
    except RuleError as err:
        raise UsageError(f"--configfile {args.configfile}: {err}" if args.configfile else str(err)) from None


def extra_type(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME=PATH (image-manifest.json=build/images/x.json)")
    return name, Path(path)


def label_type(text: str) -> str:
    from fabench.results.archive_store import label_problem

    problem = label_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem.removeprefix("label "))
    return text


def say(prog: str):
    """One line on stderr per thing the user should know (waiting, recovered staging)."""
    return lambda line: print(f"{prog}: {line}", file=sys.stderr, flush=True)


def build_parser() -> Parser:
    parser = Parser(prog="fabench", description=__doc__.split("\n")[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 2)[2])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    archive = commands.add_parser("archive", help="store, list and verify archived runs")
    actions = archive.add_subparsers(dest="action", required=True, parser_class=Parser)
    store = actions.add_parser("store", help="archive a finished run as a new entry")
    store.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="results/<run>/")
    store.add_argument("--label", type=label_type, help="entry label (default: the platform version, e.g. rocm-7.0.51831)")
    store.add_argument("--extra", action="append", type=extra_type, default=[], metavar="NAME=PATH",
                       help="another file to keep with the run (repeatable)")
    store.add_argument("--schema", type=Path, help="result schema (default: the checkout's or the package's)")
    listing = actions.add_parser("list", help="every entry: label, run id, date, device, ok or broken; "
                                                      "removes what an interrupted store left")
    verify = actions.add_parser("verify", help="check an entry's files against its SHA256SUMS and its record")
    verify.add_argument("entry", metavar="ENTRY")
    for sub in (store, listing, verify):
        sub.add_argument("--root", type=Path, default=Path("archive"), help="the archive folder (default: archive)")

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
    compare.add_argument("--fail-on", choices=["regression"], help="exit with status 3 when any cell regressed "
                         "(for CI)")
    compare.add_argument("--min-answered", type=share_type, metavar="SHARE",
                         help="exit with status 4 when fewer than this share of the ok cells compared with the previous "
                         f"entry got an answer (same or changed) (default: {MIN_ANSWERED} with --fail-on, else "
                         "never; 0: never)")
    check = commands.add_parser("detector-check", help="the change detector's false alarms, answers, calibration "
                                "and sensitivity on archived runs (a known change injected)")
    check.add_argument("entries", nargs="*", metavar="ENTRY", help="entries to use (default: all in --root)")
    check.add_argument("--root", type=Path, action="append", help="an archive folder (repeatable: the runs of "
                       "several archives together; default: archive)")
    check.add_argument("--out-md", type=output_or_discard, help="write the Markdown here (default: standard output; "
                       f"{os.devnull}: nowhere)")
    check.add_argument("--out-json", type=output_or_discard, help="write the check as JSON here")
    check.add_argument("--trade-off", action="store_true", help="also judge the same pairs by other designs of the "
                       "rule (margins, with and without the between-run and between-card noise): the table in "
                       "docs/archive.md")
    for sub in (compare, check):
        sub.add_argument("--configfile", type=Path, metavar="FILE", help="a workflow config (YAML): its "
                         "`comparison` key sets the policy, as in `snakemake compare` (default: the policy's defaults)")
        sub.add_argument("--margin", type=margin_type, help="the smallest change called a regression or an "
                         "improvement, as a fraction or percent (default: the config's, else the calibration's of "
                         "the hardware judged: src/fabench/analysis/calibrations.yaml)")
    return parser


# ---------------------------------------------------------------- commands

def cmd_store(args) -> int:
    from fabench.results.archive_layout import ArchiveError
    from fabench.results.archive_read import load_entry
    from fabench.results.archive_store import AlreadyArchived, StoreInterrupted, archive_run
    from fabench.results.collect import result_schema

    prog = "fabench archive store"
    if not args.run_dir.is_dir():
        return fail(prog, f"error: {args.run_dir}: no such run directory", USAGE)
    names = [name for name, _ in args.extra]
    if len(set(names)) != len(names):
        return fail(prog, "error: --extra names a file twice", USAGE)
    try:
        schema = result_schema(args.schema) if args.schema else None
    except (OSError, ValueError) as err:
        return fail(prog, f"error: --schema {args.schema}: {err}", USAGE)
    try:
        entry = archive_run(args.run_dir, args.root, args.label, dict(args.extra), schema=schema, notify=say(prog))
    except AlreadyArchived as err:
        if not load_entry(err.entry).ok:  # the entry holding them is damaged: an integrity problem
            return fail(prog, f"refused: {err}; that entry fails its check (fabench archive verify)", INTEGRITY)
        print(err.entry)
        return fail(prog, f"nothing stored: {err}", ALREADY_ARCHIVED)
    except ArchiveError as err:
        return fail(prog, f"refused: {err}", INTEGRITY)
    except StoreInterrupted as err:
        return fail(prog, str(err), INTERRUPTED)
    print(entry)
    return 0


def cmd_list(args) -> int:
    from fabench.results.archive_lock import recover
    from fabench.results.archive_read import list_entries

    if not args.root.is_dir():
        return fail("fabench archive list", f"error: {args.root}: no such archive folder", USAGE)
    for line in recover(args.root):
        say("fabench archive list")(line)
    entries = list_entries(args.root)
    if not entries:
        print(f"no entries under {args.root}")
        return 0
    rows = [("LABEL", "RUN-ID", "DATE", "DEVICE", "RUN", "STATUS")]
    for e in entries:
        date = (e.get("finished") or e.get("archived_at") or "")[:16].replace("T", " ")
        device = e.get("device")
        device = " / ".join(device) if isinstance(device, list) else device
        status = "ok" if e.ok else f"broken: {'; '.join(e.problems)}"
        rows.append((e.label, e.run_id, date or "?", device or "?", e.get("run") or "?", status))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[5])
    return INTEGRITY if any(not e.ok for e in entries) else 0


def resolve(spec: str, root: Path) -> Path:
    from fabench.results.archive_layout import ArchiveError
    from fabench.results.archive_read import resolve_entry

    try:
        return resolve_entry(spec, root)
    except ArchiveError as err:
        raise UsageError(str(err)) from None


def cmd_verify(args) -> int:
    from fabench.results.archive_read import load_entry

    try:
        entry = load_entry(resolve(args.entry, args.root))
    except UsageError as err:
        return fail("fabench archive verify", f"error: {err}", USAGE)
    if entry.ok:
        files = len((entry.record or {}).get("files", {})) + 1
        print(f"{entry.id}: ok ({files} files match SHA256SUMS and record.json; identity {entry.identity[:16]})")
        return 0
    for problem in entry.problems:
        print(f"{entry.id}: {problem}")
    return INTEGRITY


def cmd_compare(args) -> int:
    from fabench.results.archive_read import load_entry
    from fabench.results.compare import CompareError, NothingToCompare, compare_entries
    from fabench.analysis.policy import RuleError
    from fabench.results.gates import no_evidence, rule_beyond_bounds
    from fabench.report.compare_outputs import ComparisonOutputs, result_line, write_comparison

    prog = "fabench compare"
    try:
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
    except UsageError as err:
        return fail(prog, f"error: {err}", USAGE)
    try:
        comparison = compare_entries(entries, rule, baseline, published)
    except CompareError as err:
        return fail(prog, f"error: {err}", INTEGRITY if isinstance(err, NothingToCompare) else USAGE)
    except RuleError as err:  # the archive's own noise estimate beyond the policy's bound
        return fail(prog, f"error: {rule_beyond_bounds(err)}", USAGE)
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
    if flags and args.fail_on == "regression":
        print(f"{prog}: failing on {len(flags)} regression flag(s) (--fail-on regression)", file=sys.stderr)
        return REGRESSION
    if reason := no_evidence(comparison, args.fail_on, args.min_answered):  # no evidence is no pass
        return fail(prog, reason, TOO_FEW_ANSWERED)
    answers = comparison["answers"]
    least = args.min_answered if args.min_answered is not None else MIN_ANSWERED if args.fail_on else 0.0
    if answers["judged"] and answers["share"] < least:
        print(f"{prog}: {answers['answered']} of {answers['judged']} ok cells compared got an answer "
              f"({answers['share']:.0%}), fewer than --min-answered {least:.0%}", file=sys.stderr)
        return TOO_FEW_ANSWERED
    return 0


def write_outputs(args, markdown: str, data: dict) -> None:
    """The Markdown to --out-md (else standard output), the data to --out-json when asked."""
    if args.out_md:
        if written(args.out_md):
            write_atomic(args.out_md, markdown)
    else:
        sys.stdout.write(markdown)
    if written(args.out_json):
        write_json(args.out_json, data)


def entries_from(args) -> list:
    """The entries named on the command line, or every entry under --root (UsageError if none)."""
    from fabench.results.archive_read import list_entries, load_entry

    if args.entries:
        paths = [resolve(spec, args.root) for spec in args.entries]
        return list({p.resolve(): load_entry(p) for p in paths}.values())
    entries = list_entries(args.root)
    if not entries:
        raise UsageError(f"no entries under {args.root}")
    return entries


def cmd_detector_check(args) -> int:
    from fabench.analysis.detector import detector_check
    from fabench.results.compare import usable_results
    from fabench.results.detector_markdown import render

    prog = "fabench detector-check"
    roots = args.root or [Path("archive")]
    try:
        rule = comparison_rule(args)
        if args.entries and len(roots) > 1:
            raise UsageError("name entries with one --root only (several roots: every entry of each)")
        entries = [e for root in roots for e in entries_from(argparse.Namespace(entries=args.entries, root=root))]
        twice = sorted({e.id for e in entries if [x.id for x in entries].count(e.id) > 1})
        if twice:
            raise UsageError(f"entry {twice[0]} is in more than one --root: give each run once")
    except UsageError as err:
        return fail(prog, f"error: {err}", USAGE)
    runs = []
    for entry in sorted(entries, key=lambda e: e.sort_key):
        results, problems = usable_results(entry)
        if results is None:
            print(f"{prog}: left out {entry.id}: {'; '.join(problems)}", file=sys.stderr)
        else:
            runs.append((entry.id, results))
    if len(runs) < 2:
        return fail(prog, f"error: {len(runs)} usable entr{'y' if len(runs) == 1 else 'ies'}: the check needs "
                          f"two runs of one experiment on the same GPU model", USAGE)
    check = detector_check(runs, rule, trade_off=args.trade_off)
    write_outputs(args, render(check), check)
    return INTEGRITY if len(runs) < len(entries) else 0


COMMANDS = {("archive", "store"): cmd_store, ("archive", "list"): cmd_list, ("archive", "verify"): cmd_verify,
            ("compare", None): cmd_compare, ("detector-check", None): cmd_detector_check}


def terminate_as_interrupt(signum, frame):
    """SIGTERM ends a command as SIGINT does: through its clean-up (a store's staging removed)."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if threading.current_thread() is threading.main_thread():  # main() may be called from a thread
        signal.signal(signal.SIGTERM, terminate_as_interrupt)
    prog = " ".join(filter(None, ("fabench", args.command, getattr(args, "action", None))))
    try:
        return COMMANDS[(args.command, getattr(args, "action", None))](args)
    except OutputPathError as err:  # checked at parsing; again at writing, should the path change meanwhile
        return fail(prog, f"error: {err}", USAGE)
    except CalibrationError as err:  # the installed calibrations.yaml, checked where first read
        return fail(prog, f"error: {err}", USAGE)
    except BrokenPipeError:  # fabench compare | head
        return 0
    except KeyboardInterrupt:
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
