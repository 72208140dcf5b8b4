"""Combinators folded into plain schemas, for xgrammar, which otherwise drops the schema.

xgrammar 0.2.8 compiles a schema holding `anyOf` / `oneOf` from its branches alone: the
schema's own `type`, `properties`, `required`, … are dropped, and a branch without `type`
admits any JSON value. An `allOf` of two or more members compiles to any JSON value. Real
schemas use these shapes all the time (`{"type": "object", "properties": {…}, "oneOf":
[{"required": ["radius"]}, {"required": ["length", "width"]}]}`, `allOf: [{"required":
[…]}, {"oneOf": […]}]`), and each compiled to *any value* on the xgrammar backend, strict
mode included, which is what the vLLM engine and auto's fallback use.

Contract: `fold_combinators(schema)` returns a copy (the input is not modified) where,
wherever it can be done exactly:
- an `allOf`'s members are merged into the schema that holds them;
- an `anyOf` / `oneOf` beside other keywords becomes an `anyOf` whose branches are those
  keywords merged with each branch (a branch the merge makes unsatisfiable, such as
  `{"type": "null"}` under `"type": "object"`, is dropped); `oneOf` stays `anyOf`
  (grammars.json.policy rule 2); two of them on one schema become their cross product.
A member or branch that is a local `$ref` is merged as its target. Merging two schemas
(`merge`) is their conjunction: `type`s intersect (`integer` within `number`), `enum` /
`const` values intersect, `required` names unite, lower bounds take the larger and upper
bounds the smaller, `properties` merge name by name (a name one side lists and the other
does not meets the other's `additionalProperties`, absent meaning any), `items` merge; a
keyword only one side has is kept. Keywords the backend ignores anyway (grammars.json.policy
UNENFORCED) and annotations are kept from the first side that has them.
Not folded (left exactly as written, so as loose as before): conflicting `pattern` /
`format` / `multipleOf` / `prefixItems` / `propertyNames`, `patternProperties` on either
side, a recursive `$ref`, a `$ref` beside other keywords on the same schema, draft-4
boolean `exclusiveMinimum` / `exclusiveMaximum` meeting a bound, more than MAX_BRANCHES
branches, a schema where a `$ref` points below a schema holding a combinator (other than into
its `$defs` / `definitions`: `"#/properties/x"` beside a root `anyOf`, whose `properties`
move into the branches), a nested `$id` / draft-4 `id` (its `$ref`s resolve against it),
merges nested deeper than MAX_DEPTH (two recursive schemas), or a result more than
MAX_GROWTH times the input's size.
`conjunction(root, a, b)` is the same merge made exact for every backend (llguidance
enforces some keywords xgrammar ignores): two different values of an UNENFORCED keyword, or
an `unevaluated*` keyword, leave it undone (None); False where nothing satisfies both
(used by grammars.backends.llguidance.ref_siblings).
Invariant: where a fold happens the result admits exactly what the input admits (2020-12
semantics, `oneOf` read as `anyOf`; where both sides of a merge hold one of the UNENFORCED
keywords, which the backend ignores, only the first side's is kept). The listed-properties
policy (rule 1) then applies to the result, so a name listed on any merged member counts as
listed, as on llguidance (grammars.backends.llguidance.closure). Tested against python-jsonschema on fixed
and generated instances and on every JSONSchemaBench schema the fold changes.
Measured (benchmarks.schema_coverage, xgrammar backend, six categories of real-world
schemas): schemas whose grammar admits a value of another shape the schema refuses 40 → 0,
invalid instances rejected 1,282 → 1,355 of 1,376, valid accepted 769 → 751 of 864 (the 18
lost were accepted only by admitting anything: 8 write properties out of the schema's
order, which xgrammar fixes; 10 are object constants, which xgrammar spells one way).

Knows nothing of backends, tokenizers or compilation.
"""

from __future__ import annotations

import json
import re
from typing import Any

from grammars.json.policy import (
    ANNOTATIONS,
    SCHEMA_LISTS,
    SCHEMA_MAPS,
    SCHEMA_SINGLE,
    UNENFORCED,
    iter_subschemas,
    ref_steps,
    resolve_ref,
)

