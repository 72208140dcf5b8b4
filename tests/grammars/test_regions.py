"""Output regions (`grammars.regions`): each token of real answers, read with the Qwen2.5
tokenizer, lands in the region it starts in."""

from __future__ import annotations

from typing import Any

from grammars.regions import REGIONS, RegionScanner, region_kind


def _regions(tokenizer: Any, kind: Any, text: str) -> list[tuple[str, str]]:
    scanner = RegionScanner(kind)
    out = []
    for token in tokenizer.encode(text):
        piece = tokenizer.decode([token])
        out.append((piece, scanner.region_of(piece)))
        scanner.feed(piece)
    return out


def test_json_tool_call_regions(qwen_tokenizer: Any) -> None:
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par\\"is", "n": -12.5, "ok": true}}'
    got = dict(_regions(qwen_tokenizer, "json", text))
    assert got["<tool_call>"] == "text"
    assert got["name"] == got["arguments"] == got["city"] == "key"
    assert got["get"] == got["_weather"] == "string"
    assert got["1"] == got["2"] == "number" and got[" true"] == "structure"
    assert all(region in REGIONS for _, region in _regions(qwen_tokenizer, "json", text))


def test_sql_regions(qwen_tokenizer: Any) -> None:
    text = "SELECT COUNT(*) FROM singer AS s WHERE s.age > 30 AND name = 'Ann Lee' GROUP BY \"Low Grade\""
    got = _regions(qwen_tokenizer, "sql", text)
    regions = dict(got)
    assert regions["SELECT"] == regions[" FROM"] == regions[" WHERE"] == regions[" GROUP"] == "keyword"
    assert regions[" singer"] == regions[" name"] == regions["Low"] == "identifier"
    assert regions["Ann"] == regions["3"] == "literal"
    assert regions[" >"] == regions[" ="] == "structure"


def test_region_kind_by_family() -> None:
    assert region_kind("json_schema") == region_kind("tools:required") == "json"
    assert region_kind("sql_schema:sqlite") == "sql"
    assert region_kind("regex") == region_kind("") == "text"
    assert RegionScanner("text").region_of("{") == "text"
