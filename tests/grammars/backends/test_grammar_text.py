"""GBNF / Lark front-end fixes, and every grammar file under shared/data/grammars loads."""

from __future__ import annotations

import pytest

from grammars import GrammarSpec
from grammars.backends.xgrammar.grammar_text import normalize_ebnf, normalize_lark


def test_gbnf_empty_alternatives_become_empty_strings() -> None:
    assert normalize_ebnf('ws ::= | " "') == 'ws ::= "" | " "'
    assert normalize_ebnf('x ::= ( | "a")\ny ::= "b" |\nz ::= "c"') == (
        'x ::= ( "" | "a")\ny ::= "b" | ""\nz ::= "c"')
    assert normalize_ebnf('a ::= "b" | # note\n') == 'a ::= "b" | "" # note\n'


def test_gbnf_text_xgrammar_reads_is_unchanged() -> None:
    text = 'root ::= "|" [|(\\]] "(" x{0,3} # a | comment\nx ::= [^"] | "\\"|"\n'
    assert normalize_ebnf(text) == text


def test_lark_priorities_dropped() -> None:
    text = "start: a\nselect_expr.0: NAME\nJOIN_EXPR.5: \"JOIN\"i\n?x.-1: y\nNAME.foo: z\n"
    assert normalize_lark(text) == (
        "start: a\nselect_expr: NAME\nJOIN_EXPR: \"JOIN\"i\n?x: y\nNAME.foo: z\n")


def _grammar_files(data_dir):  # type: ignore[no-untyped-def]
    return sorted(path for path in (data_dir / "grammars").rglob("*")
                  if path.suffix in (".gbnf", ".lark") and path.name != "common.lark")


def test_every_shared_grammar_file_loads(xgr_compiler, data_dir) -> None:  # type: ignore[no-untyped-def]
    files = _grammar_files(data_dir)
    assert len(files) >= 14
    for path in files:
        kind = "ebnf" if path.suffix == ".gbnf" else "lark"
        assert xgr_compiler.compile(GrammarSpec(kind, path.read_text())), path


@pytest.mark.parametrize(("name", "kind", "text"), [
    ("llama_cpp/json.gbnf", "ebnf", '{"a": [1, 2.5, "x"], "b": null}'),
    ("llama_cpp/json_arr.gbnf", "ebnf", '[\n{"a": 1},\n{"b": true}]'),
    ("syncode/sql_grammar.lark", "lark", "SELECT name FROM singer WHERE age > 20"),
])
def test_fixed_grammars_accept_their_language(xgr_compiler, data_dir, name, kind, text) -> None:  # type: ignore[no-untyped-def]
    compiled = xgr_compiler.compile(GrammarSpec(kind, (data_dir / "grammars" / name).read_text()))
    matcher = compiled.matcher()
    assert matcher.accept_text(text) and matcher.can_stop()
    assert not compiled.matcher().accept_text(text.replace(" ", "") + "}}")
