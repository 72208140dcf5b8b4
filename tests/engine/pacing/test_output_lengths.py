"""engine.pacing.output_lengths: the record of finished output lengths and its remaining-length prediction."""

from __future__ import annotations

import pytest

from engine.pacing.output_lengths import OutputLengths


def test_mean_remaining_of_outputs_still_running_capped_by_room() -> None:
    record = OutputLengths()
    for n in (10, 30, 50):
        record.record(["schema-a", "json"], length=n)
    assert record.expected_remaining(["schema-a"], generated=0, room=100) == pytest.approx(30)
    assert record.expected_remaining(["schema-a"], generated=20, room=100) == pytest.approx((10 + 30) / 2)
    assert record.expected_remaining(["schema-a"], generated=20, room=15) == pytest.approx((10 + 15) / 2)
    assert record.expected_remaining(["schema-a"], generated=50, room=100) is None  # beyond experience


def test_most_specific_key_with_enough_records_decides() -> None:
    record = OutputLengths(min_records=2)
    record.record(["schema-a", "json"], length=100)
    record.record(["schema-b", "json"], length=4)
    record.record(["schema-b", "json"], length=6)
    assert record.expected_remaining(["schema-b", "json"], generated=0, room=500) == pytest.approx(5)
    # one record of schema-a is too few: the kind decides
    assert record.expected_remaining(["schema-a", "json"], generated=0, room=500) == pytest.approx(110 / 3)
    assert record.expected_remaining(["schema-c"], generated=0, room=500) is None
    assert record.count("json") == 3


def test_window_forgets_old_outputs_and_bad_arguments_are_refused() -> None:
    record = OutputLengths(window=2)
    for n in (1000, 8, 8):
        record.record(["k"], length=n)
    assert record.expected_remaining(["k"], generated=0, room=5000) == pytest.approx(8)
    with pytest.raises(ValueError):
        record.record(["k"], length=-1)
    with pytest.raises(ValueError):
        OutputLengths(window=0)


def test_a_censored_output_counts_only_where_it_covers_the_request() -> None:
    """An output cut by its max_tokens at n ran at least n: it says the remaining is the whole
    room only where n >= generated + room, and nothing otherwise (a 4-token warm-up cut short
    must not predict that a 48-token request ends after 4)."""
    record = OutputLengths()
    record.record(["k"], length=4, truncated=True)
    assert record.expected_remaining(["k"], generated=1, room=47) is None  # says nothing: the rental
    assert record.expected_remaining(["k"], generated=1, room=3) == pytest.approx(3)
    record.record(["k"], length=48, truncated=True)
    assert record.expected_remaining(["k"], generated=1, room=47) == pytest.approx(47)
    record.record(["k"], length=11)
    assert record.expected_remaining(["k"], generated=1, room=47) == pytest.approx((47 + 10) / 2)


def test_least_recently_recorded_keys_are_dropped_past_max_keys() -> None:
    record = OutputLengths(max_keys=2)
    record.record(["a"], length=5)
    record.record(["b"], length=6)
    record.record(["a"], length=7)  # a is now the most recent
    record.record(["c"], length=8)  # drops b
    assert record.count("b") == 0 and record.count("a") == 2 and record.count("c") == 1
