"""benchmarks.schema_coverage: `--category` restricts which categories of a set are loaded;
`--compare` relabels with the installed oracle; a grammar that accepts what the oracle
refuses is counted loose."""

from __future__ import annotations

import collections
import json
import pathlib
from typing import Any

import pytest

from benchmarks import schema_coverage


def test_load_set_keeps_only_the_named_categories(tmp_path: pathlib.Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bench").mkdir()
    for name in ("Alpha", "Beta", "Gamma"):
        record = {"schema": {"type": "string"}, "tests": [{"data": name}]}
        (tmp_path / "bench" / f"{name}.jsonl").write_text(json.dumps(record) + "\n")
    monkeypatch.setattr(schema_coverage, "DATA", tmp_path)
    assert list(schema_coverage.load_set("bench", None)) == ["Alpha", "Beta", "Gamma"]
    assert list(schema_coverage.load_set("bench", None, ["Gamma", "Alpha"])) == ["Alpha", "Gamma"]


def test_compare_relabels_both_runs_with_the_installed_oracle(tmp_path: pathlib.Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A run stored while rfc3339-validator was missing labelled a bad date-time valid;
    `--compare` labels every paired instance afresh, so it counts as invalid in both columns."""
    (tmp_path / "bench").mkdir()
    record = {"schema": {"type": "string", "format": "date-time"},
              "tests": [{"data": "2013-11-01T12:00:00"}, {"data": "2013-11-01T12:00:00Z"}]}
    (tmp_path / "bench" / "Cat.jsonl").write_text(json.dumps(record) + "\n")
    monkeypatch.setattr(schema_coverage, "DATA", tmp_path)
    stale = [[0, 0, True, True, "x"], [0, 1, True, True, "x"]]  # both "valid", as stored
    runs = []
    for name, verdicts in (("base", stale), ("other", [[0, 0, True, False, "y"],
                                                        [0, 1, True, True, "y"]])):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({f"{name}|bench|Cat": {"verdicts": verdicts}}))
        runs.append(str(path))
    text = schema_coverage.paired(*runs)
    assert "(1 instances labelled otherwise" in text
    row = next(line for line in text.splitlines() if line.startswith("| bench/Cat"))
    # valid 1 (both accept), invalid 1: base accepted it, other rejected it
    assert row.split(" | ")[1:] == ["1", "1", "1", "0 (?)", "1", "0", "1 |"]  # no `loose` stored


class _AnyText:
    """A compiled grammar that accepts every text (what a backend that drops a schema makes)."""

    backend = "any"

    def matcher(self) -> _AnyText:
        return self

    def accept_text(self, text: str) -> bool:
        return True

    def can_stop(self) -> bool:
        return True


class _Compiler:
    def __init__(self, compiled: object) -> None:
        self.compiled = compiled

    def clear_cache(self) -> None:
        pass

    def compile(self, spec: object) -> object:
        return self.compiled


def test_a_grammar_accepting_what_the_oracle_refuses_is_loose(qwen_tokenizer) -> None:  # type: ignore[no-untyped-def]
    from grammars import GrammarCompiler

    records: list[dict[str, Any]] = [
        {"schema": {"type": "object", "properties": {"a": {"type": "integer"}},
                    "required": ["a"]}, "tests": [{"data": {"a": 1}}]},
        {"schema": {}, "tests": [{"data": [1]}]}]  # `{}` admits every probe: not loose
    stats = collections.defaultdict(collections.Counter)  # type: ignore[var-annotated]
    assert schema_coverage.measure(_Compiler(_AnyText()), records, stats)["loose"] == [0]
    llguidance = GrammarCompiler(qwen_tokenizer, backend="llguidance")
    assert schema_coverage.measure(llguidance, records[:1], stats)["loose"] == []
