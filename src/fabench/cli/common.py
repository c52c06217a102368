"""What the subcommands of `fabench` share: the exit codes, the parser that errs in one line, the
argument types, the comparison rule from --configfile and --margin, and the entries named on the command
line (fabench.cli documents the exit codes)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fabench.files import output_file_arg, write_atomic, write_json

USAGE, INTEGRITY, REGRESSION, TOO_FEW_ANSWERED, ALREADY_ARCHIVED, INTERRUPTED = 2, 1, 3, 4, 5, 130


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


def add_rule_options(sub) -> None:
    """--configfile and --margin, of the commands that judge by the comparison policy."""
    sub.add_argument("--configfile", type=Path, metavar="FILE", help="a workflow config (YAML): its "
                     "`comparison` key sets the policy, as in `snakemake compare` (default: the policy's defaults)")
    sub.add_argument("--margin", type=margin_type, help="the smallest change called a regression or an "
                     "improvement, as a fraction or percent (default: the config's, else the calibration's of "
                     "the hardware judged: src/fabench/analysis/calibrations.yaml)")


def resolve(spec: str, root: Path) -> Path:
    from fabench.results.archive_layout import ArchiveError
    from fabench.results.archive_read import resolve_entry

    try:
        return resolve_entry(spec, root)
    except ArchiveError as err:
        raise UsageError(str(err)) from None


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
