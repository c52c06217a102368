"""Re-render every committed example's report with the current code: examples/<name>/report.md.

    python tools/render_examples.py [--examples examples] [NAME ...]

Each example's report is its NEWEST run (the highest archive entry; an example holds a series of
runs of one experiment, and its newest is the one its README's figures come from), analysed
again from the raw trials it archived (fabench.analysis.analyse_run, as compare reads an entry)
and rendered by fabench.report.render, the code path of the workflow's write_report rule, with
its figures drawn again by fabench.report.plots into examples/<name>/plots/. Archived entries are
only read: an archive tarball (examples/h100/archive-*.tar.gz, archive.tgz or archive.tar.xz) is unpacked into a temporary
folder. An example without an archive but with a run's results.json (examples/h200-sweep) is
rendered from those, with the config files its README names.

The published numbers a stored config names are read from the project's report/published/ only
(fabench.results.published.stored_published). A missing folder, an unreadable tarball or entry is
one line naming it, exit status 1.

Deterministic and idempotent: the output depends on the archived data, the config files and the
code only (no clock: an archived run has no Snakemake start to time from), and a file whose
bytes would not change is not rewritten.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tarfile
import tempfile
import zlib
from contextlib import ExitStack
from pathlib import Path

import yaml

from fabench.analysis import analyse_run
from fabench.analysis.policy import Rule
from fabench.config_layers import replace_whole_values
from fabench.files import DataPathError, confined_path, read_json, write_atomic
from fabench.report.plots import run_figures, write_run_plots
from fabench.report.render import render
from fabench.results.archive_layout import ArchiveError
from fabench.results.archive_read import list_entries
from fabench.results.published import PublishedError, stored_published

ROOT = Path(__file__).resolve().parent.parent
# Figures of a report, each drawn from the results and the config's comparison rule (the
# workflow's rule write_report).
# An example that is one run's results rather than an archive: the config files it was run with,
# in the order of its README's command (--configfile ...), over config.yaml.
RUN_CONFIGS = {"h200-sweep": ("examples/h200/h200.yaml", "examples/h200-sweep/sweep-bench.yaml",
                              "examples/h200-sweep/tune/variants.yaml")}


class ExampleError(ValueError):
    """An example that cannot be rendered: the message names it and what is missing."""


def merged_config(files: list[str]) -> dict:
    """config.yaml with the files over it, as Snakemake merges --configfile layers (key by key,
    the whole-value keys taken whole: fabench.config_layers)."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    layers = [yaml.safe_load((ROOT / name).read_text()) or {} for name in files]
    for layer in layers:
        deep_update(config, layer)
    replace_whole_values(config, layers)
    return config


def deep_update(base: dict, layer: dict) -> None:
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            deep_update(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


def newest_entry(archive_root: Path):
    entries = [e for e in list_entries(archive_root) if e.ok]
    if not entries:
        raise ExampleError(f"{archive_root}: no intact archive entry")
    return entries[-1]


def archive_of(example: Path, stack: ExitStack) -> Path | None:
    """The example's archive folder: examples/<name>/archive, else its newest tarball unpacked
    into a temporary folder (removed when `stack` closes), else None."""
    if inside(example, "archive").is_dir():
        return example / "archive"
    # archive-<n>.tar.gz, or one archive.tgz or archive.tar.xz (the lease examples)
    tarballs = sorted([*example.glob("archive-*.tar.gz"), *example.glob("archive.tgz"), *example.glob("archive.tar.xz")])
    if not tarballs:
        return None
    where = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fabench-example-")))
    try:
        # filter="data": no member is written outside the folder, none is a link out of it
        with tarfile.open(tarballs[-1]) as tar:
            tar.extractall(where, filter="data")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as err:
        why = str(err).splitlines()[0].rstrip(":") if str(err) else type(err).__name__
        raise ExampleError(f"{tarballs[-1]}: not a readable archive tarball ({why})") from None
    if not (where / "archive").is_dir():
        raise ExampleError(f"{tarballs[-1]}: holds no archive/ folder")
    return where / "archive"


def run_of(example: Path, stack: ExitStack) -> tuple[dict, dict, dict | None, str]:
    """(collected results, config, sweep record or None, where they came from) of an example."""
    archive = archive_of(example, stack)
    if archive is not None:
        entry = newest_entry(archive)
        try:
            return entry.results(), read_json(entry.path / "config.json"), None, entry.id
        except (OSError, ValueError, ArchiveError) as err:  # not JSON; changed since it was verified
            raise ExampleError(f"{example}: {entry.id}: {err}") from None
    results = inside(example, "results.json")
    if example.name in RUN_CONFIGS and results.is_file():
        sweep = inside(example, "tune/sweep.json")
        try:
            return (read_json(results), merged_config(list(RUN_CONFIGS[example.name])),
                    read_json(sweep) if sweep.is_file() else None, "results.json")
        except (OSError, ValueError) as err:  # not JSON, a NaN: one line naming the file
            raise ExampleError(f"{example}: {err}") from None
    raise ExampleError(f"{example}: no archive, archive tarball or known run results to render")


def inside(example: Path, name: str) -> Path:
    """example/name, never through a symbolic link (an example folder is data: one planted there
    would have this tool read or write elsewhere); ExampleError when it would be."""
    try:
        return confined_path(example, name, f"{example.name}'s {name}")
    except DataPathError as err:
        raise ExampleError(str(err)) from None


def write_if_changed(example: Path, name: str, data: bytes | str) -> bool:
    """example/name written (atomically, never through a link) when its bytes would change."""
    path = inside(example, name)
    data = data.encode() if isinstance(data, str) else data
    if path.is_file() and path.read_bytes() == data:
        return False
    write_atomic(path, data)
    return True


def render_example(example: Path) -> list[Path]:
    """Render one example's report and figures; the files that changed."""
    with ExitStack() as stack:
        collected, config, sweep, source = run_of(example, stack)
    analysed = analyse_run(collected)
    try:
        published = stored_published(config, ROOT, f"{example.name} {source} config.json")
    except PublishedError as err:
        raise ExampleError(str(err)) from None
    figures = run_figures(analysed)
    with tempfile.TemporaryDirectory(prefix="fabench-example-plots-") as drawn:
        # The workflow's own drawing (fabench.report.plots), so an example's figures are a run's
        write_run_plots(analysed, Path(drawn), Rule.of(config))
        changed = [example / path for _, path in figures
                   if write_if_changed(example, path, (Path(drawn) / Path(path).name).read_bytes())]
    markdown = render(analysed, config, published, figures=figures, sweep=sweep)
    if write_if_changed(example, "report.md", markdown):
        changed.append(example / "report.md")
    print(f"{example.name}: rendered from {source}", file=sys.stderr)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=Path, default=ROOT / "examples", help="the examples folder")
    parser.add_argument("names", nargs="*", help="examples to render (default: every one)")
    args = parser.parse_args(argv)
    if not args.examples.is_dir():
        print(f"render_examples: {args.examples}: no such folder of examples", file=sys.stderr)
        return 1
    names = args.names or sorted(p.name for p in args.examples.iterdir() if p.is_dir() and not p.is_symlink())
    try:
        for name in names:
            example = inside(args.examples, name)
            if not example.is_dir():
                raise ExampleError(f"{example}: no such example")
            for path in render_example(example):
                print(path)
    except ExampleError as err:
        print(f"render_examples: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
