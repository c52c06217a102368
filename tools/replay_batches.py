"""An archived GPU run's timed loops replayed through the stopping rule (fabench.measure.stopping)
with the batch sizing before 61a0698 and with the current one: how much host time each trial's
kernel loop takes under each, and the run rebuilt with every trial cut to the samples the chosen
sizing takes, to store with `fabench archive store` and judge with `fabench detector-check`
(docs/timing.md: how the current sizing was accepted).

    python tools/replay_batches.py ENTRY_DIR OUT_DIR [--sizing current|before] [--run NAME]

Before: a trial's first batch sized at PROFILED_SAMPLE_HOST_MS a sample, every batch to a whole
min_time_share of the timeout. Current: the first batch sized at the host cost the backend's
previous trial in the same process measured, every batch to what is left of the minimum time.

A replay runs the trial's recorded kernel-time samples, in their order, through the rule on a
clock that charges each profiled batch BATCH_MS plus a cost per sample; that cost is fitted per
trial so that the before-sizing's replay spends the trial's recorded host time. The model is
checked against the record: the before-sizing replay reproduces each trial's recorded sample
count or not, and the count of those it reproduces is printed. A replay that asks for more
samples than were recorded ends with the last of them (counted as `ran_out`): the cut run never
holds a sample that was not measured. The other per-sample figures (event pairs, periods) are cut
to the same share, the chunks' calls and clocks to the samples kept.

The entry is read as tools/scale_run.py reads it (intact, its results and config as the store
accepts them) and written in a run folder's layout; stdout gets one line of JSON: the trials, how
many the model reproduced, how many ran out, and the kernel loops' host time under each sizing.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale_run  # noqa: E402  (tools/scale_run.py: reading the entry, writing the run)

from fabench.cli.common import USAGE, Parser  # noqa: E402
from fabench.config import ConfigError  # noqa: E402
from fabench.files import DataPathError  # noqa: E402
from fabench.measure import stopping  # noqa: E402
from fabench.results.published import PublishedError  # noqa: E402

# The host cost of one profiled batch beyond its samples (the profiler session, the GPU sleep, the
# trace read back): H200 trials of one batch of long kernels (native and Triton at seq 1024-4096)
# spent 11-14 ms beyond their kernels' own time.
BATCH_MS = 12.0
SIZINGS = ("current", "before")
PER_SAMPLE_FLOOR_MS = 0.02  # a fitted cost is never below this (a record shorter than BATCH_MS allows)


def before_batch_size(rule: stopping.StopRule, calls: int, taken: list[float], per_sample: float | None,
                      host_ms: float) -> int:
    """stopping.batch_size before 61a0698: a whole min_time_share at the cost measured in this
    trial alone (host_ms unused), rounded down."""
    per = stopping.sample_cost(rule, calls, per_sample)
    return stopping.batch_within(rule, calls, taken,
                                 max(rule.min_samples, math.floor(rule.min_time_share * rule.max_trial_ms / per)))


SIZE = {"before": before_batch_size, "current": stopping.batch_size}


def replay(rule, samples: list[float], calls: int, per_sample_ms: float, size, carried: float | None) -> dict:
    """The trial's samples through stopping.collect, batches sized by `size` (the first at `carried`
    a sample where given), each charged BATCH_MS + per_sample_ms a sample."""
    clock = {"ms": 0.0, "at": 0, "batches": 0, "ran_out": False}
    taken: list[float] = []

    def take() -> list[float]:
        per = clock["ms"] / len(taken) if taken else carried
        wanted = size(rule, calls, taken, per, clock["ms"])
        start = clock["at"]
        batch = samples[start:start + wanted] or samples[-1:]
        clock["ran_out"] |= start + wanted > len(samples)
        clock["at"] = min(start + wanted, len(samples))
        clock["batches"] += 1
        clock["ms"] += BATCH_MS + len(batch) * per_sample_ms
        taken.extend(batch)
        return batch

    _, stop = stopping.collect(rule, take, clock=lambda: clock["ms"] / 1000.0)
    return {**stop, "samples": clock["at"], "batches": clock["batches"], "ran_out": clock["ran_out"]}


def fitted_cost(rule, samples: list[float], calls: int, elapsed_ms: float) -> tuple[float, dict]:
    """The per-sample cost at which the before-sizing replay spends the recorded host time, and
    that replay (the batch count it needs is found by replaying)."""
    batches = 1
    for _ in range(4):
        cost = max(PER_SAMPLE_FLOOR_MS, (elapsed_ms - BATCH_MS * batches) / len(samples))
        before = replay(rule, samples, calls, cost, before_batch_size, None)
        if before["batches"] == batches:
            break
        batches = before["batches"]
    return cost, before


def stop_rule(config: dict) -> stopping.StopRule:
    """The run's stopping rule, from its resolved config (the schema's defaults filled in)."""
    timing = config.get("timing") or {}
    fields = ("max_noise", "min_samples", "min_trial_ms", "max_trial_ms")
    missing = [name for name in fields if not isinstance(timing.get(name), (int, float))]
    if missing:
        raise scale_run.ScaleError(f"config.json: timing.{missing[0]} is not recorded: the run's stopping rule is unknown")
    return stopping.StopRule.from_timing(types.SimpleNamespace(**{name: timing[name] for name in fields}))


def cut(trial: dict, keep: int) -> None:
    """The trial as if it had stopped after its first `keep` samples."""
    recorded = len(trial["kernel_samples_ms"])
    share = keep / recorded
    trial["kernel_samples_ms"] = trial["kernel_samples_ms"][:keep]
    for key in ("device_samples_ms", "period_profiled_events_ms", "period_cupti_ms"):
        if trial.get(key):
            trial[key] = trial[key][:max(1, round(len(trial[key]) * share))]
    if trial.get("chunk_calls") and trial.get("sleep_clock_mhz"):
        calls, clocks, left = [], [], keep
        for count, mhz in zip(trial["chunk_calls"], trial["sleep_clock_mhz"]):
            if left <= 0:
                break
            calls.append(min(count, left))
            clocks.append(mhz)
            left -= count
        trial.update(chunk_calls=calls, sleep_clock_mhz=clocks, chunks=len(calls))


def replayed(results: list[dict], config: dict, sizing: str, tally: dict) -> list[dict]:
    """Every GPU trial replayed (in place) and cut to what `sizing` takes; `tally` counts."""
    rule = stop_rule(config)
    for result in results:
        for entry in result["backends"].values():
            carried: dict[int, float] = {}  # by process: the cost the backend's last trial measured
            for trial in sorted(entry.get("trials") or [], key=lambda t: (t["process"], t["index"])):
                stop, samples = trial.get("stop"), trial.get("kernel_samples_ms")
                if not stop or not samples or stop.get("elapsed_ms") is None:
                    continue
                events = statistics.median(trial.get("device_samples_ms") or samples)
                calls = max(rule.min_samples, math.ceil(rule.min_trial_ms / events))
                cost, before = fitted_cost(rule, samples, calls, stop["elapsed_ms"])
                given = carried.get(trial["process"]) if sizing == "current" else None
                chosen = replay(rule, samples, calls, cost, SIZE[sizing], given) if sizing == "current" else before
                carried[trial["process"]] = stop["elapsed_ms"] / len(samples)
                tally["trials"] += 1
                tally["reproduced"] += before["samples"] == len(samples)
                tally["ran_out"] += chosen["ran_out"]
                tally["before_ms"] += before["elapsed_ms"]
                tally["chosen_ms"] += chosen["elapsed_ms"]
                cut(trial, chosen["samples"])
                trial["stop"] = {**stop, "stopped": chosen["stopped"], "samples": chosen["samples"],
                                 "elapsed_ms": round(chosen["elapsed_ms"], 3)}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="tools/replay_batches.py", description=__doc__.splitlines()[0])
    parser.add_argument("entry", type=Path, help="an archive entry (archive/<label>/<run-id>/)")
    parser.add_argument("out", type=Path, help="the run folder to write (results/<run>/ layout): new or empty")
    parser.add_argument("--sizing", choices=SIZINGS, default="current",
                        help="whose samples the rebuilt run keeps (before: the model's replay of the record)")
    parser.add_argument("--run", type=scale_run.run_name_arg, help="the run's name (default: the entry's)")
    args = parser.parse_args(argv)
    tally = dict.fromkeys(("trials", "reproduced", "ran_out", "before_ms", "chosen_ms"), 0)
    try:
        scale_run.rebuilt_run(args.entry, args.out,
                              lambda results, config: replayed(results, config, args.sizing, tally), args.run)
    except (scale_run.ScaleError, ConfigError, PublishedError, DataPathError) as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return USAGE
    print(json.dumps({"sizing": args.sizing, **{k: round(v, 1) for k, v in tally.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
