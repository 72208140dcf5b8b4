"""benchmarks.micro.fill_overlap: the table of medians against forward-then-fill."""

from __future__ import annotations

from benchmarks.micro.fill_overlap import table


def test_table_gives_each_case_against_the_sequential_pair() -> None:
    head, rule, *rows = table({"forward": 40.0, "fill": 0.2, "forward then fill": 41.0, "forward ‖ fill": 57.4})
    assert head == "| case | median ms | / forward then fill |" and rule.count("---") == 3
    assert rows == ["| forward | 40.00 | 0.976 |", "| fill | 0.20 | 0.005 |",
                    "| forward then fill | 41.00 | 1.000 |", "| forward ‖ fill | 57.40 | 1.400 |"]
