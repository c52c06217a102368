"""The within-run claims' statistics against simulated runs whose noise has the structure of real
ones: a process effect that both backends of a job share (the host's or GPU's state in that
process), a smaller effect of the process on each backend alone, trial noise below both, and an
effect of the run on each cell. The oracle is the simulation's truth, never the test's formula:
the rate of false claims where the backends take the same time, and the share of a real 5%
difference found.

Blind side: the simulated effects are log-normal, the test's own assumption. Pairs whose noise
differs are simulated with the noise tied to duration (as on real runs, where a run's longest
cells are its noisiest); noise that differs at random between cells of one duration (a cell a busy
host disturbed) is not held to alpha in its noisiest pairs (the unequal-noise test says how far).
"""

from __future__ import annotations

import math
import random
from itertools import combinations

import pytest
from scipy import stats as scipy_stats

from fabench.analysis import claims
from fabench.analysis.noise import analyse_run
from fabench.analysis.pairs import Pair, PairNoise
from fabench.analysis.policy import Code, Rule
from fabench.analysis.within_run import paired, processes_apart
from fabench.measure.cell import trial_order

RULE = Rule()
TINY_MARGIN = Rule(margin=1e-6)  # the noise test alone decides: its false rate is the rule's alpha


def simulated_run(rng: random.Random, jobs: int, processes: int, trials: int, ratio: float = 1.0,
                  shared: float = 0.05, own: float = 0.005, trial: float = 0.003, run: float = 0.0,
                  second: float = 0.0, rotate: bool = True, scale=lambda job, name: 1.0, shift: float = 1.0,
                  backends: int = 2, spacing: float = 1.0) -> list[dict]:
    """One run's results: per job `backends` backends A, B, ... (B takes `ratio` times A's true
    time, each further one `spacing` times the one before), interleaved in `processes` processes of
    `trials` trials each, wall-clock figures as on a CPU. `second`: an order effect, the backend
    that runs second or later in a round takes that much longer (log); the rounds' order is the
    job's (trial_order), or with `rotate` False always A, B, ... (before the order turned).
    `scale(job, name)`: the cell's own process and trial noise as a multiple of `own` and `trial`.
    `shift`: the whole run's factor on every time (a host or a clock slower for the whole run)."""
    results = []
    names = "ABCDEFGH"[:backends]
    for job in range(jobs):
        true = {name: 10.0 * (1 + job) * spacing ** k * (ratio if k == 1 else 1.0) * shift
                for k, name in enumerate(names)}
        shifted = {name: t * math.exp(rng.gauss(0, run)) for name, t in true.items()}  # this run's effect
        cells = {name: {"label": name, "status": "ok", "trials": []} for name in true}
        for process in range(processes):
            state = rng.gauss(0, shared)  # both backends of the process share it
            offsets = {name: state + rng.gauss(0, own * scale(job, name)) for name in cells}
            for index in range(trials):
                order = trial_order(list(cells), process, index, trials) if rotate else list(cells)
                for position, name in enumerate(order):
                    value = shifted[name] * math.exp(offsets[name] + rng.gauss(0, trial * scale(job, name))
                                                     + (second if position else 0.0))
                    cells[name]["trials"].append({"process": process, "index": index, "position": position,
                                                  "wall_mean_ms": value})
        results.append({"platform": "cpu", "flops": None, "method": {"stable_spread": 1.0}, "backends": cells})
    return analyse_run({"results": results})["results"]


def verdicts(results: list[dict], rule: Rule, between_runs: float = 0.0) -> list[dict]:
    noise = PairNoise.of(results, "wall_mean_ms")
    return [paired(r["backends"]["A"], r["backends"]["B"], "wall_mean_ms", rule, noise, between_runs=between_runs)
            for r in results]


def claims_made(found: list[dict]) -> int:
    return sum(v["verdict"] == "changed" for v in found)


def upper_bound(n: int, rate: float) -> int:
    """The most false claims in n at the nominal rate, but for a one-in-a-thousand chance."""
    return int(scipy_stats.binom.ppf(0.999, n, rate))


def test_no_difference_is_claimed_at_most_at_alpha_under_large_process_effects():
    """Process effects of 5% (shared) and 0.5% (each backend's own) against 0.3% trial noise, two
    processes a job: the noise test alone (margin ~0) claims a difference in at most alpha of the
    pairs where there is none."""
    rng = random.Random(1)
    found = [v for _ in range(40) for v in verdicts(simulated_run(rng, 20, 2, 3), TINY_MARGIN)]
    assert len(found) == 800
    assert claims_made(found) <= upper_bound(len(found), TINY_MARGIN.alpha)
    # And it is a test, not a wall: at a level of 50% it claims about half of them.
    loose = [v for _ in range(10) for v in verdicts(simulated_run(rng, 20, 2, 3), Rule(margin=1e-6, alpha=0.5))]
    assert 0.35 < claims_made(loose) / len(loose) < 0.65


