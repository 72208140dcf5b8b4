"""engine.output_lengths: the record of finished output lengths and its remaining-length prediction."""

from __future__ import annotations

import pytest

from engine.output_lengths import OutputLengths


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
