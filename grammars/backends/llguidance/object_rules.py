"""JSON objects as parametric llguidance rules: member orders its JSON compiler cannot say.

llguidance's JSON compiler writes an object's listed properties in schema order and its
additional (unlisted) properties only after all of them. JSON Schema fixes neither: a real
instance writing `"$schema"` (unlisted) before `"ctype"` (listed) is valid and was refused.
`object_rules_grammar(schema, *, property_order=, json_options=)` rewrites a JSON schema
(already through the policy of grammars.json.policy: closed, formats as patterns) into an
llguidance lark grammar in which every object it can read is one parametric rule (llguidance
"parametric grammars": a rule indexed by a 64-bit value, expanded lazily while parsing):
- bit i of the value is set once listed property i is written; a written property cannot
  come again (keys of an object are unique), so at most 64 listed properties;
- `property_order="schema"` (the default, OpenAI's and vLLM's order, which keeps a
  "reasoning before answer" schema meaningful): property i may come only while no property
  after it in the schema was written; `"any"`: any listed property not yet written;
- additional properties, where the schema admits them, may come before, between and after
  listed ones; their keys are any JSON string but the listed names;
- the object may close once every `required` bit is set and its `anyOf` / `oneOf` groups of
  `required` lists hold (`oneOf`: exactly one, which is exact here; the policy's "oneOf is
  anyOf" elsewhere);
- `allOf` members that are objects (through local `$ref`s) are merged: a key any member
  lists must satisfy every member's schema for it (its listed one, else its
  `additionalProperties`); exact-name `patternProperties` (`^name$`) are listed names.
Everything else stays JSON schema: each other value is a `%json { … }` leaf with the
backend's JSON options and only the definitions its `$ref`s reach (renamed under `$defs`).
Arrays whose items are such objects and `anyOf` / `oneOf` unions of them are rules too, so
objects under them are reached. Whitespace between the rules' tokens is explicit (`WS?`),
as llguidance refuses whitespace before a `%json` leaf under `%ignore`.

A string whose `pattern` is a search (not anchored at its start) is written as
`%json {string} | %json {twin}`, its sliceable twin (grammars.backends.llguidance.search_strings): the same
language, with masks inside it ~40x cheaper on llguidance; objects above it become rules to
reach it.

Returns None (the caller compiles the schema with the JSON compiler, whose grammar is then
exact and cheaper) when nothing changes: under "schema" order, no object admits additional
properties beside listed ones and no number constant or search-pattern string is reached.
An object holding what these rules do not read (a `$ref` beside other keywords, `const` /
`enum` on an object, non-literal `patternProperties`, `minProperties` / `maxProperties`,
`anyOf` / `oneOf` branches that say more than `required`, more than 64 names) stays a leaf,
as does what lies under it.

Invariant: every language this grammar admits is admitted by the schema as the JSON compiler
reads it (same keywords ignored: those llguidance's `lenient` mode ignores), except for key
order and the place of additional properties; tested against python-jsonschema. Twins add
nothing (masks compared position by position, tests/grammars/test_json_search_strings.py).

Knows nothing of tokenizers, matchers, caching or HTTP.
"""

from __future__ import annotations

import decimal
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from grammars.backends.llguidance.search_strings import sliceable_twin
from grammars.json.fold import value_key
from grammars.json.layout import JsonWhitespace, check_json_whitespace
from grammars.json.policy import resolve_ref

PropertyOrder = Literal["schema", "any"]
PROPERTY_ORDERS = ("schema", "any")
MAX_NAMES = 64  # one bit per listed property in llguidance's 64-bit rule parameter

# the keywords llguidance's JSON compiler implements; `lenient` ignores every other one
LLGUIDANCE_KEYWORDS = frozenset({
    "anyOf", "oneOf", "allOf", "$ref", "const", "enum", "type",
    "items", "additionalItems", "prefixItems", "minItems", "maxItems",
    "properties", "additionalProperties", "patternProperties", "required",
    "minProperties", "maxProperties",
    "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
})
_OBJECT_KEYWORDS = frozenset({
    "type", "properties", "additionalProperties", "patternProperties", "required",
    "allOf", "anyOf", "oneOf", "$ref", "const", "enum", "minProperties", "maxProperties",
})
_ARRAY_KEYWORDS = frozenset({"type", "items", "minItems", "maxItems"})
_MAX_MIN_ITEMS = 16
_LITERAL_PATTERN = re.compile(r"^\^((?:[A-Za-z0-9_\-]|\\[.$^*+?()\[\]{}|\\/-])*)\$$")
# keys of additional properties: a JSON string; `\u` only for control characters, so a
# listed name has one spelling here and cannot come back as an additional key
_KEY_REGEX = r'/"(?:[^"\\\x00-\x1f]|\\["\\bfnrt]|\\u00[01][0-9a-fA-F])*"/'
_GROWTH_LIMIT = 4  # leaves' text beyond 4x the schema (plus 64 KiB): keep the JSON compiler


