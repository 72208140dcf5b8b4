"""benchmarks.micro.served_mask_fills: the table of shares read from the served histogram."""

from __future__ import annotations

from benchmarks.micro.served_mask_fills import table


def test_table_gives_the_share_of_fills_within_each_bound() -> None:
    histogram = {
        ("sql_schema", "xgrammar", "draft"): {"0.0001": 0.0, "0.00025": 1.0, "0.0005": 2.0, "0.001": 3.0,
                                              "0.0025": 4.0, "0.005": 4.0, "+Inf": 4.0, "count": 4.0,
                                              "sum": 0.002},
        ("json_schema", "llguidance", "target"): {"count": 0.0, "sum": 0.0},  # nothing filled: no row
    }
    head, rule, *rows = table(histogram)
    assert head.startswith("| grammar | backend | rows | fills | mean µs | ≤ 100 µs")
    assert rule.count("---") == 11
    assert rows == ["| sql_schema | xgrammar | draft | 4 | 500 | 0.0% | 25.0% | 50.0% | 75.0% | 100.0% | 100.0% |"]


def test_pause_table_counts_pauses_over_10_and_100_ms() -> None:
    from benchmarks.micro.served_mask_fills import pause_table

    pauses = {"2": {"0.01": 1.0, "0.1": 2.0, "+Inf": 3.0, "count": 3.0, "sum": 0.4}}
    assert pause_table(pauses)[2:] == ["| 2 | 3 | 400 | 2 | 1 |"]
