"""Pictures of a run and of the archive, as PNG files (matplotlib, Agg: no display needed).

    latency.png                 latency vs sequence length (fabench.report.latency_plot)
    roofline.png                each backend's cells against the GPU's limits (roofline_plot; a run
                                without them, a CPU run, gets a figure saying why)
    speedup.png                 speedup over the baseline backend, every variant, marked by the
                                comparison policy's claims under the run's rule (speedup_plot)
    versions-<variant>.png      each backend across archived versions (versions_plot)

Each reads the recorded statistics (stats.device_ms, else stats.wall_mean_ms; a v1 result's
device_ms.median or wall_mean_ms without error bars) and computes none of its own. Every shape,
variant and backend that ran is drawn; a legend names only what was drawn; the layout is
matplotlib's constrained layout, so that no two labels overlap. An unstable cell is drawn without
its interval and marked (fabench.report.plot_common).

    python -m fabench.report.plots --results results/<run>/results.json --out-dir results/<run>/plots \\
        [--configfile config.yaml]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
from pathlib import Path
from typing import Callable, Sequence

from fabench.analysis.policy import Rule, RuleError
from fabench.config import ConfigError, read_config_file
from fabench.files import (DataPathError, JsonReadError, OutputPathError, confined_path, output_folder,
                           output_folder_arg, read_json, write_atomic)
from fabench.results.shared import shown
from fabench.report.latency_plot import latency_png
from fabench.report.roofline_plot import has_roofline, roofline_png
from fabench.report.speedup_plot import speedup_png
from fabench.report.versions_plot import versions_png


def write_run_plots(collected: dict, out_dir: Path, rule: Rule) -> list[Path]:
    """latency.png, speedup.png and roofline.png of a run in out_dir; the speedup's marks follow `rule`.
    Drawn side by side where the host has a core for each (drawn_apart): one after another they
    were 3.5 s of rule write_report's 7 s on an H200 run's results (the 2-core CPU host), the time
    from a run's last measuring process to its report."""
    out_dir = output_folder(out_dir)
    collected = shown(collected)  # backends measured once per shape, in every variant's lines
    draws = {"latency.png": lambda: latency_png(collected), "speedup.png": lambda: speedup_png(collected, rule),
             "roofline.png": lambda: roofline_png(collected)}
    for name, png in drawn_apart(draws).items():
        write_atomic(out_dir / name, png)
    return [out_dir / name for name in draws]


def drawn_apart(draws: dict[str, Callable[[], bytes]]) -> dict[str, bytes]:
    """Each figure's PNG by name, each drawn in a process forked for it, all at once (matplotlib's
    layout and rendering are Python: one core a figure), where the host has more cores than
    figures and can fork; else one after another here (on the 2-core CPU host, shared, side by side
    was the slower). A figure whose process sent none (its drawing raised, it was killed) is drawn
    here, so that its error is raised as without the processes."""
    if len(os.sched_getaffinity(0)) <= len(draws) or "fork" not in multiprocessing.get_all_start_methods():
        return {name: draw() for name, draw in draws.items()}
    context = multiprocessing.get_context("fork")
    running = {}
    for name, draw in draws.items():
        receive, send = context.Pipe(duplex=False)
        process = context.Process(target=_send_drawn, args=(draw, send), daemon=True)
        process.start()
        send.close()
        running[name] = (process, receive)
    drawn = {}
    for name, (process, receive) in running.items():
        with receive:
            try:
                drawn[name] = receive.recv_bytes()
            except EOFError:
                drawn[name] = None
        process.join()
    return {name: drawn[name] if drawn[name] is not None else draws[name]() for name in draws}


def _send_drawn(draw: Callable[[], bytes], send) -> None:
    """A drawing process: its figure's PNG into the pipe, then its end (os._exit: nothing of the
    parent's exit is run again here); a drawing that raises ends it without sending."""
    try:
        send.send_bytes(draw())
        send.close()
    finally:
        os._exit(0)


def run_figures(collected: dict) -> list[tuple[str, str]]:
    """(title, path under the run's folder) of each figure of write_run_plots that the report shows:
    the roofline only where the GPU's limits are known (a CPU run shows none)."""
    figures = [("Latency against sequence length", "plots/latency.png"), ("Speedup over native", "plots/speedup.png")]
    if has_roofline(collected):
        figures.append(("Roofline: each cell against the GPU's limits", "plots/roofline.png"))
    return figures


def version_plot_name(variant: str) -> str:
    return f"versions-{variant}.png"


def version_plot_path(out_dir: Path, variant: str) -> Path:
    """out_dir/versions-<variant>.png: a variant's name comes from data (an archived run's
    results), so the file is one name in out_dir, never through a link (OutputPathError, one line:
    the caller writes nothing there)."""
    name = version_plot_name(variant)
    if "/" in name or "\0" in name or name != Path(name).name:
        raise OutputPathError(f"variant {str(variant)[:80]!r}: not a name a file in {out_dir} can take")
    try:
        return confined_path(out_dir, name, f"the figure of variant {variant}")
    except DataPathError as err:
        raise OutputPathError(str(err)) from None


def compared_variants(comparison: dict) -> list[str]:
    """The variants a comparison holds, in its order: one versions figure each."""
    return list(dict.fromkeys(r["variant"] for r in comparison["rows"]))


def write_version_plots(comparison: dict, out_dir: Path, variants: Sequence[str] | None = None) -> list[Path]:
    """versions-<variant>.png in out_dir for each variant (default: every variant of the comparison)."""
    out_dir = output_folder(out_dir)
    variants = list(variants or compared_variants(comparison))
    paths = [version_plot_path(out_dir, variant) for variant in variants]  # all checked before any is written
    for variant, path in zip(variants, paths):
        write_atomic(path, versions_png(comparison, variant))
    return paths


def rule_of_file(path: Path | None) -> Rule:
    """The comparison rule of a workflow config file (YAML), the policy's defaults without one."""
    if path is None:
        return Rule.of({})
    try:
        config = read_config_file(path)
    except ConfigError as err:
        raise RuleError(str(err).removeprefix(f"{path}: ")) from None
    return Rule.of(config)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fabench.report.plots", description=__doc__.split("\n")[0])
    parser.add_argument("--results", required=True, type=Path, help="results/<run>/results.json")
    parser.add_argument("--out-dir", required=True, type=output_folder_arg, help="folder for latency.png, speedup.png and roofline.png")
    parser.add_argument("--configfile", type=Path, metavar="FILE", help="the run's workflow config (YAML): its "
                        "`comparison` key sets the speedup's marks (default: the policy's defaults)")
    args = parser.parse_args(argv)
    try:
        paths = write_run_plots(read_json(args.results), args.out_dir, rule_of_file(args.configfile))
    except (OutputPathError, JsonReadError) as err:  # one line naming the path
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    except RuleError as err:
        parser.exit(2, f"{parser.prog}: error: --configfile {args.configfile}: {err}\n")
    except OSError as err:
        parser.exit(2, f"{parser.prog}: error: {err.filename}: {err.strerror}\n")
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
