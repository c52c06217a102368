"""fabench: the archive of finished runs and their comparison, without running anything.

    fabench archive store RUN_DIR [--root archive] [--label L] [--extra NAME=PATH ...]
    fabench archive list [--root archive]
    fabench archive verify ENTRY [--root archive]
    fabench compare [ENTRY ...] [--root archive] [--configfile FILE] [--margin M] [--baseline ENTRY]
                    [--published FILE] [--out-md FILE] [--out-json FILE] [--out-csv FILE]
                    [--out-html FILE] [--plots DIR] [--fail-on regression] [--min-answered SHARE]
    fabench detector-check [ENTRY ...] [--root archive ...] [--configfile FILE] [--margin M]
                    [--out-md FILE] [--out-json FILE] [--trade-off] [--fail-on acceptance]

Both judge by the comparison policy (fabench.analysis.policy) that `snakemake compare` applies:
its defaults, or the `comparison` key of --configfile (a workflow config), --margin over it.

An ENTRY is an entry's directory, or <label>/<run-id> (also <label>/<number>, or a bare <label>
for its newest intact entry) under --root. `compare` judges the entries named in the order named
(the first the baseline, each against the one before); without entries, every entry in --root in
version order.

Exit status: 0 done; 1 an integrity problem (a changed or missing archived file, an entry left
out of a comparison, a run refused as incomplete) or an entry that could not be written (a full
disk: nothing is left of it); 2 a usage error (bad option or --label, no such entry); 3 a
regression that holds for the comparison as a whole (its p within alpha over the cells judged:
fabench.results.gates.gate), with `compare --fail-on regression`, or an acceptance row that
fails, with `detector-check --fail-on acceptance`; 4 too few cells judged: the share of ok cells
compared with the previous entry that got same or changed is below `compare --min-answered`
(with `--fail-on regression` its default is what the cells' noise lets unchanged software reach,
between 50% and 90%; else it is asked for alone), so a CI gate fails where it has no evidence (a
regression, 3, is reported first); 5 `archive store` of a run whose
measurements are already an intact entry (nothing stored; the entry is printed: a "store every
run" step may accept 0 and 5); 130 interrupted (SIGINT or SIGTERM: an entry is stored whole or
not at all).
"""

from __future__ import annotations

# One module per command, as asv's asv/commands/: archive (store, list, verify), compare and
# detector_check; common holds what they share (the parser, the argument types, the exit codes).
# This docstring is the command's --help.

import argparse
import signal
import threading
from typing import Sequence

from fabench.analysis.calibration import CalibrationError
from fabench.cli import archive, compare, detector_check
from fabench.cli.common import INTERRUPTED, USAGE, Parser, fail
from fabench.files import OutputPathError


def build_parser() -> Parser:
    parser = Parser(prog="fabench", description=__doc__.split("\n")[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 2)[2])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    archive.add_parser(commands)
    compare.add_parser(commands)
    detector_check.add_parser(commands)
    return parser


COMMANDS = {("archive", "store"): archive.cmd_store, ("archive", "list"): archive.cmd_list,
            ("archive", "verify"): archive.cmd_verify, ("compare", None): compare.cmd_compare,
            ("detector-check", None): detector_check.cmd_detector_check}


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

