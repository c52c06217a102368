"""One run's noise, pooled over cells of similar duration, and each cell's intervals from it.

Two processes cannot estimate one cell's noise (one degree of freedom: a Student-t interval
over them is 12.7 standard errors wide). But the cells of a run that take about as long share
their noise sources (timer resolution, launch jitter, clocks, the machine's state from minute
to minute), so the relative spread between a cell's processes is pooled over its POOL_CELLS
nearest stable cells in duration (itself included): about 16 degrees of freedom instead of 1.
An unstable cell's noise has a cause of its own and stays out of its neighbours' pool.

Model, in log space (relative noise): a process's median of a cell = the cell's true time + a
process effect of standard deviation sigma. A run's median over P processes then has standard
error sigma / sqrt(P), and another run of P' processes differs from this one by
sigma * sqrt(1/P + 1/P'). Hence, per cell and metric:
  ci95: this run's median +- t(df) * sigma / sqrt(P)              (where the true time lies)
  pi95: this run's median +- t(df) * sigma * sqrt(1/P + 1/P)      (where another run will read)
with sigma^2 = pooled variance + floor^2, the floor from the calibration of the run's hardware
(calibrations.yaml; fabench.analysis.calibration.fit_for). What a run cannot see by itself
(fabench.analysis.components) widens the pi95 by the noise the calibration gives two runs of one
card (of a capped cell: capped cells'), with its degrees of freedom: the pi95 says where another
run on the same card will read. On another card or host the comparison carries that pair type's
noise (fabench.analysis.policy); how often another run's medians land outside, per pair type and
both ways: `fabench detector-check` (docs/archive.md).

Pooling never makes a cell's interval narrower than its own replicates allow: its ci95 holds at
least the distribution-free interval of the median from its replicates' order statistics (all of
them up to 5 replicates: stats.order_interval), its sigma widened to that where needed, and its
own variance counts from 2 degrees of freedom (cell_sigma); the pi95 is wider than the ci95. A
cell's own noise between processes is what `repeats` estimate: it widens its intervals and
counts in the verdicts, it does not make the cell unstable (fabench.analysis.entry.stability).
With one process per cell (a CPU run with `cpu.repeats: 1`) the process effect cannot be seen:
the trials' spread inside the process stands in for the ci95, the method says that it leaves out
the noise between processes, and no pi95 is given (nor any verdict between runs:
fabench.analysis.policy says cannot tell).
"""

from __future__ import annotations

import math

from fabench.analysis import calibration, stats
from fabench.analysis.identity import PairType, hardware_identity
from fabench.analysis.entry import analyse_result
from fabench.analysis.figures import METRICS
from fabench.analysis.result_types import backend_dicts, cell_stats, record_in_stats, recorded_trials
from fabench.measure.record import MAX_MS, MIN_MS

LEVEL = 0.95
POOL_CELLS = 16
# The floor (calibrations.yaml, per hardware): below about 0.1% the trials' figures are quantised
# (on an H200, cells of 25 us repeat to the last digit between processes); a pooled estimate of
# zero noise would call any change real.
# A cell's own variance estimate overrides a smaller pooled one from this many degrees of freedom;
# from fewer (two replicates), the replicates' own interval bounds it instead (cell_sigma).
OWN_DF = 2


def _cells(results: list[dict], metric: str) -> list[dict]:
    """The metric's summaries of every analysed ok cell, with its noise estimate of its own."""
    cells = []
    for result in results:
        for entry in backend_dicts(result).values():
            summary = cell_stats(entry) if entry["status"] == "ok" else None
            figure = summary.metric(metric) if summary else None
            if not figure or not figure.median:
                continue
            # The figure's record itself: this module writes its intervals and noise into it.
            cells.append({"figure": figure.raw, "summary": summary, **own_noise(recorded_trials(entry), metric),
                          "capped": metric == "device_ms" and summary.capped})
    return cells


def own_noise(trials: list[dict], metric: str) -> dict:
    """The cell's log-variance between its process medians (df = processes - 1); with one
    process, between the trials of that process (df = trials - 1), marked as such; and those
    replicates' values (`values`), for the interval they allow by themselves."""
    values = [t for t in trials if t.get(metric) is not None and t[metric] > 0]
    processes = sorted({t.get("process", 0) for t in values})
    if len(processes) >= 2:
        medians = stats.process_medians([t[metric] for t in values], [t.get("process", 0) for t in values])
        return {"variance": stats.log_variance(medians), "df": len(medians) - 1, "replicates": len(medians),
                "between": "processes", "values": medians}
    figures = [t[metric] for t in values]
    return {"variance": stats.log_variance(figures), "df": max(len(figures) - 1, 0), "replicates": len(figures),
            "between": "trials", "values": figures}


def _pooled(cells: list[dict], index: int) -> tuple[float, int, int]:
    """(variance, degrees of freedom, cells) pooled over the POOL_CELLS cells nearest in duration."""
    target = math.log(cells[index]["figure"]["median"])
    # An unstable cell's noise has a cause of its own (spread beyond the run's limit, warm-up that
    # never settled): it is that cell's, and would widen its stable neighbours' intervals. So has a
    # cell timed at a clock held down that moved between its trials (a power cap, `capped`): it
    # pools with every stable cell, capped or not, while a cell that ran at a steady clock does
    # not take the cap's noise into its pool. On the shared H100 pair the capped cells were those
    # whose processes lay furthest apart (2-3%, cuDNN and FlashAttention at seq 4096); pooled,
    # they widened the interval of every kernel of about their duration.
    target_capped = cells[index]["capped"]
    usable = ([c for c in cells if c["df"] > 0 and c["summary"].stable and (target_capped or not c["capped"])]
              or [c for c in cells if c["df"] > 0])
    nearest = sorted(usable, key=lambda c: abs(math.log(c["figure"]["median"]) - target))[:POOL_CELLS]
    df = sum(c["df"] for c in nearest)
    if not df:
        return math.nan, 0, 0
    return sum(c["variance"] * c["df"] for c in nearest) / df, df, len(nearest)


