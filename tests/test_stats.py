"""fabench.analysis.stats: Student's t from scipy.special (what the intervals and the paired test
ask, without scipy.stats' import) against scipy.stats' own distribution."""

import math

import pytest
from scipy import stats as scipy_stats

from fabench.analysis import stats


@pytest.mark.parametrize("df", [1, 2, 3.5, 10, 120, 1e6])
def test_the_t_quantile_and_two_sided_p_equal_scipy_stats_t(df):
    """Blind side: only the grid below; both call into the same Cephes routines, so the check is
    that the arguments reach them in the right order and sign (a swapped df and p fails here)."""
    for probability in (0.5, 0.9, 0.95, 0.975, 0.995):
        assert stats.t_quantile(probability, df) == pytest.approx(scipy_stats.t.ppf(probability, df), rel=1e-9)
    for t in (0.0, 0.5, 2.0, 12.7, 50.0):
        assert stats.t_two_sided_p(t, df) == pytest.approx(2 * scipy_stats.t.sf(t, df), rel=1e-9, abs=1e-300)
        assert stats.t_two_sided_p(-t, df) == stats.t_two_sided_p(t, df)


def test_unlimited_degrees_of_freedom_give_the_normal_figures():
    assert stats.t_quantile(0.975, math.inf) == pytest.approx(1.959964, abs=1e-6)
    assert stats.t_two_sided_p(1.959964, math.inf) == pytest.approx(0.05, abs=1e-6)
    assert stats.t_two_sided_p(math.inf, 3) == 0.0


def test_trigamma_and_its_inverse_against_the_variance_of_log_chi2():
    """trigamma(df/2) is the variance of log(chi2_df), the figure the moderated pair variance
    (fabench.analysis.pairs) weighs its prior by; checked against scipy's chi2 by simulation, and
    the inverse against the function from the tiny to the huge. Blind side: the simulation's own
    error (200,000 draws: about 1% at one degree of freedom)."""
    import numpy

    rng = numpy.random.default_rng(1)
    for df in (1, 2, 8):
        draws = numpy.log(scipy_stats.chi2.rvs(df, size=200_000, random_state=rng))
        assert stats.trigamma(df / 2) == pytest.approx(float(draws.var()), rel=0.03)
    for y in (1e-8, 1e-3, 0.3, 1.0, 4.93, 50.0, 1e8):
        assert stats.trigamma(stats.trigamma_inverse(y)) == pytest.approx(y, rel=1e-6)


def test_a_trials_figure_moves_smoothly_with_the_modes_of_its_calls_where_a_median_jumps():
    """Calls in two modes 4% apart, the share in the slower one going from 45% to 55% (as cuDNN's at
    (4,1024,8,64) on an H200, in 1.5%): the trimmed mean moves by about a tenth of the gap, the
    median by the whole gap; a few calls held up ten times as long do not move it.
    Blind side: a mode holding fewer calls than the trimmed share at an end is set aside whole."""
    import random
    import statistics

    from fabench.analysis.stats import TRIM, trial_figure

    rng = random.Random(3)

    def calls(slow_share):
        return [(1.04 if i < slow_share * 300 else 1.0) + rng.gauss(0, 0.002) for i in range(300)]

    few, more = calls(0.45), calls(0.55)
    assert trial_figure(more) / trial_figure(few) - 1 < 0.012
    assert statistics.median(more) / statistics.median(few) - 1 > 0.03
    held_up = few[:-3] + [10.0] * 3
    assert abs(trial_figure(held_up) / trial_figure(few) - 1) < 0.002 and 3 / 300 < TRIM
    assert trial_figure([2.0]) == 2.0 and trial_figure([1.0, 3.0]) == 2.0