def _meaning(sub: dict[str, Any], kind: str | None = None) -> dict[str, Any]:
    """`sub`'s keywords llguidance reads; for a known `kind`, those that apply to it."""
    keys = LLGUIDANCE_KEYWORDS if kind is None else (
        _OBJECT_KEYWORDS if kind == "object" else _ARRAY_KEYWORDS | {"anyOf", "oneOf",
                                                                     "allOf", "$ref"})
    return {k: v for k, v in sub.items() if k in keys}


def _type_is(sub: dict[str, Any], name: str) -> bool:
    kind = sub.get("type")
    return kind == name or kind == [name]


def _required_lists(branches: Any) -> list[list[str]] | None:
    """The `required` list of every branch, when each branch says nothing else."""
    if not isinstance(branches, list) or not branches:
        return None
    out = []
    for branch in branches:
        if not isinstance(branch, dict):
            return None
        meaning = _meaning(branch)
        if set(meaning) - {"required"} or not isinstance(meaning.get("required", []), list):
            return None
        out.append([str(name) for name in meaning.get("required", [])])
    return out


def _add_requirements(meaning: dict[str, Any], view: _ObjectView) -> bool:
    """Adds `meaning`'s `required` names and its `anyOf` / `oneOf` groups of `required`
    lists to `view`; False when those say more than `required`."""
    required = meaning.get("required", [])
    if not isinstance(required, list):
        return False
    view.required.update(str(name) for name in required)
    for key in ("anyOf", "oneOf"):
        if key in meaning:
            lists = _required_lists(meaning[key])
            if lists is None:
                return False
            view.groups.append((key, lists))
    return True


@dataclass
class _ObjectView:
    """An object schema merged over its `allOf` members, as these rules read it."""

    names: list[str] = field(default_factory=list)  # listed names, schema order = bit order
    values: dict[str, list[Any]] = field(default_factory=dict)  # name -> schemas to satisfy
    extra: list[Any] | None = field(default_factory=list)  # None: no additional properties
    required: set[str] = field(default_factory=set)
    groups: list[tuple[str, list[list[str]]]] = field(default_factory=list)  # (anyOf|oneOf, …)


