"""Keywords llguidance would intersect with a `$ref`, resolved before it sees them.

llguidance compiles a keyword beside a `$ref` or beside `anyOf` / `oneOf` branches, and a
listed property that a `patternProperties` pattern also matches, by intersecting the two
schemas at compile time. It cannot when a `$ref` there is still being defined: a recursive
schema with such a sibling is refused ("circular references with sibling keys"), and auto
falls back to xgrammar. Four WashingtonPost schemas of the real-world set (`{"type":
"object", "anyOf": [{"$ref": …}, …]}` everywhere, and content types that list `basic`,
`redirect`, `by`, … beside a `.*` pattern whose schema reaches the recursive
`content_json`) took 20-23 s there, looser (xgrammar ignores a pattern's schema for listed
names); one Github_ultra schema writes `{"type": "object", "$ref": "#/definitions/Spec"}`
inside Spec, whose target has no `type`.

Contract: `resolve_ref_siblings(schema)` takes the schema as the llguidance backend sends it
(closed by grammars.backends.llguidance.closure) and returns a copy (the input is not modified) where,
exactly:
- beside a `$ref`, `anyOf` or `oneOf`, `additionalProperties: true` (the default) is
  deleted, and so is a `type` that the `$ref`'s target or every branch of an `anyOf` /
  `oneOf` already has within it (through `$ref`-only chains);
- a `$ref` still beside other keywords becomes a `$ref` to a new definition
  (`sg_conjunction_N` under the root's `$defs` / `definitions`): the conjunction of the
  keywords and the target (grammars.json.fold.conjunction), one per distinct pair, where
  such `$ref`s are replaced in turn, so a recursive target refers to its new definition
  (the indirection llguidance's `intersect_ref` lacks);
- for each object schema with `properties` and `patternProperties` and each listed name
  exactly one pattern matches (Python `re.search`):
  - the pattern matches every string (a search that matches the empty string with no `$`
    or other assertion: `.*`, `^[a-z_]*`): the listed schema becomes L∧P, computed here by
    the same conjunction (`$ref`s inlined where needed; `false` where no value satisfies
    both), and the pattern is rewritten to match every string but the names so handled (a
    lookaround-free regex), so llguidance intersects nothing for them. The keys the
    pattern admits do not change: llguidance keeps listed names out of pattern keys;
  - otherwise, when P and L are the same schema up to annotations, L becomes `{}`:
    llguidance intersects `{}` with P, which resolves no `$ref`, and gets P, that is L.
    Only for patterns of printable ASCII with no backslash and names of printable ASCII,
    read alike by Python and llguidance (`.` differs on `\\r` and U+2028);
  - a pattern schema that is `{}` / `true` needs nothing.
Anything else is left as written. Skipped: schemas with no `$ref` or with a nested `$id` /
`id` (their `$ref`s resolve against it), schemas a `$ref` points inside, conjunctions
larger than json_fold's MAX_GROWTH bound, and past _MAX_DEFINED new definitions.
Invariant: the result admits exactly what the input admits (tests/grammars/
test_json_ref_siblings.py, against python-jsonschema and through llguidance).
Measured (benchmarks.schema_coverage, llguidance): 1,038 → 1,043 of 1,050 real-world schemas
compile (WashingtonPost 21 → 25 of 25, Github_ultra 24 → 25), every verdict unchanged.

Knows nothing of backends, tokenizers or compilation.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

from grammars.json.fold import MAX_GROWTH, conjunction
from grammars.json.policy import ANNOTATIONS, iter_subschemas, resolve_ref

_ASSERTIONS = re.compile(r"\$|\\[bBZzAG]|\(\?[=!<]")
_REF = re.compile(r'"\$ref":\s*"(#[^"]*)"')
_MAX_DEFINED = 64  # new definitions (and passes) at most
_KEPT = ("$defs", "definitions", "$schema", "$id", "id")  # a schema replaced by a `$ref` keeps them
_PLAIN = re.compile(r"[\x20-\x7e]*")  # printable ASCII: Python and llguidance read it alike


def resolve_ref_siblings(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    text = json.dumps(schema)
    root = json.loads(text)
    if '"$ref"' not in text or any(
            isinstance(sub.get(key), str) for pointer, sub in iter_subschemas(root)
            if pointer for key in ("$id", "id")):
        return root
    targets = [urllib.parse.unquote(ref[1:]) for ref in set(_REF.findall(text))]
    for _, sub in list(iter_subschemas(root)):
        _drop_no_op_siblings(root, sub)
    _define_ref_conjunctions(root, targets)
    for pointer, sub in list(iter_subschemas(root)):
        listed, patterns = sub.get("properties"), sub.get("patternProperties")
        if (isinstance(listed, dict) and isinstance(patterns, dict) and patterns
                and not any(target.startswith(f"{pointer}/{key}/") for target in targets
                            for key in ("properties", "patternProperties"))):
            _separate(root, listed, patterns)
    return root


def _drop_no_op_siblings(root: dict[str, Any], sub: dict[str, Any]) -> None:
    """Delete what beside a `$ref` / `anyOf` / `oneOf` constrains nothing more. Not beside
    `allOf`: grammars.backends.llguidance.object_rules reads an object's members through it, and needs
    the parent's `type`."""
    if not any(key in sub for key in ("$ref", "anyOf", "oneOf")):
        return
    if sub.get("additionalProperties") is True:
        del sub["additionalProperties"]  # the default: constrains nothing
    within = _types(sub.get("type"))
    if within is None:
        return

    def implies(member: Any) -> bool:
        target = _target(root, member)
        kinds = _types(target.get("type")) if isinstance(target, dict) else None
        return kinds is not None and kinds <= within

    branch_lists = [sub[key] for key in ("anyOf", "oneOf") if isinstance(sub.get(key), list)]
    if ("$ref" in sub and implies({"$ref": sub["$ref"]})) or any(
            branches and all(implies(branch) for branch in branches)
            for branches in branch_lists):
        del sub["type"]


