"""fabench archive store|list|verify: a finished run kept as an archive entry, the entries listed, one
entry checked against its SHA256SUMS and its record."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fabench.cli.common import (ALREADY_ARCHIVED, INTEGRITY, INTERRUPTED, USAGE, Parser, UsageError,
                                     fail, resolve)


def add_parser(commands) -> None:
    """`archive` and its actions, on the subparsers of the fabench command."""
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