class _Rules:
    def __init__(self, root: Any, *, property_order: PropertyOrder,
                 json_options: dict[str, Any],
                 satisfiable: Callable[[dict[str, Any]], bool] | None,
                 whitespace: JsonWhitespace = "flexible") -> None:
        self.root = root
        self.conventional = whitespace == "conventional"
        self.gap = "" if self.conventional else "WS? "  # before "," and ":"
        self.any_value = False  # the free-form value rules are needed
        self.satisfiable = satisfiable
        self.order = property_order
        self.json_options = json_options
        self.lines: list[str] = []
        self.names: dict[int, str] = {}  # id(subschema) -> rule name (memo; recursion)
        self.converts_memo: dict[int, bool] = {}
        self.views: dict[int, _ObjectView | None] = {}
        self.leaf_chars = 0
        self.keep: list[Any] = []  # subschemas made here, alive while their ids are keys
        self.top = self._deref(root)  # the root value, through `$ref`-only chains

    # --- reading -------------------------------------------------------------------------
    def _deref(self, sub: Any, depth: int = 0) -> Any:
        """`sub` through a chain of `{"$ref": …}`-only schemas and of `allOf`s with one member
        that says something (annotations and keywords llguidance ignores aside)."""
        while isinstance(sub, dict) and depth < 32:
            meaning = _meaning(sub)
            if set(meaning) == {"allOf"} and isinstance(meaning["allOf"], list):
                said = [m for m in meaning["allOf"]
                        if not (isinstance(m, dict) and not _meaning(m)) and m is not True]
                if len(said) != 1:
                    return sub
                sub, depth = said[0], depth + 1
                continue
            if set(meaning) != {"$ref"}:
                return sub
            target = resolve_ref(self.root, meaning["$ref"])
            if target is None:
                return sub
            sub, depth = target, depth + 1
        return sub

    def _literals(self, sub: dict[str, Any]) -> list[Any] | None:
        """The values of a `const` / `enum` schema holding a number (whose spelling
        llguidance fixes: it refuses `1.0` for `const: 1.0`), filtered by its `type`."""
        meaning = _meaning(sub)
        if not set(meaning) & {"const", "enum"} or set(meaning) - {"const", "enum", "type"}:
            return None
        values = [meaning["const"]] if "const" in meaning else meaning.get("enum")
        if not isinstance(values, list) or not any(_has_number(v) for v in values):
            return None
        if "enum" in meaning and "const" in meaning:
            values = [v for v in values if value_key(v) == value_key(meaning["const"])]
        kinds = meaning.get("type")
        if kinds is not None:
            kinds = [kinds] if isinstance(kinds, str) else kinds
            values = [v for v in values if any(_is_type(v, k) for k in kinds)]
        return values

    def _view(self, sub: dict[str, Any]) -> _ObjectView | None:
        if id(sub) not in self.views:
            self.views[id(sub)] = None  # a member reaching itself is not read
            self.views[id(sub)] = self._read_object(sub)
        return self.views[id(sub)]

    def _read_object(self, sub: dict[str, Any]) -> _ObjectView | None:
        if not _type_is(sub, "object"):
            return None
        members: list[dict[str, Any]] = []
        view = _ObjectView()
        if not self._collect(sub, members, view, depth=0):
            return None
        for member in members:  # ordered union of listed names
            for name in member["_names"]:
                if name not in view.values:
                    view.names.append(name)
                    view.values[name] = []
        for member in members:
            for name in view.names:
                if name in member["_names"]:
                    view.values[name].extend(member["_names"][name])
                elif member["_extra"] is False:
                    return None  # a name another member lists is forbidden here: leave it
                elif member["_extra"] is not True:
                    view.values[name].append(member["_extra"])
            if member["_extra"] is False:
                view.extra = None
            elif member["_extra"] is not True and view.extra is not None:
                view.extra.append(member["_extra"])
        if len(view.names) > MAX_NAMES:
            return None
        if len(view.groups) > 1:
            return None  # which branch of one group to complete would depend on the other
        wanted = set(view.required).union(*(set(n) for _, g in view.groups for n in g))
        if not wanted <= set(view.names):
            return None  # a required name these rules cannot count
        return view

    def _collect(self, sub: dict[str, Any], members: list[dict[str, Any]],
                 view: _ObjectView, *, depth: int) -> bool:
        """Adds `sub` and its `allOf` members (through `$ref`s) to `members`; False when an
        object keyword here is not one these rules read."""
        if depth > 8:
            return False
        meaning = _meaning(sub, "object")
        if "type" in meaning and not _type_is(meaning, "object"):
            return False
        if set(meaning) & {"$ref", "const", "enum", "minProperties", "maxProperties"}:
            return False
        names: dict[str, list[Any]] = {}
        properties = meaning.get("properties", {})
        patterns = meaning.get("patternProperties", {})
        if not isinstance(properties, dict) or not isinstance(patterns, dict):
            return False
        for name, schema in properties.items():
            names.setdefault(name, []).append(schema)
        for pattern, schema in patterns.items():
            literal = _LITERAL_PATTERN.match(pattern)
            if literal is None:
                return False
            names.setdefault(re.sub(r"\\(.)", r"\1", literal.group(1)), []).append(schema)
        extra = meaning.get("additionalProperties", True)
        if extra == {}:
            extra = True
        if not isinstance(extra, (bool, dict)):
            return False
        members.append({"_names": names, "_extra": extra})
        if not _add_requirements(meaning, view):
            return False
        for member in meaning.get("allOf", []):
            member = self._deref(member)
            if member is True or member == {}:
                continue
            if not isinstance(member, dict):
                return False
            inner = _meaning(member, "object")
            if set(inner) <= {"required", "anyOf", "oneOf"}:  # a requirement, no members
                if not _add_requirements(inner, view):
                    return False
                continue
            if not self._collect(member, members, view, depth=depth + 1):
                return False
        return True

    def _changes(self, view: _ObjectView) -> bool:
        """Whether this object's language here differs from the JSON compiler's."""
        if self.conventional:  # its whitespace does
            return True
        if self.order == "any" and len(view.names) >= 2:
            return True
        return view.extra is not None and bool(view.names)

    def _array_items(self, sub: dict[str, Any]) -> Any:
        meaning = _meaning(sub, "array")
        if (not _type_is(sub, "array") or set(meaning) - _ARRAY_KEYWORDS
                or not isinstance(meaning.get("items"), dict)):
            return None
        low, high = meaning.get("minItems", 0), meaning.get("maxItems")
        if not isinstance(low, int) or low > _MAX_MIN_ITEMS or (
                high is not None and (not isinstance(high, int) or high < max(low, 1))):
            return None
        return meaning["items"]

    def _union(self, sub: dict[str, Any]) -> list[Any] | None:
        meaning = _meaning(sub)
        if len(meaning) == 1 and set(meaning) <= {"anyOf", "oneOf"}:
            branches = next(iter(meaning.values()))
            if isinstance(branches, list) and branches:
                return branches
        return None

    def converts(self, sub: Any) -> bool:
        """Whether `sub` becomes rules: it or something under it changes language, or is a
        search-pattern string with a sliceable twin (same language, cheaper masks)."""
        sub = self._deref(sub)
        if not isinstance(sub, dict):
            return False
        key = id(sub)
        if key in self.converts_memo:
            return self.converts_memo[key]
        self.converts_memo[key] = False  # recursion: an inner reference stays a leaf
        result = False
        view = self._view(sub)
        if view is not None:
            inner = [s for schemas in view.values.values() for s in schemas]
            result = self._changes(view) or any(self.converts(s) for s in inner + (
                view.extra or []))
        elif (items := self._array_items(sub)) is not None:
            result = self.conventional or self.converts(items)
        elif self.conventional and not _meaning(sub):  # any value
            result = True
        elif (branches := self._union(sub)) is not None:
            result = any(self.converts(b) for b in branches)
        elif self._literals(sub) is not None or self._twin(sub) is not None:
            result = True
        self.converts_memo[key] = result
        return result

    def _twin(self, sub: dict[str, Any]) -> dict[str, Any] | None:
        """A search-pattern string's sliceable twin (grammars.backends.llguidance.search_strings), except
        at the root (a lark alternative there would admit whitespace before the value)."""
        return None if sub is self.top else sliceable_twin(_meaning(sub))

    # --- writing -------------------------------------------------------------------------
    def value(self, schemas: list[Any]) -> str | None:
        """A lark expression for a value satisfying every schema of `schemas`; None when
        none can."""
        if any(s is False for s in schemas):
            return None
        schemas = [s for s in schemas if s is not True and s != {}]
        if len(schemas) > 1:
            merged: dict[str, Any] = {"allOf": schemas}
            self.keep.append(merged)
            return self.leaf(merged)
        if not schemas:
            return self._any() if self.conventional else self.leaf({})
        sub = self._deref(schemas[0])
        if sub is False:
            return None
        if not isinstance(sub, dict) or not self.converts(sub):
            return self.leaf(schemas[0])
        if self.conventional and not _meaning(sub):
            return self._any()
        if id(sub) in self.names:
            return self.names[id(sub)]
        name = f"r{len(self.names)}"
        self.names[id(sub)] = name
        view = self._view(sub)
        if view is not None:
            self._object(name, view)
        elif (items := self._array_items(sub)) is not None:
            self._array(name, sub, items)
        elif (values := self._literals(sub)) is not None:
            written = [_literal(v, gap=self.gap) for v in values]
            self.lines.append(f"{name}: {' | '.join(written) or 'NOTHING'}")
        elif (twin := self._twin(sub)) is not None:
            original = self.leaf(sub)
            second = self.leaf(twin) if original is not None else None
            self.lines.append(f"{name}: {original or 'NOTHING'}"
                              + (f" | {second}" if second is not None else ""))
        else:
            branches = [self.value([b]) for b in self._union(sub) or []]
            alternatives = [b for b in branches if b is not None]
            self.lines.append(f"{name}: {' | '.join(alternatives) or 'NOTHING'}")
        return name

    def _any(self) -> str:
        """Any JSON value, objects and arrays as rules (`ANY_VALUE_RULES`)."""
        self.any_value = True
        return "json_any"

    def leaf(self, sub: Any) -> str | None:
        """`%json { sub }`, or None when `satisfiable` says no value satisfies `sub` (the
        JSON compiler drops such a member where this grammar would refuse to compile)."""
        # a `$ref`-only schema is written as its target: llguidance refuses a `$ref` beside
        # the `$defs` and options a leaf's root carries, when the reference is recursive
        sub = self._deref(sub)
        if sub is False:
            return None
        standalone = self._standalone(sub)
        if self.satisfiable is not None and not self.satisfiable(standalone):
            return None
        text = json.dumps(standalone, ensure_ascii=False)
        self.leaf_chars += len(text)
        return f"%json {text}"

    def _standalone(self, sub: Any) -> Any:
        """`sub` with the backend's options and, under `$defs`, what its `$ref`s reach."""
        refs: dict[str, str] = {}
        pending = [sub]
        defs: dict[str, Any] = {}
        while pending:
            node = pending.pop()
            for ref in _refs(node):
                if ref in refs:
                    continue
                target = resolve_ref(self.root, ref)
                if target is None:
                    continue  # left as written: the JSON compiler reports it
                refs[ref] = f"#/$defs/sg{len(refs)}"
                defs[refs[ref].rsplit("/", 1)[1]] = target
                pending.append(target)
        out = _rewrite_refs(sub if isinstance(sub, dict) else {}, refs)  # True: any value
        out = {k: v for k, v in out.items() if k not in ("$defs", "definitions")} | (
            {"$defs": {k: _rewrite_refs(v, refs) for k, v in defs.items()}} if defs else {})
        return {"x-guidance": self.json_options} | out

    def _object(self, name: str, view: _ObjectView) -> None:
        bits = {n: i for i, n in enumerate(view.names)}
        values: dict[int, str] = {}
        for index, member_name in enumerate(view.names):
            value = self.value(view.values[member_name])
            if value is not None:
                values[index] = value
            elif member_name in view.required:  # no object satisfies this one
                self.lines.append(f"{name}: NOTHING")
                return
        members, conditions = [], []
        for index, value in values.items():
            key = _key_literal(view.names[index])
            condition = self._member_condition(view, bits, set(values), index)
            conditions.append(condition)
            if condition != _FALSE:
                members.append(f'{key} {self.gap}":" WS? {value} {self.gap}'
                               f"{name}_tail::set_bit({index}) %if {condition}")
        if view.extra is not None:
            extra = self.value(view.extra)
            if extra is not None:
                key_name = f"{name.upper()}_KEY"
                excluded = " | ".join(_key_literal(n) for n in view.names)
                self.lines.append(f"{key_name}: {_KEY_REGEX}"
                                  + (f" & ~({excluded})" if excluded else ""))
                members.append(f'{key_name} {self.gap}":" WS? {extra} {self.gap}{name}_tail::_')
                conditions.append(_TRUE)
        close = f'"}}" %if {_end_condition(view, bits)}'
        self.lines.append(f'{name}: "{{" WS? {name}_body::0x0')
        self.lines.append(f"{name}_body::_ : {close}"
                          + (f" | {name}_member::_" if members else ""))
        if members:
            self.lines.append(f"{name}_member::_ : " + "\n    | ".join(members))
            # a comma only where some member may follow it (no dead end after a comma)
            # conventional: whitespace after a member only before the closing brace
            closing = f"WS? {close}" if self.conventional else close
            self.lines.append(f'{name}_tail::_ : {closing} | "," WS? {name}_member::_ '
                              f"%if {_any(conditions)}")

    def _member_condition(self, view: _ObjectView, bits: dict[str, int], usable: set[int],
                          index: int) -> str:
        """When listed property `index` may be written: not yet written (schema order: nor
        any after it), and the object can still close once it is (no dead end): under
        schema order every required property before it is written, and some branch of the
        `anyOf` / `oneOf` group can still be completed (for `oneOf`, without completing
        another)."""
        schema_order = self.order == "schema"

        def written(bit: int) -> str:  # in the state once `index` is written
            return _TRUE if bit == index else f"bit_set({bit})"

        def unwritten(bit: int) -> str:
            return _FALSE if bit == index else f"bit_clear({bit})"

        count = len(view.names)
        required = sorted(bits[n] for n in view.required)
        parts = [f"is_zeros([{index}:{count}])" if schema_order else f"bit_clear({index})"]
        if schema_order:
            parts += [written(bit) for bit in required if bit < index]
        for kind, lists in view.groups:
            branches = [[bits[n] for n in names] for names in lists]
            possible = [b for b in branches if set(b) <= usable]
            options = []
            for position, branch in enumerate(possible):
                option = [written(bit) for bit in branch if bit < index] if schema_order else []
                if kind == "oneOf":  # every other branch misses a property not written
                    for other_position, other in enumerate(possible):
                        if other_position != position:
                            rest = [b for b in other if b not in branch and b not in required]
                            option.append(_any([unwritten(b) for b in rest]))
                options.append(_all(option))
            parts.append(_any(options))
        return _all(parts)

    def _array(self, name: str, sub: dict[str, Any], items: Any) -> None:
        item = self.value([items])
        low, high = sub.get("minItems", 0), sub.get("maxItems")
        empty = '"[" WS? "]"'
        if item is None:
            self.lines.append(f"{name}: {empty if low == 0 else 'NOTHING'}")
            return
        more = f'({self.gap}"," WS? {item})'
        lower = max(low - 1, 0)
        repeat = f"{{{lower},}}" if high is None else f"{{{lower},{high - 1}}}"
        filled = f'"[" WS? {item} {more}{repeat} WS? "]"'
        self.lines.append(f"{name}: {filled}" + (f" | {empty}" if low == 0 else ""))


