"""Backend construction and the "auto" choice of backend per grammar.

Contract:
- `BACKENDS` names every value `GrammarCompiler(backend=...)` takes.
- `make_backend(name, tokenizer, **options)` builds one backend object (its tokenizer tables
  are built here, once); options a backend has no use for are dropped.
- `auto_backends(spec)` is the "auto" rule, a pure function of the spec giving the backends
  to try in order: JSON schemas go to llguidance first (compiled in milliseconds: its lazy
  lexer never expands `maxLength` / `minItems` bounds up front, which is what costs xgrammar
  seconds to minutes on real-world schemas) and to xgrammar when llguidance refuses one
  (overlapping `patternProperties` patterns, recursion beside sibling keywords
  grammars.backends.llguidance.ref_siblings cannot resolve, lookarounds), so auto
  refuses only what both refuse; every other kind goes to xgrammar alone (SQL, tools,
  EBNF/Lark, regex, choice and `json_object` compile fast there and its masks are cheap). Measured, per category, by
  `python -m benchmarks.schema_coverage` (docs/json-schema.md "Coverage on real-world schemas").

Knows nothing of caching, timeouts, sampling or HTTP.
"""

from __future__ import annotations

from typing import Any

from grammars.spec import GrammarSpec
from grammars.vocabulary import TokenizerVocabulary

BACKENDS = ("xgrammar", "llguidance", "outlines", "auto")
AUTO_LLGUIDANCE_KINDS = frozenset({"json_schema"})


def auto_backends(spec: GrammarSpec) -> tuple[str, ...]:
    if spec.kind in AUTO_LLGUIDANCE_KINDS:
        return ("llguidance", "xgrammar")
    return ("xgrammar",)


def make_backend(name: str, tokenizer: Any, *, vocab_size: int, stop_token_ids: Any,
                 max_whitespace: int, max_threads: int = 2,
                 allow_extra_properties: bool = False, property_order: str = "schema",
                 vocabulary: TokenizerVocabulary | None = None,
                 json_whitespace: str = "conventional") -> Any:
    vocabulary = vocabulary if vocabulary is not None else TokenizerVocabulary(tokenizer)
    if name == "xgrammar":
        from grammars.backends.xgrammar.backend import XGrammarBackend

        return XGrammarBackend(
            tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids,
            max_whitespace=max_whitespace, max_threads=max_threads,
            allow_extra_properties=allow_extra_properties, vocabulary=vocabulary,
            json_whitespace=json_whitespace,  # type: ignore[arg-type]
        )
    if name == "llguidance":
        from grammars.backends.llguidance.backend import LLGuidanceBackend

        return LLGuidanceBackend(
            tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids,
            max_whitespace=max_whitespace, allow_extra_properties=allow_extra_properties,
            property_order=property_order, vocabulary=vocabulary,  # type: ignore[arg-type]
            json_whitespace=json_whitespace,  # type: ignore[arg-type]
        )
    if name == "outlines":
        from grammars.backends.outlines import OutlinesBackend

        return OutlinesBackend(
            tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids,
            max_whitespace=max_whitespace, vocabulary=vocabulary,
        )
    raise ValueError(f"unknown grammar backend {name!r}")
