"""Check two runs of the same experiment against issue 8's acceptance, cell by cell.

    python tools/h200_check.py results/run-a [results/run-b] [--tolerance 0.03] [--max-spread 0.01]

A run is a results directory (per-job JSON files, searched recursively) or a collected
results.json. A cell is one (variant, shape, backend) that is ok with a device figure.

  1. In every job, the cell's device median is within --tolerance (3%) of triton's do_bench
     median measured in the same job, except where do_bench itself was unstable across the job's
     processes, or the two differ while the GPU was power-capped with its clock moving more than
     the tolerance between the device loops and the do_bench calls (the result's cross_check says
     so either way).
  2. With two runs: the median over cells of the run-to-run spread (max/min - 1) of the device
     medians is at most --max-spread (1%).
  3. With two runs: each second-run median lies inside the first run's 95% prediction interval
     (where another run of the same experiment on the same hardware should read), or the cell is
     flagged unstable in either run. The comparison policy's verdict on each cell (the rule
     `fabench compare` applies, fabench.analysis.policy) is shown beside it.

The intervals are derived here from the run's pooled noise (fabench.analysis.noise), as the
collector derives them: a job's own file holds none.

Prints a table and the verdicts; exits 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from fabench.analysis import policy
from fabench.analysis.noise import add_run_intervals


def load_run(path: Path) -> dict[tuple[str, str, str], dict]:
    """(variant, shape_id, backend) -> backend entry (with the job's result under '_result')."""
    if path.is_file():
        results = json.loads(path.read_text())["results"]
    else:
        results = []
        # A job's process files (<shape>/process-N.json) are what its result was merged from.
        for file in sorted(f for f in path.rglob("*.json") if not f.name.startswith("process-")):
            data = json.loads(file.read_text())
            if isinstance(data, dict) and "backends" in data and "schema_version" in data:
                results.append(data)
    add_run_intervals(results)  # the run's noise pooled over its cells, as results.json holds it
    cells = {}
    for result in results:
        for name, entry in result["backends"].items():
            if entry["status"] == "ok" and entry.get("stats") and entry["stats"].get("device_ms"):
                cells[(result["variant"], result["shape_id"], name)] = dict(entry, _result=result)
    return cells


def do_bench_check(entry: dict, tolerance: float) -> tuple[str, bool | None]:
    """(text, passed): passed None when do_bench is missing or itself unstable (excused)."""
    check = entry.get("cross_check") or {}
    bench = check.get("do_bench_ms")
    if bench is None:
        return f"no do_bench ({check.get('reason')})", None
    if check.get("agrees") is None and "unstable" in (check.get("reason") or ""):
        return f"do_bench unstable ({bench:.4f})", None
    off = abs(entry["stats"]["device_ms"]["median"] - bench) / bench
    if off > tolerance and check.get("agrees") is None and "power-capped" in (check.get("reason") or ""):
        # The power cap's clock moved more than the tolerance between the device loops and the
        # do_bench calls: each method's figure is the kernel's at its own clock (results before
        # this rule was judged first also excused cells that agree; those are judged here).
        return f"do_bench at another clock, power cap ({bench:.4f}, {off:+.1%})", None
    return f"{bench:.4f} ({off:+.1%})", off <= tolerance


def spread(a: float, b: float) -> float:
    return max(a, b) / min(a, b) - 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="one or two runs")
    parser.add_argument("--tolerance", type=float, default=0.03)
    parser.add_argument("--max-spread", type=float, default=0.01)
    args = parser.parse_args(argv)
    runs = [load_run(path) for path in args.runs[:2]]
    first = runs[0]
    second = runs[1] if len(runs) > 1 else {}
    failures, spreads, excused = [], [], 0
    print("| variant | shape | backend | A device ms [95% PI] | A do_bench | B device ms | A-B spread | B in A's PI | "
          "Verdict (policy) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key in sorted(first):
        a = first[key]
        sa = a["stats"]["device_ms"]
        text_a, ok_a = do_bench_check(a, args.tolerance)
        excused += ok_a is None
        if ok_a is False:
            failures.append(f"{'/'.join(key)}: run A device median {sa['median']:.4f} vs do_bench {text_a}")
        pi = sa.get("pi95")
        cells = [key[0], key[1], key[2], f"{sa['median']:.4f} " + (f"[{pi[0]:.4f}, {pi[1]:.4f}]" if pi else "(no PI)")
                 + ("" if a["stats"]["stable"] else " unstable"), text_a]
        b = second.get(key)
        if b is not None:
            sb = b["stats"]["device_ms"]
            text_b, ok_b = do_bench_check(b, args.tolerance)
            if ok_b is False:
                failures.append(f"{'/'.join(key)}: run B device median {sb['median']:.4f} vs do_bench {text_b}")
            s = spread(sa["median"], sb["median"])
            spreads.append(s)
            inside = bool(pi) and pi[0] <= sb["median"] <= pi[1]
            flagged = not (a["stats"]["stable"] and b["stats"]["stable"])
            if not inside and not flagged:
                where = f"[{pi[0]:.4f}, {pi[1]:.4f}]" if pi else "(none: too few repeats)"
                failures.append(f"{'/'.join(key)}: run B median {sb['median']:.4f} outside run A's prediction "
                                f"interval {where} and neither run flags it unstable")
            verdict = policy.judge(a, b, policy.Rule.of({}), names=("A", "B"))  # the policy's defaults, stated
            cells += [f"{sb['median']:.4f}" + ("" if b["stats"]["stable"] else " unstable"), f"{s:.2%}",
                      "yes" if inside else ("flagged" if flagged else "NO"), f"{verdict['verdict']} ({verdict['code']})"]
        else:
            cells += ["", "", "", ""]
        print("| " + " | ".join(cells) + " |")
    print()
    print(f"cells: {len(first)}; do_bench excused (missing or unstable): {excused}")
    if not first:
        failures.append(f"no ok cell with a device figure in {args.runs[0]}")
    if second:
        missing = sorted(set(first) ^ set(second))
        if missing:
            failures.append(f"cells in only one run: {missing}")
        median_spread = statistics.median(spreads) if spreads else float("nan")
        print(f"median run-to-run spread of device medians: {median_spread:.2%} over {len(spreads)} cells "
              f"(max {max(spreads):.2%})" if spreads else "no common cells")
        if not spreads or median_spread > args.max_spread:
            failures.append(f"median run-to-run spread {median_spread:.2%} exceeds {args.max_spread:.0%}")
    print("PASS" if not failures else "FAIL:\n  " + "\n  ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
