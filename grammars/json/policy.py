"""JSON-Schema policy: which keywords the grammar backends enforce, and the strict check.

Contract:
- `check_strict_schema(schema, *, param)` raises GrammarError naming the first keyword (or
  `format` value) that no backend grammar can enforce, with the JSON pointer of the
  subschema that holds it, e.g. ``unsupported keyword 'not' at /properties/foo``, and the
  first keyword JSON Schema does not define at all (a typo such as `maxLenght`, a vendor
  `x-...` keyword): ``unknown keyword 'maxLenght' at /properties/foo``. It is run
  for every request with `strict: true` (response_format json_schema, strict tools); such a
  request is refused, never silently loosened.
- Non-strict requests are best effort, by these documented rules:
  1. every keyword in ENFORCED is enforced as JSON Schema 2020-12 says, except that an
     object whose schema does not set `additionalProperties` (or `unevaluatedProperties`)
     admits no properties beyond those listed, and an array without `items` past
     `prefixItems` admits no extra items — vLLM's and xgrammar's default; compile with
     `GrammarCompiler(..., allow_extra_properties=True)` for the standard's "anything"
     default (xgrammar then compiles ~100× slower). Say `"additionalProperties": true` to
     allow extra properties in one object. Exception (`open_memberless`, applied by the
     xgrammar backend): an object schema that constrains no members at all (no
     properties / patternProperties / additionalProperties / unevaluatedProperties /
     propertyNames) admits any properties, and an array schema with no items /
     prefixItems / contains admits any items: a free-form `{"type": "object"}` is any
     object, not only `{}`;
  2. keywords in UNENFORCED are ignored: the output satisfies the schema with those
     keywords deleted (so `oneOf` behaves as `anyOf`, `allOf` with several members may
     not be fully enforced (where its members conflict, below), `not` / `if`-`then`-`else` / `uniqueItems` / `contains` /
     `dependent*` / `unevaluatedProperties` are dropped, unknown `format`s accept any string);
     `allOf` members and a schema's own keywords beside `anyOf` / `oneOf` are merged into
     plain schemas where that is exact (grammars.json.fold; llguidance merges natively), so
     on both backends such an `allOf` is enforced unless its members conflict;
  3. unknown keywords are annotations (JSON Schema's own rule) and ignored;
  4. whitespace between JSON tokens is bounded (the compiler's `max_whitespace`), never
     unbounded (vLLM #38696);
  5. a schema the backend cannot compile at all (remote `$ref`, contradictory bounds) is a
     GrammarError, never an unconstrained fallback;
  6. listed properties come in the schema's order (OpenAI's and vLLM's), unless the
     compiler's `property_order="any"` (llguidance: grammars.backends.llguidance.object_rules); on
     llguidance, additional properties may come between listed ones.
- These tables were measured against xgrammar 0.2.8 (each keyword with an instance that
  violates only that keyword); the outlines backend enforces a subset and checks its own.

Knows nothing of tokenizers or of how the grammar is compiled.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from typing import Any

from grammars.errors import GrammarError

ENFORCED = frozenset(
    {
        "type", "enum", "const", "properties", "required", "additionalProperties",
        "patternProperties", "propertyNames", "minProperties", "maxProperties", "items",
        "prefixItems", "minItems", "maxItems", "unevaluatedItems", "minLength", "maxLength",
        "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
        "multipleOf", "anyOf", "$ref", "$defs", "definitions", "$dynamicRef",
        "$dynamicAnchor", "$anchor", "$id", "$schema", "$comment", "title", "description",
        "default", "examples", "readOnly", "writeOnly", "deprecated",
    }
)
UNENFORCED = frozenset(
    {
        "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies",
        "contains", "minContains", "maxContains", "unevaluatedProperties", "contentMediaType",
        "contentEncoding", "contentSchema", "uniqueItems", "oneOf", "allOf", "additionalItems",
    }
)
# standard keywords that only annotate or organise (nothing to enforce); with ENFORCED and
# UNENFORCED they are every keyword a strict schema may use: any other key in a subschema
# is unknown (a typo such as "maxLenght", or a vendor keyword) and refused in strict mode
ANNOTATIONS = frozenset(
    {
        "$vocabulary", "$recursiveRef", "$recursiveAnchor", "$dynamicAnchor", "$anchor",
        "$id", "$schema", "$comment", "$defs", "definitions", "title", "description",
        "default", "examples", "readOnly", "writeOnly", "deprecated",
    }
)
KNOWN = ENFORCED | UNENFORCED | ANNOTATIONS
ENFORCED_FORMATS = frozenset(
    {
        "date", "time", "date-time", "duration", "email", "uuid", "ipv4", "ipv6", "hostname",
        "uri", "uri-reference", "uri-template", "json-pointer", "relative-json-pointer",
    }
)

SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
SCHEMA_LISTS = ("prefixItems", "anyOf", "oneOf", "allOf")
SCHEMA_SINGLE = (
    "items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
    "unevaluatedItems", "unevaluatedProperties", "additionalItems", "contentSchema",
)


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def iter_subschemas(schema: Any, pointer: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(pointer, subschema) for every object subschema, the root first."""
    if not isinstance(schema, dict):
        return
    yield pointer, schema
    for key in SCHEMA_MAPS:
        value = schema.get(key)
        if isinstance(value, dict):
            for name, sub in value.items():
                yield from iter_subschemas(sub, f"{pointer}/{_escape(key)}/{_escape(name)}")
    for key in SCHEMA_LISTS:
        value = schema.get(key)
        if isinstance(value, list):
            for index, sub in enumerate(value):
                yield from iter_subschemas(sub, f"{pointer}/{key}/{index}")
    for key in SCHEMA_SINGLE:
        value = schema.get(key)
        if isinstance(value, dict):
            yield from iter_subschemas(value, f"{pointer}/{key}")
        elif key == "items" and isinstance(value, list):  # draft-7 tuple form
            for index, sub in enumerate(value):
                yield from iter_subschemas(sub, f"{pointer}/items/{index}")


