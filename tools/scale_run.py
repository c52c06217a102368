"""A finished run rebuilt from its archive entry, every timing scaled by a factor: what the
acceptance of the comparison policy stores with `fabench archive store` and compares, to count
how many cells an injected change is flagged in (issue 30: +2% and +5%).

    python tools/scale_run.py ENTRY_DIR OUT_DIR --factor 1.02 [--run NAME]

Every time figure of every trial (the samples, the event pairs, the periods, the wall-clock means,
do_bench, the graphs' per-call times) is multiplied by the factor (fabench.analysis.detector.injected,
the detector check's own injection), the run analysed again, its job files written per (variant,
shape) as the merge writes them (fabench.analysis.entry.analyse_result), its report rendered by the
workflow's render path. With --factor 1 it is the run as archived, in a run folder's layout.

The entry is only read, and only when intact (its SHA256SUMS), its results and config checked as
the store checks them; a name in them never leads outside OUT_DIR (fabench.files.confined_path).
OUT_DIR is a new or empty folder outside any archive: an archived entry is never written here.
Anything refused is one line, exit status 2.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
from pathlib import Path

import yaml

from fabench.analysis import analyse_run
from fabench.analysis.detector import injected
from fabench.analysis.entry import analyse_result
from fabench.cli.common import USAGE, Parser
from fabench.config import ConfigError, schema_error
from fabench.files import DataPathError, archive_entry_of, confined_path, read_json, write_atomic, write_json
from fabench.report.render import render
from fabench.resources import SCHEMA_DIR
from fabench.results.archive_layout import ArchiveError
from fabench.results.archive_read import load_entry
from fabench.results.archive_run_check import collected_problems, config_problem
from fabench.results.published import PublishedError, stored_published

ROOT = Path(__file__).resolve().parent.parent
# An injected change of at most half or twice every time: what a detector's acceptance injects
# (+2%, +5%), with room to spare, and far from a factor that makes no timing (0, negative, NaN).
FACTOR_RANGE = (0.5, 2.0)


class ScaleError(ValueError):
    """The run cannot be rebuilt: one line naming what is wrong."""


def factor_arg(text: str) -> float:
    """argparse type of --factor: a number within FACTOR_RANGE."""
    low, high = FACTOR_RANGE
    try:
        factor = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(factor) or not low <= factor <= high:
        raise argparse.ArgumentTypeError(f"{text!r} is outside {low:g}..{high:g} (a change injected into every "
                                         "timing: 1.02 is +2%)")
    return factor


def read_entry(entry_dir: Path) -> tuple[dict, dict]:
    """The entry's collected results and config, refused unless the entry is intact and both are
    what the store accepts (the result schema; the config schema, as the workflow checks a config)."""
    entry = load_entry(entry_dir)
    if not entry.ok:
        raise ScaleError(f"{entry_dir}: not an intact archive entry ({'; '.join(entry.problems)})")
    try:
        collected = entry.results()
        config = entry_config(entry_dir)
    except (ArchiveError, ValueError, OSError) as err:
        raise ScaleError(f"{entry_dir}: {err}") from None
    problems = collected_problems(collected)
    if problems:
        raise ScaleError(f"{entry_dir}: {problems[0]}")
    return collected, config


def entry_config(entry_dir: Path) -> dict:
    config = read_json(entry_dir / "config.json")
    problem = config_problem(config) if isinstance(config, dict) else "not a mapping of config keys"
    if problem:
        raise ConfigError(f"config.json: {problem}")
    return config


def output_folder(out: Path, entry_dir: Path) -> Path:
    """OUT_DIR, refused inside an archive (the entry's own, or any entry) or when it holds files."""
    archive_root = Path(entry_dir).resolve().parent.parent
    resolved = out.resolve()
    inside = archive_entry_of(out) or (archive_root if resolved == archive_root or archive_root in resolved.parents
                                       else None)
    if inside is not None:
        raise ScaleError(f"{out}: lies in the archive {inside}; write the run outside it (results/<run>/), "
                         "and store it with `fabench archive store`")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ScaleError(f"{out}: is not a folder; give a new folder for the run")
    if out.is_dir() and any(out.iterdir()):
        raise ScaleError(f"{out}: holds files already; give a new or empty folder, so that no run is mixed with another")
    return out


def scaled_run(entry: Path, out: Path, factor: float, run: str | None) -> None:
    rebuilt_run(entry, out, lambda results, config: injected(results, factor) if factor != 1 else results, run)


def rebuilt_run(entry: Path, out: Path, change, run: str | None) -> None:
    """The entry's run written to `out` in a run folder's layout, its results as `change(results,
    config)` returns them (tools/replay_batches.py cuts trials with it)."""
    collected, config = read_entry(entry)
    output_folder(out, entry)
    published = stored_published(config, ROOT, f"{entry}/config.json")
    results = change(collected["results"], config)
    run = run or collected["run"]
    config["run"] = run
    for index, result in enumerate(results):
        result["run"] = run
        # A job's file as the merge writes it: each cell's own figures, no run-level interval.
        path = confined_path(out, f"{result['variant']}/{result['shape_id']}.json",
                             f"results.json $.results[{index}]")
        write_json(path, analyse_result(copy.deepcopy(result)))
    analysed = analyse_run({"run": run, "results": results})
    write_json(out / "results.json", analysed)
    write_json(out / "config.json", config)
    write_atomic(out / "report.md", render(analysed, config, published))


def run_name_arg(text: str) -> str:
    """argparse type of --run: a run's name as the config schema allows it."""
    schema = yaml.safe_load((SCHEMA_DIR / "config.schema.yaml").read_text())
    problem = schema_error(text, schema["definitions"]["name"])
    if problem:
        raise argparse.ArgumentTypeError(problem.split(': ', 1)[-1])
    return text


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="tools/scale_run.py", description=__doc__.splitlines()[0])
    parser.add_argument("entry", type=Path, help="an archive entry (archive/<label>/<run-id>/)")
    parser.add_argument("out", type=Path, help="the run folder to write (results/<run>/ layout): new or empty")
    parser.add_argument("--factor", type=factor_arg, required=True,
                        help=f"every timing multiplied by this ({FACTOR_RANGE[0]:g} to {FACTOR_RANGE[1]:g})")
    parser.add_argument("--run", type=run_name_arg, help="the run's name (default: the entry's)")
    args = parser.parse_args(argv)
    try:
        scaled_run(args.entry, args.out, args.factor, args.run)
    except (ScaleError, ConfigError, PublishedError, DataPathError) as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return USAGE
    return 0


if __name__ == "__main__":
    sys.exit(main())