def _define_ref_conjunctions(root: dict[str, Any], targets: list[str]) -> None:
    """Replace each `{"$ref": R, …keywords}` by a `$ref` to a new definition, the
    conjunction of the keywords and R's target (grammars.json.fold.conjunction), one per
    distinct (R, keywords), its own such `$ref`s replaced in turn (a recursive target then
    refers to its new definition: the indirection llguidance's `intersect_ref` lacks).
    Left as written where a conjunction is not exact, grows past the MAX_GROWTH bound, or
    a `$ref` points inside."""
    home_key = "$defs" if "$defs" in root or "definitions" not in root else "definitions"
    home = root.get(home_key, {})
    if not isinstance(home, dict):
        return
    made: dict[tuple[str, str], str | None] = {}
    for _ in range(_MAX_DEFINED):
        changed = False
        for pointer, sub in list(iter_subschemas(root)):
            kept = {key: sub[key] for key in _KEPT if key in sub}
            rest = {key: value for key, value in sub.items() if key not in kept and key != "$ref"}
            ref = sub.get("$ref")
            if not isinstance(ref, str) or not set(rest) - ANNOTATIONS or any(
                    target.startswith(f"{pointer}/") and target.split("/")[
                        pointer.count("/") + 1] not in _KEPT for target in targets):
                continue  # (a `$ref` into what the schema keeps is fine)
            key = (ref, json.dumps(rest, sort_keys=True))
            if key not in made:
                merged = conjunction(root, rest, {"$ref": ref})
                fits = isinstance(merged, dict) and len(made) < _MAX_DEFINED and len(
                    json.dumps(merged)) <= MAX_GROWTH * len(json.dumps(resolve_ref(root, ref)))
                name = f"sg_conjunction_{len(made)}"
                made[key] = None
                if fits and "$ref" not in merged and name not in home:
                    home[name] = merged
                    root[home_key] = home  # made when the first definition is
                    made[key] = f"#/{home_key}/{name}"
            if made[key] is not None:
                sub.clear()
                sub.update(kept, **{"$ref": made[key]})
                changed = True
        if not changed:
            return


