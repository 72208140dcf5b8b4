"""llguidance backend: JSON schema, JSON object, regex and choice grammars, masks computed lazily.

Contract: `LLGuidanceBackend(tokenizer, vocab_size=, stop_token_ids=, max_whitespace=,
property_order=)` builds
the llguidance `LLTokenizer` ONCE (its token trie, ≈1 s on Qwen), with every stop id as an
EOS token and the tokenizer's non-text entries (grammars.vocabulary) as special tokens, so
no mask allows them. `compile(spec)` turns the spec into an llguidance grammar and builds one template
`LLMatcher` (the lexer and parser tables; no up-front expansion of length bounds, which is
what makes xgrammar take seconds on `maxLength`-heavy schemas); `matcher()` hands each
request a `deep_copy` of it. JSON follows the policy of grammars.json.policy exactly as the
xgrammar backend does:
- objects and arrays that constrain no members admit any (`open_memberless`); otherwise no
  properties beyond the listed ones and no items past `prefixItems` unless the schema says
  so (`close_unlisted`, xgrammar's `strict_mode`), unless `allow_extra_properties`;
- then what llguidance would have to intersect with a `$ref` is resolved first
  (grammars.backends.llguidance.ref_siblings): it cannot when the `$ref` is recursive, and refused such
  schemas (WashingtonPost's took 20-23 s on auto's xgrammar fallback);
- whitespace goes where `json_whitespace` says (grammars.json.layout): "conventional" (the
  default) writes objects, arrays and free-form values as the lark rules below, with no
  whitespace before `,` / `:`, since llguidance's own JSON whitespace is a lexer skip that
  comes before separators too; "flexible" is that skip;
- whitespace runs are bounded at `max_whitespace` characters of `[ \\t\\n\\r]` by a
  WhitespaceCap on the matcher (llguidance repeats its whitespace lexeme without bound, so
  its own pattern cannot bound a gap; vLLM #38696); the cap also bounds runs of spaces
  inside strings, the one place this language is narrower than xgrammar's;
- the formats grammars.json.policy enforces that llguidance does not implement
  (`uri-reference`, `uri-template`, `json-pointer`, `relative-json-pointer`) become
  patterns (grammars.backends.llguidance.formats), so a strict schema's format is enforced here too;
- keywords llguidance does not implement are ignored (`lenient`); `oneOf` is `anyOf`
  (`coerce_one_of`), as the policy documents; remote `$ref` is a GrammarError;
- objects whose members the JSON compiler would place too narrowly become parametric lark
  rules (grammars.backends.llguidance.object_rules): additional properties anywhere between listed ones,
  listed ones in any order under `property_order="any"`, number constants in every
  spelling of their value; the rest of the schema stays `%json` leaves. Where llguidance
  will not take those rules, the JSON compiler's grammar is used; a string whose `pattern` is
  a search is written beside its sliceable twin (grammars.backends.llguidance.search_strings), the same
  language with masks inside it ~40x cheaper;
- the token trie's slices (`SLICES`) add bounds of 2-20 plain characters to llguidance's JSON
  slices, so fills near the end of a `maxLength` string add precomputed token sets instead of
  walking the whole trie (exact either way: a slice is used only where the lexer admits all
  of it);
- `\\uXXXX` escapes of printable characters (`"\\u00e9"`, what `json.dumps` writes by default)
  are admitted in strings and keys without `pattern` / `format` when the installed
  llguidance has `json_allow_general_unicode_escapes` (1.8+; probed once, `UNICODE_ESCAPES`);
  llguidance 1.7 admits `\\u` escapes of control characters only (a model writes the
  character itself).
Library errors become GrammarError naming the kind and llguidance's reason. A refused token
leaves the matcher unchanged (`try_consume_tokens`, never the error state).

Knows nothing of caching, timeouts, sampling or HTTP.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import llguidance
import llguidance.hf
import torch

from grammars.backends.llguidance.closure import close_unlisted
from grammars.backends.llguidance.formats import FORMAT_PATTERNS, formats_as_patterns
from grammars.backends.llguidance.object_rules import (
    PROPERTY_ORDERS,
    PropertyOrder,
    object_rules_grammar,
)
from grammars.backends.llguidance.ref_siblings import resolve_ref_siblings
from grammars.backends.llguidance.search_strings import PLAIN
from grammars.errors import GrammarError
from grammars.json.layout import DEFAULT_JSON_WHITESPACE, JsonWhitespace
from grammars.json.policy import check_refs_local, open_memberless
from grammars.matcher import Matcher
from grammars.spec import GrammarSpec
from grammars.vocabulary import TokenizerVocabulary
from grammars.whitespace import WhitespaceCap, WhitespaceRuns

_ERROR_PREFIX = re.compile(r"^(?:error|Error):?\s*")


def _supports_unicode_escapes() -> bool:
    """Whether this llguidance knows `json_allow_general_unicode_escapes` (added in 1.8)."""
    probe = llguidance.LLMatcher.grammar_from_json_schema(
        {"type": "string"}, defaults={"json_allow_general_unicode_escapes": True})  # type: ignore[arg-type]
    return not llguidance.LLMatcher.validate_grammar(probe)


UNICODE_ESCAPES = _supports_unicode_escapes()

# llguidance's slicer adds a whole precomputed token set where the lexer admits every token
# of a slice, instead of walking the token trie (~2 ms on Qwen). Its JSON slices bound plain
# string runs at 10, 30 and any length, so inside a string with `maxLength` fewer than 10
# characters from its end every fill walked the whole trie; the shorter bounds cover those.
SLICES = [r"[\x20\x0A\x0D\x09]+", *(f"{PLAIN}{{1,{n}}}" for n in (2, 4, 6, 8, 10, 15, 20, 30)),
          f"{PLAIN}+"]


def _satisfiable(schema: dict[str, Any]) -> bool:
    """False only when llguidance finds that no value satisfies `schema`."""
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema)
    except ValueError as exc:
        return "Unsatisfiable" not in str(exc)
    return "Unsatisfiable" not in llguidance.LLMatcher.validate_grammar(grammar)


@dataclass(frozen=True, slots=True)
class LLGuidanceGrammar:
    """A compiled llguidance grammar: its serialized text and a template matcher."""

    grammar: str  # llguidance's serialized grammar (JSON), what `LLMatcher` takes
    template: Any = None  # llguidance.LLMatcher at the start state; deep-copied per request
    json: bool = False  # JSON grammar: matchers cap whitespace runs


class LLGuidanceMatcher(Matcher):
    def __init__(self, matcher: Any, *, ws_cap: WhitespaceCap | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._matcher = matcher
        self._ws = WhitespaceRuns(ws_cap)

    def _accept(self, token_id: int) -> bool:
        run = self._ws.next(token_id)
        if run is None or self._matcher.try_consume_tokens([token_id]) != 1:
            return False
        self._ws.push(run)
        return True

    def _rollback(self, num_tokens: int) -> None:
        self._matcher.rollback(num_tokens)
        self._ws.pop(num_tokens)

    def _fill(self, bitmask: torch.Tensor, row: int) -> None:
        target = bitmask[row]
        self._matcher.unsafe_compute_mask_ptr(target.data_ptr(), target.numel() * 4)
        if self._matcher.is_error():  # never leave a row that allows everything or garbage
            target.zero_()
        else:
            self._ws.restrict_(target)

    def _is_complete(self) -> bool:
        return bool(self._matcher.is_accepting())

    def whitespace_run(self) -> int:
        return self._ws.run

    def _jump_forward(self) -> str:
        forced = bytes(self._matcher.compute_ff_bytes())
        for cut in range(len(forced), max(len(forced) - 4, -1), -1):  # whole UTF-8 chars only
            try:
                return forced[:cut].decode("utf-8")
            except UnicodeDecodeError:
                continue
        return ""


def _regex_escape(text: str) -> str:
    return re.sub(r"([\\.+*?()|\[\]{}^$#&\-~/\"])", r"\\\1", text)


class LLGuidanceBackend:
    name = "llguidance"
    library = "llguidance"
    supported_kinds = frozenset({"json_object", "json_schema", "regex", "choice"})

    def __init__(
        self,
        tokenizer: Any,
        *,
        vocab_size: int,
        stop_token_ids: Sequence[int],
        max_whitespace: int,
        allow_extra_properties: bool = False,
        property_order: PropertyOrder = "schema",
        vocabulary: TokenizerVocabulary | None = None,
        json_whitespace: JsonWhitespace = DEFAULT_JSON_WHITESPACE,
    ) -> None:
        if property_order not in PROPERTY_ORDERS:
            raise ValueError(f"property_order must be one of {PROPERTY_ORDERS}")
        self.vocab_size = vocab_size
        self.property_order = property_order
        self.json_whitespace = json_whitespace
        self.stop_token_ids = tuple(stop_token_ids)
        self.max_whitespace = max_whitespace
        self.allow_extra_properties = allow_extra_properties
        vocabulary = vocabulary if vocabulary is not None else TokenizerVocabulary(tokenizer)
        tokenizer_json = vocabulary.json_with_non_text_special()
        if vocabulary.non_text_ids and tokenizer_json is not None:
            # non-text entries (Qwen's `[PAD151665]`…) as special tokens: never in a mask
            self.tokenizer = llguidance.LLTokenizer(
                tokenizer_json, n_vocab=vocab_size, eos_token=list(stop_token_ids) or None,
                slices=SLICES)
        else:
            self.tokenizer = llguidance.hf.from_tokenizer(
                tokenizer, n_vocab=vocab_size, eos_token=list(stop_token_ids) or None,
                slices=SLICES)
        self._json_options: dict[str, Any] = {
            "whitespace_flexible": True,
            "coerce_one_of": True,
            "lenient": True,
        }
        if UNICODE_ESCAPES:
            self._json_options["json_allow_general_unicode_escapes"] = True
        self._ws_cap: WhitespaceCap | None = None
        self._cap_lock = threading.Lock()

    def grammar_text(self, spec: GrammarSpec) -> str:
        """The llguidance grammar (serialized) for `spec`; GrammarError if it cannot be built."""
        kind = spec.kind
        if kind == "json_object":
            if self.json_whitespace == "conventional":
                rules = self._object_rules({"type": "object"})
                if rules is not None:
                    return rules
            return str(llguidance.LLMatcher.grammar_from_json_schema(
                {"type": "object"}, defaults=self._json_options))  # type: ignore[arg-type]
        if kind == "json_schema":
            schema = spec.source_json
            check_refs_local(schema)
            schema = formats_as_patterns(schema, FORMAT_PATTERNS)  # formats llguidance ignores
            if not self.allow_extra_properties:
                schema = close_unlisted(open_memberless(schema))
            schema = resolve_ref_siblings(schema)  # intersections llguidance cannot do itself
            if schema is False:
                raise GrammarError("the JSON schema `false` admits no value")
            if schema is True:
                schema = {}
            grammar = self._object_rules(schema)
            if grammar is not None:
                return grammar
            try:
                return str(llguidance.LLMatcher.grammar_from_json_schema(
                    schema, defaults=self._json_options))  # type: ignore[arg-type]
            except ValueError as exc:
                raise GrammarError(f"cannot compile json_schema grammar: {exc}") from exc
        if kind == "regex":
            return str(llguidance.LLMatcher.grammar_from_regex(spec.source))
        if kind == "choice":
            choices = spec.source_json
            return str(llguidance.LLMatcher.grammar_from_regex(
                "|".join(f"({_regex_escape(str(c))})" for c in choices)))
        raise GrammarError(f"grammar kind '{kind}' is not supported by the llguidance backend")

    def _object_rules(self, schema: Any) -> str | None:
        """The schema's objects as parametric lark rules (grammars.backends.llguidance.object_rules), or None
        where the JSON compiler's grammar says the same or llguidance will not take the rules
        (that narrower grammar is then used). A leaf no value satisfies makes llguidance
        refuse the whole grammar: then the rules are written again leaving such leaves out."""
        rules = object_rules_grammar(schema, property_order=self.property_order,
                                     json_options=self._json_options,
                                     whitespace=self.json_whitespace)
        if rules is None:
            return None
        grammar = str(llguidance.LLMatcher.grammar_from_lark(rules))
        error = llguidance.LLMatcher.validate_grammar(grammar)
        if error and "Unsatisfiable" in error:
            rules = object_rules_grammar(schema, property_order=self.property_order,
                                         json_options=self._json_options,
                                         satisfiable=_satisfiable,
                                         whitespace=self.json_whitespace)
            if rules is None:
                return None
            grammar = str(llguidance.LLMatcher.grammar_from_lark(rules))
            error = llguidance.LLMatcher.validate_grammar(grammar)
        return None if error else grammar

    def compile(self, spec: GrammarSpec) -> tuple[LLGuidanceGrammar, int]:
        grammar = self.grammar_text(spec)
        template = llguidance.LLMatcher(self.tokenizer, grammar, log_level=0)
        if template.is_error():
            reason = " ".join(template.get_error().split())
            reason = _ERROR_PREFIX.sub("", reason)[:300]
            raise GrammarError(f"cannot compile {spec.kind} grammar: {reason}")
        # llguidance exposes no size; the grammar text bounds the lexer/parser tables' order
        is_json = spec.kind in ("json_schema", "json_object")
        return LLGuidanceGrammar(grammar, template, is_json), 4 * len(grammar) + 64 * 1024

    def serialize(self, handle: LLGuidanceGrammar) -> bytes | None:
        """Bytes for the disk cache: the serialized grammar (the matcher is rebuilt on load)."""
        return json.dumps({"grammar": handle.grammar, "json": handle.json}).encode()

    def deserialize(self, data: bytes) -> tuple[LLGuidanceGrammar, int]:
        record = json.loads(data)
        template = llguidance.LLMatcher(self.tokenizer, record["grammar"], log_level=0)
        if template.is_error():
            raise GrammarError(f"cannot load cached grammar: {template.get_error()[:200]}")
        grammar = LLGuidanceGrammar(record["grammar"], template, bool(record["json"]))
        return grammar, 4 * len(grammar.grammar) + 64 * 1024

    def whitespace_cap(self) -> WhitespaceCap:
        """The JSON whitespace cap (built on first use, ≈0.5 s; then shared)."""
        with self._cap_lock:
            if self._ws_cap is None:
                decode = self.tokenizer.decode_bytes
                vocab = [b"" if self.tokenizer.is_special_token(i) else decode([i])
                         for i in range(self.tokenizer.vocab_size)]
                self._ws_cap = WhitespaceCap(vocab, vocab_size=self.vocab_size,
                                             limit=self.max_whitespace, chars=b" \t\n\r")
            return self._ws_cap

    def matcher(
        self, handle: LLGuidanceGrammar, *, encode: Callable[[str], list[int]]
    ) -> Matcher:
        return LLGuidanceMatcher(
            handle.template.deep_copy(), ws_cap=self.whitespace_cap() if handle.json else None,
            vocab_size=self.vocab_size, stop_token_ids=self.stop_token_ids, encode=encode,
        )