def test_the_trial_is_not_the_unit():
    """The trials of a process share its effect: with each backend's process effect (1%) above the
    trial noise (0.1%) and nothing shared, every trial of one often lies beyond every trial of the other where the two
    take the same time. A count over trials would call that beyond chance; the paired test over
    processes does not."""
    rng = random.Random(2)
    runs = [simulated_run(rng, 20, 2, 3, shared=0.0, own=0.01, trial=0.001) for _ in range(20)]
    separated = sum(all(a < b for a in _values(r, "A") for b in _values(r, "B")) or
                    all(b < a for a in _values(r, "A") for b in _values(r, "B")) for rs in runs for r in rs)
    assert separated > 0.2 * 400  # complete separation of the trials is common: not evidence
    found = [v for rs in runs for v in verdicts(rs, TINY_MARGIN)]
    assert claims_made(found) <= upper_bound(len(found), TINY_MARGIN.alpha)


def _values(result: dict, name: str) -> list[float]:
    return [t["wall_mean_ms"] for t in result["backends"][name]["trials"]]


def test_run_effects_are_no_claim_where_their_size_is_known():
    """A run's own shift of each cell (0.5%, about the 90th percentile between runs of one experiment
    on one card) is no difference between the backends, and a run cannot see it by itself: without
    it the claims on it exceed alpha (a claim then holds for this run only, and says so); with its
    size given (a calibration's) they stay at alpha, the margin as set."""
    rng = random.Random(3)
    runs = [simulated_run(rng, 20, 2, 3, run=0.005) for _ in range(20)]
    blind = [v for rs in runs for v in verdicts(rs, RULE)]
    assert claims_made(blind) > upper_bound(len(blind), RULE.alpha)
    known = [v for rs in runs for v in verdicts(rs, RULE, between_runs=0.005)]
    assert claims_made(known) <= upper_bound(len(known), RULE.alpha)
    assert "calibrated" in claims.verdict_text.paired_text(known[0]["values"])


def test_a_real_five_percent_difference_is_found_with_two_processes():
    rng = random.Random(4)
    found = [v for _ in range(10) for v in verdicts(simulated_run(rng, 20, 2, 3, ratio=1.05, run=0.005), RULE,
                                                     between_runs=0.005)]
    assert sum(v["code"] == Code.REGRESSION for v in found) >= 0.95 * len(found)
    assert all(v["values"]["paired"]["p"] < RULE.alpha for v in found if v["code"] == Code.REGRESSION)


def test_one_process_gives_no_test_and_no_p():
    """The default CPU run: one process a job. Even a 4x difference in every paired trial is no
    test (the noise between processes is unseen): cannot tell, one_process, with what the trials show."""
    rng = random.Random(5)
    results = simulated_run(rng, 3, 1, 2, ratio=4.0)
    claim = claims.compare(results[0]["backends"]["A"], results[0]["backends"]["B"], RULE, names=("A", "B"),
                           same_job=True, pair_noise=PairNoise.of(results, "wall_mean_ms"))
    assert (claim["claim"], claim["code"]) == ("cannot tell", Code.ONE_PROCESS)
    assert "every one of 2 paired trials" in claim["why"] and "p =" not in claim["why"]
    assert "cpu: {repeats: 2}" in claim["why"]


def test_paired_claim_names_the_faster_and_its_evidence():
    rng = random.Random(6)
    results = simulated_run(rng, 10, 2, 3, ratio=1.5)
    noise = PairNoise.of(results, "wall_mean_ms")
    assert noise.df == 10 and noise.pairs == 10  # one degree of freedom per job beyond its first process
    claim = claims.compare(results[0]["backends"]["B"], results[0]["backends"]["A"], RULE, names=("B", "A"),
                           same_job=True, pair_noise=noise)
    assert (claim["claim"], claim["faster"]) == ("faster", "b")
    assert 1.45 < claim["ratio"] < 1.55
    assert "paired test over 2 processes (all 6 paired trials on this side" in claim["why"]


