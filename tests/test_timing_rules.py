"""The timer's rules on known values: the proof that the GPU never waited for the host, window
agreement in the warm-up, and NVML's clock-event reasons in words. No GPU needed."""

from __future__ import annotations

from fabench.measure.device.gpu_state import slowdown
from fabench.measure.device.timing import _fed
from fabench.measure.device.warmup import _agree


def test_an_iteration_is_fed_only_when_queued_before_the_gpu_could_reach_it():
    # Host ahead all the way: queued at 0.1, 0.2, 0.3 ms; the GPU reached them at 0.5, 1.0, 1.5.
    assert _fed([0.1, 0.2, 0.3], [0.5, 1.0, 1.5])
    # The host fell behind at the third iteration: the GPU may have waited for it.
    assert not _fed([0.1, 0.2, 1.6], [0.5, 1.0, 1.5])
    # Queued exactly when reached still counts as fed (the bound is conservative already).
    assert _fed([0.5], [0.5])


def test_windows_agree_within_the_tolerance_and_an_unreadable_clock_does_not_object():
    assert _agree(1.01, 1.0, 0.02)
    assert not _agree(1.03, 1.0, 0.02)
    assert not _agree(1710, 1980, 0.02)  # a power cap setting in
    assert _agree(None, 1980, 0.02) and _agree(1980, None, 0.02)


def test_clock_event_reasons_in_words():
    assert slowdown({"clock_event_reasons": 4}) == "software power cap"
    assert slowdown({"clock_event_reasons": 0x4 | 0x20}) == "software power cap, software thermal slowdown"
    assert slowdown({"clock_event_reasons": 1}) is None  # idle is no slowdown
    assert slowdown({"clock_event_reasons": 0}) is None
    assert slowdown({"clock_event_reasons": None}) is None
    assert slowdown(None) is None


def test_the_sleep_factor_comes_down_when_the_gpu_waited_most_of_its_sleep_for_nothing():
    from fabench.measure.device.timing import SLEEP_FACTOR, relaxed_sleep_factor

    # The GPU waited 2.0 ms before the first iteration, which the host had queued at 0.1 ms: 1.9 ms spare.
    assert relaxed_sleep_factor(16.0, [0.1, 0.3, 0.5], [2.0, 2.4, 2.8]) == 8.0
    assert relaxed_sleep_factor(3.0, [0.1, 0.3, 0.5], [2.0, 2.4, 2.8]) == SLEEP_FACTOR  # never below the first
    # Launch-bound: the last iteration was queued just before the GPU got to it; the sleep was needed.
    assert relaxed_sleep_factor(16.0, [0.1, 0.9, 1.7], [2.0, 2.05, 2.1]) == 16.0


def test_the_device_loop_takes_min_samples_and_min_trial_ms_and_the_published_loop_its_count():
    import dataclasses

    from fabench.measure.spec import job_spec
    from fabench.measure.device.timing import device_samples, trial_iters
    from workflow_util import tiny_config

    timing = dataclasses.replace(job_spec(tiny_config(), "tuned", {"batch": 1, "seq": 64, "heads": 2, "head_dim": 32})
                                 .settings.timing, iters=100, min_samples=10, min_trial_ms=20)
    assert device_samples(timing, 18.0) == 10  # native fp32 at seq 4096: 10 samples, not 100
    assert device_samples(timing, 0.03) == 667  # short kernels: min_trial_ms of device time
    assert trial_iters(timing, 18.0) == 100  # the published method keeps its published count
    assert device_samples(timing, None) == 100  # no estimate: as many as the published count