def _has_number(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_has_number(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_number(v) for v in value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_type(value: Any, kind: str) -> bool:
    if kind == "integer":
        return _is_type(value, "number") and float(value) == int(value)
    names = {"null": type(None), "boolean": bool, "string": str, "array": list, "object": dict}
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, names.get(kind, ())) and not (kind != "boolean" and
                                                         isinstance(value, bool))


def _number_spellings(value: int | float) -> str:
    """A lark terminal matching JSON spellings of `value`: the fixed-point digits with any
    trailing zeros after a point and a zero exponent (`1`, `1.0`, `1.00`, `1e0`), and the
    shortest spelling Python writes (`1e-07`); every spelling it matches equals `value`."""
    text = json.dumps(value)
    if isinstance(value, float) and not math.isfinite(value):
        return _lark_literal(text)
    fixed = format(decimal.Decimal(text), "f")
    sign, fixed = ("-", fixed[1:]) if fixed.startswith("-") else ("", fixed)
    whole, _, fraction = fixed.partition(".")
    fraction = fraction.rstrip("0")
    body = re.escape(whole) + (r"\." + fraction + "0*" if fraction else r"(\.0+)?")
    spellings = f"{re.escape(sign)}{body}([eE][+-]?0+)?"
    if sign and not fraction and whole == "0":
        spellings = f"-?{body}([eE][+-]?0+)?"
    return f"/{spellings}|{re.escape(text)}/"


def _literal(value: Any, *, gap: str = "WS? ") -> str:
    """A lark expression for the JSON value `value`, whitespace between its tokens (`gap`
    before `,` and `:`: "WS? " or nothing)."""
    if isinstance(value, dict):
        members = [f"{_key_literal(k)} {gap}\":\" WS? "
                   f"{_literal(v, gap=gap)}" for k, v in value.items()]
        return ('("{" WS? ' + f' {gap}"," WS? '.join(members) + (" WS?" if members else "")
                + ' "}")')
    if isinstance(value, list):
        items = [_literal(v, gap=gap) for v in value]
        return ('("[" WS? ' + f' {gap}"," WS? '.join(items) + (" WS?" if items else "")
                + ' "]")')
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _number_spellings(value)
    return _lark_literal(json.dumps(value, ensure_ascii=False))


def _refs(node: Any) -> list[str]:
    out: list[str] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str) and ref.startswith("#"):
                out.append(ref)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return out


