"""JSON-schema front-end policy on the xgrammar backend (open_memberless)."""

from __future__ import annotations

import json

from grammars import GrammarSpec


def test_memberless_objects_and_arrays_are_open(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    schema = {"type": "object", "properties": {"tags": {"type": "array"},
                                               "meta": {"type": "object"},
                                               "n": {"type": "integer"}}}
    compiled = xgr_compiler.compile(GrammarSpec("json_schema", json.dumps(schema)))
    matcher = compiled.matcher()
    assert matcher.accept_text('{"tags": [1, "a"], "meta": {"x": [true]}, "n": 2}')
    assert matcher.can_stop()
    assert not compiled.matcher().accept_text('{"other": 1')  # listed properties stay strict
    assert not compiled.matcher().accept_text('{"n": "2"')


def test_local_refs_resolve_as_rfc_6901_pointers_in_a_uri_fragment() -> None:
    from grammars.json.policy import resolve_ref

    root = {"definitions": {"ns:Time": {"type": "string"}, "a/b": 1, "c~d": 2, "e f": 3},
            "items": [{"type": "null"}]}
    assert resolve_ref(root, "#/definitions/ns%3ATime") == {"type": "string"}  # percent-decoded
    assert resolve_ref(root, "#/definitions/ns:Time") == {"type": "string"}
    assert resolve_ref(root, "#/definitions/a~1b") == 1
    assert resolve_ref(root, "#/definitions/c~0d") == 2
    assert resolve_ref(root, "#/definitions/e%20f") == 3
    assert resolve_ref(root, "#/items/0") == {"type": "null"}
    assert resolve_ref(root, "#") is root
    assert resolve_ref(root, "#/definitions/missing") is None
    assert resolve_ref(root, "other.json#/definitions/a~1b") is None  # not local
