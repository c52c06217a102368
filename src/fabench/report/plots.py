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
import sys
from pathlib import Path
from typing import Sequence

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
    """latency.png, speedup.png and roofline.png of a run in out_dir; the speedup's marks follow `rule`."""
    out_dir = output_folder(out_dir)
    paths = [out_dir / "latency.png", out_dir / "speedup.png"]
    collected = shown(collected)  # backends measured once per shape, in every variant's lines
    write_atomic(paths[0], latency_png(collected))
    write_atomic(paths[1], speedup_png(collected, rule))
    paths.append(out_dir / "roofline.png")
    write_atomic(paths[2], roofline_png(collected))
    return paths


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