def test_processes_apart_holds_alpha_at_the_process_unit():
    """Two cells of different jobs (no partners), process effects 2% against 0.2% trial noise:
    every process median of one beyond every one of the other happens by chance; Welch's t over
    the process medians claims it in at most alpha of the pairs."""
    rng = random.Random(7)
    claimed, pairs = 0, 0
    for _ in range(60):
        results = simulated_run(rng, 20, 3, 3, shared=0.0, own=0.02, trial=0.002)
        for r in results:
            pairs += 1
            claimed += processes_apart(r["backends"]["A"], r["backends"]["B"], "wall_mean_ms", TINY_MARGIN) is not None
    assert claimed <= upper_bound(pairs, TINY_MARGIN.alpha)
    # A 2x gap far beyond the processes' spread is told apart, with its p.
    far = simulated_run(rng, 1, 2, 3, ratio=2.0, shared=0.0, own=0.02, trial=0.002)[0]["backends"]
    apart = processes_apart(far["A"], far["B"], "wall_mean_ms", RULE)
    assert apart["faster"] == "a" and apart["p"] < RULE.alpha and apart["processes"] == [2, 2]


def test_no_backend_is_claimed_faster_than_another_that_ran_the_same_kernels_in_real_runs():
    """A negative control on real runs no rule was fitted on (the four H100 x2 runs committed under
    examples/): two backends of one job that launched the same kernels by name (SDPA's default
    dispatch and the backend it chose) take the same time, so a "faster" between them is false.
    None is claimed; most are "same". Blind side: the H100s' power-capped cells are the hard case
    here, and a pair differing by less than the margin is never a claim anyway."""
    import json
    import tarfile
    from pathlib import Path

    from fabench.report.model import Run

    archive = Path(__file__).resolve().parents[1] / "examples" / "h100-x2-2026-11-25" / "archive-0001.tar.gz"
    claimed, same, pairs = 0, 0, 0
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
        for name in sorted(n for n in members if n.endswith("/results.json")):
            collected = analyse_run(json.load(tar.extractfile(members[name])))
            config = json.load(tar.extractfile(members[name.replace("results.json", "config.json")]))
            run = Run(collected, config)
            for result in run.results:
                ok = [(n, e) for n, e in result["backends"].items() if e["status"] == "ok"]
                for i, (name_a, a) in enumerate(ok):
                    for name_b, b in ok[i + 1:]:
                        if not (a.get("kernels") or {}).get("names") or a["kernels"]["names"] != b["kernels"]["names"]:
                            continue
                        claim = run.claim(a, b, (name_a, name_b))
                        pairs += 1
                        claimed += claim["claim"] == "faster"
                        same += claim["claim"] == "same"
    assert (pairs, claimed) == (40, 0) and same >= pairs / 2, (pairs, claimed, same)


def test_an_order_effect_is_no_claim_once_the_order_turns():
    """Whichever backend runs second in a round takes 2% longer (the state the first left: clocks,
    heat), more than the margin. In a fixed order (B always second, as before the order turned)
    pairing cannot remove it: B is claimed slower in most jobs. With the job's order (trial_order:
    over 2 processes of 3 rounds each backend runs first 3 times) it becomes noise between
    processes, which the test counts: the noise test alone claims at most alpha, and each verdict
    says which ran first how often. Blind side: the effect is the same on every pair and process;
    one tied to a particular predecessor is balanced only as far as the rotation puts each backend
    after each other one, and with an odd number of rounds in all one of a pair runs first once
    more (a bias of 1/rounds of the effect)."""
    rng = random.Random(11)
    fixed = [v for _ in range(10) for v in verdicts(simulated_run(rng, 20, 2, 3, second=0.02, rotate=False), RULE)]
    assert claims_made(fixed) > 0.5 * len(fixed)
    turning = [v for _ in range(40) for v in verdicts(simulated_run(rng, 20, 2, 3, second=0.02), TINY_MARGIN)]
    assert claims_made(turning) <= upper_bound(len(turning), TINY_MARGIN.alpha)
    assert {tuple(sorted(v["values"]["paired"]["ran_first"].items())) for v in turning} == {(("a", 3), ("b", 3))}
    assert all(v["values"]["paired"]["ran_first"] is None
               for v in verdicts(_unrecorded(simulated_run(rng, 3, 2, 3)), RULE))


def _unrecorded(results: list[dict]) -> list[dict]:
    """The run as results from before the trials recorded their place."""
    for result in results:
        for entry in result["backends"].values():
            for trial in entry["trials"]:
                del trial["position"]
    return results


def _by_duration(spread: float, jobs: int):
    """A cell's noise multiple, from 1 at the run's shortest job to `spread` at its longest, even in log time."""
    return lambda job, name: spread ** (math.log1p(job) / math.log(jobs))


