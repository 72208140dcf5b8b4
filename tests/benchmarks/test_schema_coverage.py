"""benchmarks.schema_coverage: `--category` restricts which categories of a set are loaded."""

from __future__ import annotations

import json
import pathlib

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