def _rewrite_refs(node: Any, refs: dict[str, str]) -> Any:
    if isinstance(node, dict):
        return {k: (refs.get(v, v) if k == "$ref" and isinstance(v, str)
                    else _rewrite_refs(v, refs)) for k, v in node.items()}
    if isinstance(node, list):
        return [_rewrite_refs(v, refs) for v in node]
    return node


def _lark_literal(text: str) -> str:
    """`text` as a lark string literal."""
    return json.dumps(text, ensure_ascii=False)


def _key_literal(name: str) -> str:
    """The lark literal of `name` written as a JSON string (an object key)."""
    return _lark_literal(json.dumps(name, ensure_ascii=False))


_TRUE, _FALSE = "true", "not(true)"

# any JSON value in the conventional layout (whitespace after `{ [ , :` and before `} ]`)
ANY_VALUE_RULES = """json_any: json_any_object | json_any_array | %json {scalar}
json_any_object: "{{" WS? "}}" | "{{" WS? json_any_member ("," WS? json_any_member)* WS? "}}"
json_any_member: %json {key} ":" WS? json_any
json_any_array: "[" WS? "]" | "[" WS? json_any ("," WS? json_any)* WS? "]"
"""


def _tree(function: str, conditions: list[str]) -> str:
    """`conditions` joined by the binary `function` ("and" / "or"), as a balanced tree."""
    while len(conditions) > 1:
        pairs = [f"{function}({a}, {b})" for a, b in zip(conditions[::2], conditions[1::2],
                                                          strict=False)]
        conditions = pairs + ([conditions[-1]] if len(conditions) % 2 else [])
    return conditions[0]