def interval(median: float, half_log: float) -> list[float]:
    """median x/÷ exp(half_log); a lower end below the shortest measurable time reads 0 (a wide
    interval of a short cell from few ok processes reached 1e-7 ms, which no reader accepts), an
    upper end beyond the longest reads that (MAX_MS: two processes 10x apart reached 1.5e7 ms)."""
    low = median * math.exp(-half_log)
    high = median * math.exp(min(half_log, math.log(2 * MAX_MS / MIN_MS)))  # no overflow on the way
    return [low if low >= MIN_MS else 0.0, min(high, MAX_MS)]


def cell_sigma(cell: dict, pooled: float, t: float, floor: float) -> float:
    """The cell's relative noise: the pooled one (with the floor), but never less than its own
    estimate from OWN_DF degrees of freedom up, nor less than makes its ci95 (t * sigma / sqrt(n)
    about the median) hold the interval its replicates allow by themselves (stats.order_interval:
    every replicate up to 5 of them). One sigma, so the verdicts (fabench.analysis.policy) claim no
    more than the interval does."""
    sigma = math.sqrt(max(pooled, cell["variance"] if cell["df"] >= OWN_DF else 0.0) + floor**2)
    low, high = stats.order_interval(cell["values"], LEVEL)
    median = cell["figure"]["median"]
    reach = max(math.log(median / low), math.log(high / median), 0.0)
    return max(sigma, reach * math.sqrt(cell["replicates"]) / t)


def method_text(between: str, df: int, cells: int, replicates: int, fit: dict, unseen: tuple) -> str:
    what = ("the spread between the processes' medians" if between == "processes" else
            "the spread between the trials of one process (no second process: the noise from process to "
            "process is not included, so another run may land outside)")
    predicts = ("pi95: where another run of the same experiment on the same card should read (with the noise "
                f"between runs of one card, {math.sqrt(unseen[0]):.2%} a cell beyond the processes', calibration "
                f"{fit['name']}; on another card or host the comparison states its own)"
                if between == "processes" else
                "no prediction interval: one process cannot tell where another run will read")
    return (f"Student-t {LEVEL:.0%} intervals from {what}, pooled over the {cells} cells nearest in duration "
            f"({df} degrees of freedom), never below the cell's own, with a {fit['floor']:.1%} floor; ci95: this run's "
            f"median over {replicates} replicates, at least as wide as the range of the median its replicates "
            f"allow by themselves; {predicts}")


def add_intervals(results: list[dict], metric: str) -> None:
    cells = _cells(results, metric)
    fit = calibration.fit_for(hardware_identity(results))
    same_card = calibration.pair_values(fit, str(PairType.SAME_CARD))
    for index, cell in enumerate(cells):
        variance, df, pooled_cells = _pooled(cells, index)
        figure, replicates = cell["figure"], cell["replicates"]
        if not df:
            figure.update(ci95=None, pi95=None, noise=None)
            continue
        t = stats.t_quantile(stats.two_sided(LEVEL), df)
        sigma = cell_sigma(cell, variance, t, fit["floor"])
        figure["ci95"] = interval(figure["median"], t * sigma / math.sqrt(replicates))
        # One process per job cannot see the noise from process to process, the largest part of
        # what separates two runs (two CPU runs in a row: 6 of 20 medians inside such an interval):
        # no prediction interval is given rather than one that does not predict.
        values = same_card["capped"] if cell["capped"] else same_card["steady"]
        unseen = (values["noise"] ** 2, values["df"])
        process = values["scale"] * 2.0 * sigma**2 / replicates
        pi_df = stats.welch_df([(process, df), (unseen[0], math.inf if unseen[1] is None else unseen[1])])
        pi_t = stats.t_quantile(stats.two_sided(LEVEL), pi_df)
        reach = pi_t * math.sqrt(process + unseen[0])
        figure["pi95"] = (interval(figure["median"], reach)
                          if cell["between"] == "processes" else None)
        figure["noise"] = {"sigma": sigma, "df": df, "cells": pooled_cells, "replicates": replicates,
                           "between": cell["between"]}
        if metric == cell["summary"].get("judged"):
            record_in_stats(cell["summary"],
                            ci_method=method_text(cell["between"], df, pooled_cells, replicates, fit, unseen))


def analyse_run(collected: dict) -> dict:
    """Every result derived from its raw data, then every cell's intervals from the run's pooled
    noise (in place; returned). Results of schema 1 (no trials) keep the figures they carry."""
    for result in collected["results"]:
        analyse_result(result)
    add_run_intervals(collected["results"])
    return collected


def add_run_intervals(results: list[dict]) -> list[dict]:
    """Every analysed cell's intervals from the run's pooled noise, for each metric (in place)."""
    for metric in METRICS:
        add_intervals(results, metric)
    return results


def interval_name(figure: dict | None) -> str:
    """What a cell's interval is, in words, for column headers and sentences."""
    noise = (figure or {}).get("noise")
    if not noise:
        return "no interval (too few repeats)"
    if noise["between"] == "trials":
        return f"95% CI from the trials of one process ({noise['replicates']} trials, pooled noise)"
    return f"95% CI over {noise['replicates']} processes (pooled noise)"
