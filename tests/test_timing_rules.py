"""The timer's rules on known values: the proof that the GPU never waited for the host, window
agreement in the warm-up, and NVML's clock-event reasons in words. No GPU needed."""

from __future__ import annotations

from fabench.measure.gpu_state import slowdown
from fabench.measure.timing import _agree, _fed


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