def _types(kind: Any) -> set[str] | None:
    """The JSON types a `type` keyword admits (`number` includes `integer`); None if absent."""
    names = kind if isinstance(kind, list) else [kind]
    if not names or not all(isinstance(name, str) for name in names):
        return None
    out = set(names)
    return out | {"integer"} if "number" in out else out


def _target(root: dict[str, Any], schema: Any) -> Any:
    """`schema` through `$ref`-only chains (annotations aside); None on a cycle."""
    seen = set()
    while isinstance(schema, dict) and set(schema) - ANNOTATIONS == {"$ref"}:
        ref = schema["$ref"]
        if not isinstance(ref, str) or ref in seen:
            return None
        seen.add(ref)
        schema = resolve_ref(root, ref)
    return schema


def _separate(root: dict[str, Any], listed: dict[str, Any],
              patterns: dict[str, Any]) -> None:
    """Rewrite one object's `properties` / `patternProperties` in place."""
    compiled = {}
    for pattern in patterns:
        try:
            compiled[pattern] = re.compile(pattern)
        except (re.error, TypeError):
            return  # Python reads this pattern otherwise than llguidance: leave the object
    excluded: dict[str, list[str]] = {}
    for name, own in listed.items():
        matching = [p for p, regex in compiled.items() if regex.search(name)]
        if len(matching) != 1 or _strip(patterns[matching[0]]) in ({}, True):
            continue
        pattern, other = matching[0], patterns[matching[0]]
        if _matches_everything(pattern, compiled[pattern]):
            merged = conjunction(root, own, other)  # False: the name admits no value
            if merged is None or len(json.dumps(merged)) > MAX_GROWTH * (
                    len(json.dumps(own)) + len(json.dumps(other))) + 4096:
                continue
            listed[name] = merged
            excluded.setdefault(pattern, []).append(name)
        elif (_PLAIN.fullmatch(pattern) and _PLAIN.fullmatch(name) and "\\" not in pattern
              and _strip(own) == _strip(other)):
            listed[name] = {}
    if excluded:
        renamed = {_other_than(excluded[p]) if p in excluded else p: value
                   for p, value in patterns.items()}
        patterns.clear()
        patterns.update(renamed)


def _matches_everything(pattern: str, regex: re.Pattern[str]) -> bool:
    """A search that matches the empty string at the start, with no `$` / `\\b` /
    lookaround to fail elsewhere, matches every string (at its start)."""
    return regex.match("") is not None and not _ASSERTIONS.search(pattern)


def _other_than(names: list[str]) -> str:
    """A regex (no lookaround) that matches exactly the strings that are none of `names`."""
    return "^(?:" + _complement(set(names)) + ")$"


def _complement(suffixes: set[str]) -> str:
    """Alternatives for the strings not in `suffixes`: a listed prefix then a complement of
    what may follow it, or a first character no name has there."""
    firsts = sorted({suffix[0] for suffix in suffixes if suffix})
    branches = [_escape(char) + "(?:" + _complement(
        {suffix[1:] for suffix in suffixes if suffix and suffix[0] == char}) + ")"
        for char in firsts]
    others = "".join(_class_escape(char) for char in firsts)
    branches.append((f"[^{others}]" if others else r"[\s\S]") + r"[\s\S]*")
    body = "|".join(branches)
    return body if "" in suffixes else f"(?:{body})?"


def _escape(char: str) -> str:
    return "\\" + char if char in "\\.^$|?*+()[]{}" else char


def _class_escape(char: str) -> str:
    return "\\" + char if char in "\\]^-[" else char


def _strip(schema: Any) -> Any:
    """`schema` without annotations (title, description, …), at every level."""
    if isinstance(schema, dict):
        return {key: _strip(value) for key, value in schema.items() if key not in ANNOTATIONS}
    if isinstance(schema, list):
        return [_strip(value) for value in schema]
    return schema