def _all(conditions: list[str]) -> str:
    """One condition that holds when all of `conditions` hold (constants folded)."""
    conditions = [c for c in conditions if c != _TRUE]
    if _FALSE in conditions:
        return _FALSE
    return _tree("and", conditions) if conditions else _TRUE


def _any(conditions: list[str]) -> str:
    conditions = [c for c in conditions if c != _FALSE]
    if _TRUE in conditions:
        return _TRUE
    return _tree("or", conditions) if conditions else _FALSE


def _end_condition(view: _ObjectView, bits: dict[str, int]) -> str:
    def has(names: list[str]) -> str:
        return _all([f"bit_set({bits[n]})" for n in names])

    parts = [has(sorted(view.required, key=bits.__getitem__))]
    for kind, lists in view.groups:
        branches = [has(names) for names in lists]
        if kind == "anyOf":
            parts.append(_any(branches))
        else:  # exactly one branch holds
            parts.append(_any([_all([b] + [f"not({o})" for j, o in enumerate(branches)
                                           if j != i]) for i, b in enumerate(branches)]))
    return _all(parts)


def object_rules_grammar(
        schema: Any, *, property_order: PropertyOrder, json_options: dict[str, Any],
        satisfiable: Callable[[dict[str, Any]], bool] | None = None,
        whitespace: JsonWhitespace = "flexible") -> str | None:
    """The lark grammar for `schema` with its objects as parametric rules, or None when the
    JSON compiler's grammar says the same (or these rules cannot say it). `satisfiable`,
    when given, is asked of every `%json` leaf: a leaf no value satisfies is left out (a
    member that cannot be written), as the JSON compiler leaves out such members.
    `whitespace="conventional"` (grammars.json.layout): every object and array these rules
    read becomes a rule, none with whitespace before `,` or `:`, and free-form values too
    (`ANY_VALUE_RULES`); what they do not read stays a leaf with the leaves' whitespace."""
    check_json_whitespace(whitespace)
    if property_order not in PROPERTY_ORDERS:
        raise ValueError(f"property_order must be one of {PROPERTY_ORDERS}, not "
                         f"{property_order!r}")
    if not isinstance(schema, dict):
        return None
    rules = _Rules(schema, property_order=property_order, json_options=json_options,
                   satisfiable=satisfiable, whitespace=whitespace)
    if not rules.converts(schema):
        return None
    start = rules.value([schema])
    if start is None:
        return None
    if rules.leaf_chars > _GROWTH_LIMIT * len(json.dumps(schema)) + 64 * 1024:
        return None
    head = ["start: " + start, r"WS: /[\x20\x0A\x0D\x09]+/", "NOTHING: \"a\" & \"b\""]  # no string
    if rules.any_value:
        scalar = json.dumps({"x-guidance": json_options,
                             "type": ["string", "number", "boolean", "null"]})
        key = json.dumps({"x-guidance": json_options, "type": "string"})
        head.append(ANY_VALUE_RULES.format(scalar=scalar, key=key))
    return "\n".join(head + rules.lines) + "\n"
