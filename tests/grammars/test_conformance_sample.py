"""Conformance on samples of the shared public suites (seconds), python-jsonschema as oracle.

Thresholds sit just under the rates measured on these samples (see
benchmarks/results/conformance.md for the full runs); a drop below them is a regression
in what the grammars enforce or accept.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from grammars import GrammarError, GrammarSpec
from grammars.spec import canonical_json

SUITE_FILES = ("type", "enum", "const", "properties", "required", "items", "prefixItems",
               "minLength", "maxLength", "minimum", "maximum", "anyOf", "pattern", "format",
               "additionalProperties", "minItems", "maxItems", "ref", "boolean_schema")
# ten schemas per JSONSchemaBench category: the first ones, minus those xgrammar needs
# seconds to compile (Github_easy 5, 6, 8, 11, 13; Github_medium 0, 6, 7)
BENCH_SAMPLE = {"Github_easy": [0, 1, 2, 3, 4, 7, 9, 10, 12, 14],
                "Github_medium": [1, 2, 3, 4, 5, 8, 9, 10, 11, 12],
                "Glaiveai2K": list(range(10)), "Kubernetes": list(range(10))}


def _accepts(compiled: Any, text: str) -> bool:
    matcher = compiled.matcher()
    return bool(matcher.accept_text(text) and matcher.can_stop())


def _spec(schema: Any) -> GrammarSpec:
    return GrammarSpec("json_schema", canonical_json(schema), (("strict", False),))


def test_json_schema_test_suite_sample(xgr_compiler, data_dir) -> None:  # type: ignore[no-untyped-def]
    base = data_dir / "json_schema_test_suite" / "tests" / "draft2020-12"
    schemas = compiled_n = tests = agree = 0
    for name in SUITE_FILES:
        for group in json.loads((base / f"{name}.json").read_text())[:3]:
            schemas += 1
            try:
                compiled = xgr_compiler.compile(_spec(group["schema"]))
            except GrammarError:
                continue
            compiled_n += 1
            for test in group["tests"]:
                tests += 1
                agree += _accepts(compiled, json.dumps(test["data"])) == test["valid"]
    print(f"suite sample: {compiled_n}/{schemas} compile, {agree}/{tests} agree")
    assert compiled_n / schemas >= SUITE_COMPILE_MIN, (compiled_n, schemas)
    assert agree / tests >= SUITE_AGREE_MIN, (agree, tests)


@pytest.mark.parametrize("category", ["Github_easy", "Github_medium", "Glaiveai2K",
                                      "Kubernetes"])
def test_jsonschemabench_sample(xgr_compiler, data_dir, category) -> None:  # type: ignore[no-untyped-def]
    lines = (data_dir / "jsonschemabench" / f"{category}.jsonl").read_text().splitlines()
    valid_n = valid_ok = invalid_n = invalid_ok = 0
    for index in BENCH_SAMPLE[category]:
        record = json.loads(lines[index])
        schema = record["schema"]
        try:
            compiled = xgr_compiler.compile(_spec(schema))
        except GrammarError:
            continue
        validator_cls = jsonschema.validators.validator_for(schema)
        validator = validator_cls(schema, format_checker=validator_cls.FORMAT_CHECKER)
        for test in record.get("tests", []):
            truth = validator.is_valid(test["data"])
            got = _accepts(compiled, json.dumps(test["data"]))
            valid_n += truth
            valid_ok += truth and got
            invalid_n += not truth
            invalid_ok += not truth and not got
    print(f"{category}: valid {valid_ok}/{valid_n}, invalid rejected {invalid_ok}/{invalid_n}")
    assert valid_ok / max(valid_n, 1) >= BENCH_VALID_MIN[category], (valid_ok, valid_n)
    assert invalid_ok / max(invalid_n, 1) >= BENCH_INVALID_MIN[category], (invalid_ok, invalid_n)


# measured 2026-11-29 (xgrammar 0.2.8, Qwen2.5): suite 45/50 compile, 148/194 agree; bench
# valid / invalid-rejected: easy 15/17, 33/33; medium 17/17, 28/31; glaive 10/10, 7/9;
# kubernetes 17/18, 33/33. With every format checker installed (the dev extra
# jsonschema[format-nongpl], 2026-12-01) medium reads 17/17, 28/32: one instance with a
# malformed format is now labelled invalid, and xgrammar does not check that format.
# With grammars.json.fold (2026-12-02) medium reads 14/16, 32/32: o17127's allOf / oneOf
# of required-only members is enforced (it compiled to any JSON value before), and its two
# valid instances write properties out of the schema's order, which the grammar fixes.
SUITE_COMPILE_MIN = 0.88
SUITE_AGREE_MIN = 0.74
BENCH_VALID_MIN = {"Github_easy": 0.85, "Github_medium": 0.85, "Glaiveai2K": 0.9,
                   "Kubernetes": 0.9}
BENCH_INVALID_MIN = {"Github_easy": 0.95, "Github_medium": 0.95, "Glaiveai2K": 0.75,
                     "Kubernetes": 0.95}