@pytest.mark.parametrize("spread", [7, 20, 55])
def test_pairs_of_unequal_noise_hold_alpha_in_their_noisiest_quarter(spread):
    """A run of 9 jobs of 5 backends each (90 pairs, as a default GPU run), two processes of three
    trials, where the cells' own noise grows with their duration, the longest `spread` times the
    shortest (real runs: the mean pair variance by duration quartile differed up to 189x, sd 14x,
    on a disturbed H100). Each pair's variance is moderated toward the pairs of other jobs nearest
    in duration, carried along the run's trend: the noisiest quarter of the pairs (the two longest
    jobs' 22%) is claimed at most at alpha by the noise test alone, as is the rest. (One pooled
    variance for every pair, with max(own, pooled), claimed 2.8-6.7% of the noisiest quarter at an
    alpha of 2% in the review of 7a933f6, §3.2.) Blind side: noise that differs at random between
    cells of one duration is not held: in this simulation with the cells' multiples drawn at random
    instead, the noisiest quarter of the pairs is claimed in 6.7% (x7), 8.1% (x20) and 4.8% (x55)
    against 2%."""
    rng = random.Random(spread)
    jobs, noisy, quiet = 9, [], []
    for _ in range(40):
        results = simulated_run(rng, jobs, 2, 3, backends=5, scale=_by_duration(spread, jobs))
        noise = PairNoise.of(results, "wall_mean_ms")
        for job, result in enumerate(results):
            cells = result["backends"]
            found = [paired(cells[a], cells[b], "wall_mean_ms", TINY_MARGIN, noise) for a, b in combinations(cells, 2)]
            (noisy if job >= jobs - 2 else quiet).extend(found)
    assert len(noisy) == 40 * 2 * 10  # the two longest jobs of nine: the noisiest 22% of the pairs
    assert claims_made(noisy) <= upper_bound(len(noisy), TINY_MARGIN.alpha), claims_made(noisy)
    assert claims_made(quiet) <= upper_bound(len(quiet), TINY_MARGIN.alpha), claims_made(quiet)


def test_a_whole_run_shift_changes_no_claim():
    """The whole run 30% slower (a host or a clock slower throughout), with process effects both
    partners share of 10% (the machine slower in one process than in the other): the paired test
    reads ratios of partners, so every verdict and p is the one the unshifted run gets from the
    same draws, and the claims stay at alpha. Blind side: a shift that moves one backend and not
    its partner (a cell's own run effect) is no whole-run shift: test_run_effects_are_no_claim_where_their_size_is_known."""
    found = {}
    for shift in (1.0, 1.3):
        rng = random.Random(12)
        found[shift] = [v for _ in range(20) for v in verdicts(simulated_run(rng, 20, 2, 3, shared=0.1, shift=shift),
                                                                TINY_MARGIN)]
    for plain, shifted in zip(found[1.0], found[1.3]):
        assert plain["code"] == shifted["code"]
        assert math.isclose(plain["values"]["paired"]["p"], shifted["values"]["paired"]["p"], rel_tol=1e-6, abs_tol=1e-12)
        assert math.isclose(plain["ratio"], shifted["ratio"], rel_tol=1e-9)
    assert claims_made(found[1.3]) <= upper_bound(len(found[1.3]), TINY_MARGIN.alpha)


def test_a_pair_borrows_only_from_other_jobs_and_as_many_units_as_they_hold():
    """The prior of a pair comes from other jobs' pairs (its own job's share its processes: its own
    data would count twice), worth the independent units they hold: all 10 pairs of 5 backends in 2
    processes are 4 (their backends' sample variance), however many pairs. A run of one job lends
    nothing: each pair keeps its own variance and its one degree of freedom."""
    rng = random.Random(13)
    alone = simulated_run(rng, 1, 2, 3, backends=5)
    noise = PairNoise.of(alone, "wall_mean_ms")
    cells = alone[0]["backends"]
    for a, b in combinations(cells, 2):
        pair = Pair.of(cells[a], cells[b], "wall_mean_ms")
        assert noise.moderated(pair) == (max(pair.variance, pair.within_mean_variance), 1)
    two = simulated_run(rng, 2, 2, 3, backends=5)
    noise = PairNoise.of(two, "wall_mean_ms")
    first = two[0]["backends"]
    pair = Pair.of(first["A"], first["B"], "wall_mean_ms")
    prior, units, _ = noise.prior(pair.log_time, 0)
    others = [p for p in noise.pool if p.job == 1]
    assert units == 4 and len(others) == 10 and noise.trend == (0.0, 0.0)
    assert prior == pytest.approx(sum(p.variance for p in others) / 10)
    variance, df = noise.moderated(pair)
    assert 1 < df <= 5 and min(prior, pair.variance) <= variance <= max(prior, pair.variance, pair.within_mean_variance)