def ref_steps(root: Any, ref: Any) -> tuple[list[tuple[Any, str]], Any] | None:
    """The (node, key) steps a local `$ref` ("#", "#/a/b") takes from `root`, and the
    subschema it reaches; None when it is not local or points nowhere. The fragment is
    percent-decoded first (RFC 6901 §6: `#/definitions/a%3Ab` names the key `a:b`)."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None
    node = root
    steps: list[tuple[Any, str]] = []
    pointer = urllib.parse.unquote(ref[1:])
    for part in pointer.split("/")[1:] if pointer else []:
        part = part.replace("~1", "/").replace("~0", "~")
        steps.append((node, part))
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return steps, node


def resolve_ref(root: Any, ref: Any) -> Any:
    """The subschema a local `$ref` ("#", "#/a/b") points to, or None."""
    found = ref_steps(root, ref)
    return None if found is None else found[1]


def _unenforced_here(sub: dict[str, Any]) -> str | None:
    for key, value in sub.items():
        if key not in UNENFORCED:
            continue
        if key == "uniqueItems" and value is not True:
            continue
        if key in ("oneOf", "allOf") and isinstance(value, list) and len(value) <= 1:
            continue
        return key
    return None


def check_strict_schema(schema: Any, *, param: str | None = None) -> None:
    """Raise GrammarError for the first keyword a strict request cannot have enforced:
    an unknown one (not in KNOWN: a typo or a vendor keyword) or an UNENFORCED one."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise GrammarError("a JSON schema must be an object or a boolean", param=param)
    for pointer, sub in iter_subschemas(schema):
        where = pointer or "/"
        unknown = next((key for key in sub if key not in KNOWN), None)
        if unknown is not None:
            raise GrammarError(f"unknown keyword '{unknown}' at {where}", param=param)
        key = _unenforced_here(sub)
        if key is not None:
            raise GrammarError(f"unsupported keyword '{key}' at {where}", param=param)
        fmt = sub.get("format")
        if fmt is not None and fmt not in ENFORCED_FORMATS:
            raise GrammarError(f"unsupported format '{fmt}' at {where}/format", param=param)
        ref = sub.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            raise GrammarError(f"unsupported remote $ref '{ref}' at {where}", param=param)


def check_refs_local(schema: Any) -> None:
    """Raise GrammarError for a `$ref` outside the document (rule 5: never dropped silently)."""
    for pointer, sub in iter_subschemas(schema):
        ref = sub.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            raise GrammarError(f"unsupported remote $ref '{ref}' at {pointer or '/'}")


_OBJECT_MEMBER_KEYS = ("properties", "patternProperties", "additionalProperties",
                       "unevaluatedProperties", "propertyNames")
_ARRAY_MEMBER_KEYS = ("items", "prefixItems", "unevaluatedItems", "additionalItems",
                      "contains")


def _has_type(sub: dict[str, Any], name: str) -> bool:
    kind = sub.get("type")
    return kind == name or (isinstance(kind, list) and name in kind)


def open_memberless(schema: Any) -> Any:
    """A copy of `schema` where an object schema that says nothing about its members
    (no properties / patternProperties / additionalProperties / unevaluatedProperties /
    propertyNames) gets `additionalProperties: true`, and an array schema with no `items`
    / `prefixItems` / … gets `items: true` (rule 1's exception: a free-form `{"type":
    "object"}` means any object, never only `{}`). The input is not modified."""
    if not isinstance(schema, dict):
        return schema
    copy = json.loads(json.dumps(schema))
    for _, sub in iter_subschemas(copy):
        if _has_type(sub, "object") and not any(key in sub for key in _OBJECT_MEMBER_KEYS):
            sub["additionalProperties"] = True
        if _has_type(sub, "array") and not any(key in sub for key in _ARRAY_MEMBER_KEYS):
            sub["items"] = True
    return copy
