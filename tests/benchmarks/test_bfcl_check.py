"""BFCL's AST check on hand-made cases: right and wrong name, allowed and disallowed values,
optional arguments omitted only where `""` allows, extra arguments, types, parallel calls in
any order, irrelevance; and on the real data: every ground truth, written as calls, passes
(except the few whose ground truth contradicts its own function spec). No model."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from benchmarks.suite.bfcl_check import category_kind, check_answer, standardise

AREA = {"name": "geo.area", "parameters": {"type": "dict", "properties": {
    "base": {"type": "integer"}, "height": {"type": "float"}, "unit": {"type": "string"},
    "flags": {"type": "array", "items": {"type": "string"}},
    "opts": {"type": "dict", "properties": {"mode": {"type": "string"}, "n": {"type": "integer"}}},
    "exact": {"type": "boolean"}}, "required": ["base", "height"]}}
PING = {"name": "ping", "parameters": {"type": "dict", "properties": {"host": {"type": "string"}},
                                       "required": ["host"]}}
FUNCTIONS = [AREA, PING]
AREA_ANSWER = {"geo.area": {"base": [10], "height": [5.0], "unit": ["cm", ""], "flags": [["a", "b"], ""],
                            "opts": [{"mode": ["fast"], "n": [3, ""]}, ""], "exact": [True, ""]}}


def _simple(arguments: dict[str, Any], name: str = "geo_area") -> tuple[bool, str]:
    verdict = check_answer("simple_python", FUNCTIONS, [(name, arguments)], [AREA_ANSWER])
    return verdict.ok, verdict.reason


def test_right_call_with_the_openai_spelling_of_the_name() -> None:
    assert _simple({"base": 10, "height": 5.0}) == (True, "")
    assert _simple({"base": 10, "height": 5})[0]  # float takes an integer
    assert not _simple({"base": 10, "height": 5.0}, name="geo.area")[0]
    assert not check_answer("simple_python", FUNCTIONS, [("geo_area", None)], [AREA_ANSWER]).ok  # unparsable
    assert not check_answer("simple_python", FUNCTIONS, [("geo_area", [10, 5.0])], [AREA_ANSWER]).ok  # dotted name is not the tool's
    ok, reason = _simple({"base": 10, "height": 5.0}, name="ping")
    assert not ok and "geo_area" in reason


def test_values_must_be_allowed_and_typed() -> None:
    assert not _simple({"base": 11, "height": 5.0})[0]
    assert not _simple({"base": 10.0, "height": 5.0})[0]  # 10.0 is not an integer
    assert not _simple({"base": True, "height": 5.0})[0]  # a bool is never an integer
    assert not _simple({"base": "10", "height": 5.0})[0]
    assert not _simple({"base": 10, "height": 5.0, "exact": 1})[0]
    assert _simple({"base": 10, "height": 5.0, "exact": True})[0]
    assert not _simple({"base": 10, "height": 5.0, "exact": False})[0]


def test_strings_compare_after_standardisation() -> None:
    assert _simple({"base": 10, "height": 5.0, "unit": " C.M "})[0]
    assert not _simple({"base": 10, "height": 5.0, "unit": "mm"})[0]
    assert standardise("April 1, 2024") == standardise("april 1 2024") == "april12024"
    assert standardise("it's") == 'it"s'


def test_lists_and_dicts() -> None:
    assert _simple({"base": 10, "height": 5.0, "flags": ["A", "b"]})[0]
    assert not _simple({"base": 10, "height": 5.0, "flags": ["b", "a"]})[0]  # order matters in a list
    assert not _simple({"base": 10, "height": 5.0, "flags": ["a", 2]})[0]  # item type
    assert _simple({"base": 10, "height": 5.0, "opts": {"mode": "fast"}})[0]  # n may be omitted
    assert _simple({"base": 10, "height": 5.0, "opts": {"mode": "Fast", "n": 3}})[0]
    assert not _simple({"base": 10, "height": 5.0, "opts": {"n": 3}})[0]  # mode may not
    assert not _simple({"base": 10, "height": 5.0, "opts": {"mode": "fast", "x": 1}})[0]


def test_optional_omitted_only_where_allowed() -> None:
    assert not _simple({"height": 5.0})[0]  # required
    answer = {"geo.area": {"base": [10], "height": [5.0], "unit": ["cm"]}}  # unit must be given here
    verdict = check_answer("simple_python", FUNCTIONS, [("geo_area", {"base": 10, "height": 5.0})], [answer])
    assert not verdict.ok and "unit" in verdict.reason


def test_extra_arguments_are_wrong() -> None:
    ok, reason = _simple({"base": 10, "height": 5.0, "colour": "red"})
    assert not ok and "colour" in reason
    # a real parameter that the possible answer does not list is extra as well
    answer = {"geo.area": {"base": [10], "height": [5.0]}}
    verdict = check_answer("simple_python", FUNCTIONS, [("geo_area", {"base": 10, "height": 5.0, "unit": "cm"})],
                           [answer])
    assert not verdict.ok


def test_simple_and_multiple_need_exactly_one_call() -> None:
    call = ("geo_area", {"base": 10, "height": 5.0})
    assert check_answer("live_multiple", FUNCTIONS, [call], [AREA_ANSWER]).ok
    assert not check_answer("live_multiple", FUNCTIONS, [call, call], [AREA_ANSWER]).ok
    assert not check_answer("simple_python", FUNCTIONS, [], [AREA_ANSWER]).ok


def test_parallel_calls_in_any_order() -> None:
    ping = {"ping": {"host": ["a.org", "a.com"]}}
    calls = [("ping", {"host": "A.org"}), ("geo_area", {"base": 10, "height": 5.0})]
    assert check_answer("parallel_multiple", FUNCTIONS, calls, [AREA_ANSWER, ping]).ok
    assert check_answer("parallel_multiple", FUNCTIONS, calls[::-1], [AREA_ANSWER, ping]).ok
    assert not check_answer("parallel_multiple", FUNCTIONS, calls[:1], [AREA_ANSWER, ping]).ok
    # two expected calls of one function need two distinct matching calls
    two = [{"ping": {"host": ["a.org"]}}, {"ping": {"host": ["b.org"]}}]
    assert check_answer("parallel", FUNCTIONS, [("ping", {"host": "b.org"}), ("ping", {"host": "a.org"})], two).ok
    assert not check_answer("parallel", FUNCTIONS, [("ping", {"host": "a.org"}), ("ping", {"host": "a.org"})], two).ok
    same = [{"ping": {"host": ["a.org"]}}, {"ping": {"host": ["a.org"]}}]
    assert not check_answer("parallel", FUNCTIONS, [("ping", {"host": "a.org"}), ("ping", {"host": "b.org"})], same).ok
    extra = [*calls, ("ping", {"host": "a.org"})]  # one call too many
    assert not check_answer("parallel_multiple", FUNCTIONS, extra, [AREA_ANSWER, ping]).ok


def test_irrelevance_is_right_without_a_call() -> None:
    assert category_kind("irrelevance_part1") == "irrelevance"
    assert check_answer("irrelevance_part1", FUNCTIONS, [], None).ok
    assert not check_answer("irrelevance_part1", FUNCTIONS, [("ping", {"host": "x"})], None).ok
    with pytest.raises(ValueError):
        check_answer("simple_python", FUNCTIONS, [], None)


def _first_allowed(values: list[Any]) -> Any:
    value = next(v for v in values if v != "")
    one_level = lambda d: {k: next(x for x in w if x != "") for k, w in d.items() if any(x != "" for x in w)}  # noqa: E731
    if isinstance(value, dict):
        return one_level(value)
    if isinstance(value, list) and value and all(isinstance(d, dict) for d in value):
        return [one_level(d) for d in value]
    return value


# ground truths that contradict their own function spec (a parameter the spec lacks, or a
# required parameter the answer omits): no call can pass them, in BFCL's checker either
CONTRADICTORY = {"live_multiple_507-149-4", "live_multiple_862-181-3", "live_multiple_964-207-0",
                 "parallel_multiple_12", "parallel_multiple_26"}


@pytest.mark.parametrize("category", ["simple_python", "live_multiple", "parallel_multiple"])
def test_every_ground_truth_passes_as_calls(data_dir: pathlib.Path, category: str) -> None:
    from benchmarks.suite.bfcl import openai_tool_name

    folder = data_dir / "bfcl"
    answers = {row["id"]: row["ground_truth"] for row in map(json.loads, (folder / "possible_answer" /
                                                                           f"BFCL_v4_{category}.json").open())}
    failed = set()
    for question in map(json.loads, (folder / f"BFCL_v4_{category}.json").open()):
        truth = answers[question["id"]]
        calls = [(openai_tool_name(name), {k: _first_allowed(v) for k, v in allowed.items() if any(x != "" for x in v)})
                 for expected in reversed(truth) for name, allowed in expected.items()]
        if not check_answer(category, question["function"], calls, truth).ok:
            failed.add(question["id"])
        elif calls and calls[0][1]:  # and a changed value fails it
            name, arguments = calls[0]
            key = next(iter(arguments))
            broken = [(name, {**arguments, key: "\u2603 not an allowed value"}), *calls[1:]]
            assert not check_answer(category, question["function"], broken, truth).ok, question["id"]
    assert failed == {q for q in CONTRADICTORY if q.startswith(category)}
