"""A finished run rebuilt from its archive entry, every timing scaled by a factor: what the
acceptance of the comparison policy stores with `fabench archive store` and compares, to count
how many cells an injected change is flagged in (issue 30: +2% and +5%).

    python tools/scale_run.py ENTRY_DIR OUT_DIR --factor 1.02 [--run NAME]

Every time figure of every trial (the samples, the event pairs, the periods, the wall-clock means,
do_bench, the graphs' per-call times) is multiplied by the factor (fabench.analysis.detector.injected,
the detector check's own injection), the run analysed again, its job files written per (variant,
shape) as the merge writes them (fabench.analysis.entry.analyse_result), its report rendered by the workflow's render path. The entry
itself is only read. With --factor 1 it is the run as archived, in a run folder's layout.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

from fabench.analysis import analyse_run
from fabench.analysis.detector import injected
from fabench.analysis.entry import analyse_result
from fabench.files import write_atomic, write_json
from fabench.report.render import render
from fabench.results.published import load_published

ROOT = Path(__file__).resolve().parent.parent


def scaled_run(entry: Path, out: Path, factor: float, run: str | None) -> None:
    collected = json.loads((entry / "results.json").read_text())
    config = json.loads((entry / "config.json").read_text())
    results = injected(collected["results"], factor) if factor != 1 else collected["results"]
    run = run or collected["run"]
    config["run"] = run
    for result in results:
        result["run"] = run
        # A job's file as the merge writes it: each cell's own figures, no run-level interval.
        write_json(out / result["variant"] / f"{result['shape_id']}.json", analyse_result(copy.deepcopy(result)))
    analysed = analyse_run({"run": run, "results": results})
    write_json(out / "results.json", analysed)
    write_json(out / "config.json", config)
    published = load_published(ROOT / config["published"]) if config.get("published") else None
    write_atomic(out / "report.md", render(analysed, config, published))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("entry", type=Path, help="an archive entry (archive/<label>/<run-id>/)")
    parser.add_argument("out", type=Path, help="the run folder to write (results/<run>/ layout)")
    parser.add_argument("--factor", type=float, required=True, help="every timing multiplied by this")
    parser.add_argument("--run", help="the run's name (default: the entry's)")
    args = parser.parse_args(argv)
    scaled_run(args.entry, args.out, args.factor, args.run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