MAX_BRANCHES = 64
MAX_GROWTH = 8
MAX_DEPTH = 32

_LOWER = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties",
          "minContains")
_UPPER = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties",
          "maxContains")
_BRANCH_KEYS = ("anyOf", "oneOf")
# kept from the first side: nothing the xgrammar grammar enforces depends on them
_PASSIVE = (ANNOTATIONS | UNENFORCED) - {"allOf", "anyOf", "oneOf"}
_SIBLING_READERS = ("unevaluatedProperties", "unevaluatedItems")
_REF = re.compile(r'"\$ref":\s*"(#[^"]*)"')


class _CannotFold(Exception):
    """The schema at hand is left as written."""


def fold_combinators(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    text = json.dumps(schema)
    root = json.loads(text)
    refs = set(_REF.findall(text))
    if not all(_outside_folds(root, ref) for ref in refs) or any(
            isinstance(sub.get(key), str) for pointer, sub in iter_subschemas(root)
            if pointer for key in ("$id", "id")):  # a nested base URI: its `$ref`s resolve
        return root                                 # against it, not against the root
    folded = _Folder(root).fold(root)
    if len(json.dumps(folded)) > MAX_GROWTH * len(text) + 4096 or any(
            resolve_ref(folded, ref) is None for ref in refs):
        return root
    return folded


def _outside_folds(root: Any, ref: str) -> bool:
    """Whether the `$ref` target keeps its meaning after folding: the path passes no schema
    holding a combinator, except into its `$defs` / `definitions` (kept as they are)."""
    found = ref_steps(root, ref)
    return found is None or not any(  # None: unresolved either way, the backend reports it
        isinstance(node, dict) and any(key in node for key in ("allOf", *_BRANCH_KEYS))
        and part not in ("$defs", "definitions") for node, part in found[0])


def conjunction(root: dict[str, Any], a: Any, b: Any) -> Any:
    """`a` and `b` (subschemas of `root`: their `$ref`s resolve against it) merged into one
    schema admitting exactly what both admit, for every backend: unlike the fold, a keyword
    the xgrammar backend ignores (UNENFORCED) that both sides hold with different values
    leaves it undone. False when nothing satisfies both; None where it cannot be done."""
    try:
        return _Folder(root, exact=True).merge(a, b)
    except _Unsatisfiable:
        return False
    except _CannotFold:
        return None


class _Folder:
    def __init__(self, root: dict[str, Any], *, exact: bool = False) -> None:
        self.root = root
        self.exact = exact  # UNENFORCED keywords count: both sides' must agree
        self.stack: list[str] = []
        self.targets: dict[str, Any] = {}
        self.depth = 0

    def fold(self, node: Any) -> Any:
        """`node` with its children folded, then its own combinators (when it can)."""
        if not isinstance(node, dict):
            return node
        out = dict(node)
        for key in SCHEMA_MAPS:
            if isinstance(out.get(key), dict):
                out[key] = {name: self.fold(sub) for name, sub in out[key].items()}
        for key in SCHEMA_LISTS:
            if isinstance(out.get(key), list):
                out[key] = [self.fold(sub) for sub in out[key]]
        for key in SCHEMA_SINGLE:
            if isinstance(out.get(key), dict):
                out[key] = self.fold(out[key])
            elif key == "items" and isinstance(out.get(key), list):
                out[key] = [self.fold(sub) for sub in out[key]]
        if not any(key in out for key in ("allOf", *_BRANCH_KEYS)):
            return out
        try:
            return self._own_combinators(out)
        except _CannotFold:
            return out

    def _own_combinators(self, node: dict[str, Any]) -> Any:
        if "$ref" in node:
            raise _CannotFold
        members = node.get("allOf", [])
        if not isinstance(members, list) or ("allOf" in node and not members):
            raise _CannotFold
        keep = {key: node[key] for key in ("$schema", "$id", "id", "$defs", "definitions",
                                            "title", "description") if key in node}
        base = {key: value for key, value in node.items()
                if key not in keep and key != "allOf"}
        if not members and not (set(base) - set(_BRANCH_KEYS) - _PASSIVE):
            return node  # branches alone: xgrammar compiles them as they are
        result: Any = base
        for member in members:
            result = self.merge(result, self.target(member))
        if not members:  # own keywords beside anyOf / oneOf: merged into each branch
            result = self.merge({k: v for k, v in base.items() if k not in _BRANCH_KEYS},
                                {k: v for k, v in base.items() if k in _BRANCH_KEYS})
        if result is False:
            raise _CannotFold  # unsatisfiable as written: leave it to the backend
        return {**keep, **result}

    def target(self, member: Any) -> Any:
        """A member with a local `$ref` replaced by its (folded) target."""
        if not isinstance(member, dict) or "$ref" not in member:
            return member
        ref = member["$ref"]
        if set(member) - {"$ref"} - _PASSIVE or ref in self.stack:
            raise _CannotFold
        if ref not in self.targets:
            target = resolve_ref(self.root, ref)
            if target is None:
                raise _CannotFold
            self.stack.append(ref)
            try:
                self.targets[ref] = self.fold(target)
            finally:
                self.stack.pop()
        folded = self.targets[ref]
        if isinstance(folded, dict) and ("allOf" in folded or "$ref" in folded):
            raise _CannotFold  # its own fold failed (a cycle, a conflict): nothing to merge
        return folded

    def merge(self, a: Any, b: Any) -> Any:
        """The conjunction of two folded schemas (raises _CannotFold where not exact)."""
        if a is True or b is False or a == b:
            return b
        if b is True or a is False:
            return a
        if not isinstance(a, dict) or not isinstance(b, dict) or self.depth >= MAX_DEPTH:
            raise _CannotFold  # too deep: two recursive schemas merged level after level
        self.depth += 1
        try:
            return self._merge(a, b)
        finally:
            self.depth -= 1

    def _merge(self, a: dict[str, Any], b: dict[str, Any]) -> Any:
        a, b = self._flatten(a), self._flatten(b)
        branches_a = _branches(a)
        branches_b = _branches(b)
        plain = self._merge_plain({k: v for k, v in a.items() if k not in _BRANCH_KEYS},
                                  {k: v for k, v in b.items() if k not in _BRANCH_KEYS})
        if branches_a is None and branches_b is None:
            return plain
        combos = [[x, y] for x in (branches_a or [True]) for y in (branches_b or [True])]
        if len(combos) > MAX_BRANCHES:
            raise _CannotFold
        out = []
        for x, y in combos:
            try:
                merged = self.merge(self.merge(plain, self.target(x)), self.target(y))
            except _Unsatisfiable:
                continue
            if merged is not False:
                out.append(merged)
        if not out:
            return False
        return out[0] if len(out) == 1 else {"anyOf": out}

    def _flatten(self, schema: dict[str, Any]) -> dict[str, Any]:
        """`schema` without `allOf` / `$ref` of its own (raises _CannotFold if it keeps one)."""
        if "$ref" in schema:
            folded = self.target(schema)
        elif "allOf" not in schema:
            return schema  # children are folded already
        else:
            folded = self.fold(schema)
        if not isinstance(folded, dict) or "allOf" in folded or "$ref" in folded:
            raise _CannotFold
        return folded

    def _merge_plain(self, a: dict[str, Any], b: dict[str, Any]) -> Any:
        if self.exact and any(key in side for side in (a, b) for key in _SIBLING_READERS):
            raise _CannotFold  # what they admit depends on the keywords beside them
        out = dict(a)
        for key, value in b.items():
            if key not in out:
                out[key] = value
            elif out[key] == value or (key in _PASSIVE and not (self.exact and key
                                                               not in ANNOTATIONS)):
                continue
            elif key in _PASSIVE:
                raise _CannotFold  # exact: one key cannot hold both sides' values
            elif key == "type":
                out[key] = _types(out[key], value)
            elif key in ("enum", "const"):
                continue  # intersected below
            elif key == "required":
                out[key] = list(dict.fromkeys([*out[key], *value]))
            elif key in _LOWER or key in _UPPER:
                if isinstance(value, bool) or isinstance(out[key], bool):
                    raise _CannotFold
                out[key] = max(out[key], value) if key in _LOWER else min(out[key], value)
            elif key == "items":
                out[key] = self.merge(out[key], value)
            elif key in ("properties", "additionalProperties"):
                continue  # merged below
            else:
                raise _CannotFold
        for exclusive in ("exclusiveMinimum", "exclusiveMaximum"):
            if isinstance(out.get(exclusive), bool) and (a.get(exclusive) != b.get(exclusive)):
                raise _CannotFold
        values = _values(a, b)
        if values is not None:
            out.pop("const", None)
            out["enum"] = values
        if any(key in a or key in b for key in ("properties", "additionalProperties")):
            self._merge_members(out, a, b)
        if "type" in out and out["type"] == []:
            raise _Unsatisfiable
        return out

    def _merge_members(self, out: dict[str, Any], a: dict[str, Any], b: dict[str, Any]) -> None:
        if "patternProperties" in a or "patternProperties" in b:
            raise _CannotFold
        listed_a, listed_b = a.get("properties", {}), b.get("properties", {})
        extra_a = a.get("additionalProperties", True)
        extra_b = b.get("additionalProperties", True)
        if not isinstance(listed_a, dict) or not isinstance(listed_b, dict):
            raise _CannotFold
        extra = self.merge(extra_a, extra_b)
        properties = {}
        for name in dict.fromkeys([*listed_a, *listed_b]):
            merged = self.merge(listed_a.get(name, extra_a), listed_b.get(name, extra_b))
            if merged is False:
                if name in out.get("required", []):
                    raise _Unsatisfiable
                if extra is not False:
                    raise _CannotFold
                continue
            properties[name] = merged
        if properties or "properties" in out:
            out["properties"] = properties
        if "additionalProperties" in a or "additionalProperties" in b:
            out["additionalProperties"] = extra


class _Unsatisfiable(_CannotFold):
    """The merge admits nothing (a branch that can be dropped)."""


def _branches(schema: dict[str, Any]) -> list[Any] | None:
    lists = [schema[key] for key in _BRANCH_KEYS if key in schema]
    if not lists:
        return None
    if any(not isinstance(branches, list) or not branches for branches in lists):
        raise _CannotFold
    if len(lists) == 1:
        return list(lists[0])
    if len(lists[0]) * len(lists[1]) > MAX_BRANCHES:
        raise _CannotFold
    return [{"allOf": [x, y]} for x in lists[0] for y in lists[1]]


def _types(a: Any, b: Any) -> list[str] | str:
    def expand(kind: Any) -> set[str]:
        names = set(kind) if isinstance(kind, list) else {kind}
        return names | ({"integer"} if "number" in names else set())
    common = expand(a) & expand(b)
    if "number" in common:
        common.discard("integer")
    ordered = sorted(common)
    return ordered[0] if len(ordered) == 1 else ordered


def _values(a: dict[str, Any], b: dict[str, Any]) -> list[Any] | None:
    """The values both sides' `enum` / `const` allow, or None unless both sides restrict them
    (one side's `enum` / `const` is then kept as it is)."""
    sets = []
    for side in (a, b):
        if "const" in side:
            sets.append([side["const"]])
        elif "enum" in side:
            if not isinstance(side["enum"], list):
                raise _CannotFold
            sets.append(side["enum"])
    if len(sets) < 2:
        return None
    keys = {value_key(value) for value in sets[1]}
    common = [value for value in sets[0] if value_key(value) in keys]
    if not common:
        raise _Unsatisfiable
    return common


def value_key(value: Any) -> str:
    """JSON Schema equality: 1 and 1.0 are the same value, true and 1 are not."""
    def canon(item: Any) -> Any:
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            return float(item)
        if isinstance(item, list):
            return [canon(x) for x in item]
        if isinstance(item, dict):
            return {k: canon(v) for k, v in item.items()}
        return item
    return json.dumps(canon(value), sort_keys=True)
