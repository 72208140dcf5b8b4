"""xgrammar backend (default): every grammar kind, masks written by xgrammar in C++.

Contract: `XGrammarBackend(tokenizer, vocab_size=, stop_token_ids=, max_whitespace=)` builds
the xgrammar TokenizerInfo ONCE (≈1.1 s on Qwen; non-text entries and special control
tokens encoded as "" so no mask allows them: `text_tokenizer_info`, grammars.vocabulary)
and an uncached xgrammar compiler (the specgate compiler owns the cache). JSON-schema grammars
(after `fold_combinators`: xgrammar drops a schema's own keywords beside `anyOf` / `oneOf`
and compiles a multi-member `allOf` as any value; then `open_memberless`) use xgrammar's
`strict_mode` unless
`allow_extra_properties` (objects/arrays without `additionalProperties` / `items` admit no
extra members: what vLLM does, and 100× faster to compile than the permissive form;
"json_object" always admits any object), and
`max_whitespace_cnt=max_whitespace` (bounded whitespace runs, vLLM #38696); under
`json_whitespace="conventional"` (grammars.json.layout) the JSON EBNF loses its whitespace
before `,` and `:` and is compiled as a grammar (tool arguments too). Library errors
become GrammarError naming the kind and xgrammar's reason. EBNF text goes through
`normalize_ebnf` (GBNF empty alternatives) and Lark text through `normalize_lark` (rule /
terminal priorities dropped) first. SQL grammars come back wrapped (`_WithWhitespaceCap`):
their matchers cap whitespace runs (see grammars.sql.grammar), and their `grammar` (read by
engine.vllm) writes the same bound as nested optionals (grammars.sql.grammar.sql_ebnf_bounded; string
literals uncapped there). The identifier-scope layer of schema-aware SQL is not this
backend's: the compiler puts it on the matchers (grammars.compiler), over `decoded_vocab`.

Knows nothing of caching, timeouts, sampling or HTTP.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import xgrammar as xgr

from grammars.backends.xgrammar.grammar_text import normalize_ebnf, normalize_lark
from grammars.errors import GrammarError
from grammars.json.fold import fold_combinators
from grammars.json.layout import DEFAULT_JSON_WHITESPACE, JsonWhitespace, conventional_ebnf
from grammars.json.policy import check_refs_local, open_memberless
from grammars.matcher import Matcher
from grammars.spec import GrammarSpec
from grammars.sql.grammar import SQL_MAX_WHITESPACE, sql_ebnf, sql_ebnf_bounded
from grammars.tools import structural_tag
from grammars.vocabulary import TokenizerVocabulary
from grammars.whitespace import WhitespaceCap, WhitespaceRuns


class XGrammarMatcher(Matcher):
    def __init__(self, compiled: xgr.CompiledGrammar, *,
                 ws_cap: WhitespaceCap | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._matcher = xgr.GrammarMatcher(
            compiled, override_stop_tokens=list(self.stop_token_ids), max_rollback_tokens=-1
        )
        self._ws = WhitespaceRuns(ws_cap)

    def _accept(self, token_id: int) -> bool:
        run = self._ws.next(token_id)
        if run is None or not self._matcher.accept_token(token_id):
            return False
        self._ws.push(run)
        return True

    def _rollback(self, num_tokens: int) -> None:
        self._matcher.rollback(num_tokens)
        self._ws.pop(num_tokens)

    def _fill(self, bitmask: torch.Tensor, row: int) -> None:
        self._matcher.fill_next_token_bitmask(bitmask, row)
        self._ws.restrict_(bitmask[row])

    def _is_complete(self) -> bool:
        return bool(self._matcher.is_completed())

    def whitespace_run(self) -> int:
        return self._ws.run

    def _jump_forward(self) -> str:
        return str(self._matcher.find_jump_forward_string())


def _error_reason(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    reason = lines[-1] if lines else type(exc).__name__
    # xgrammar prefixes "[time] /path/file.cc:line: "; keep the message itself
    if ".cc:" in reason:
        reason = reason.split(".cc:", 1)[1].split(": ", 1)[-1]
    return reason


def text_tokenizer_info(tokenizer: Any, *, vocab_size: int, stop_token_ids: Sequence[int],
                        excluded: Sequence[int]) -> xgr.TokenizerInfo:
    """xgrammar's TokenizerInfo with the `excluded` ids (grammars.vocabulary: non-text entries,
    special control tokens) encoded as "", which xgrammar takes for special tokens: never in
    a mask, never accepted. `from_huggingface` alone reads them as their literal text."""
    info = xgr.TokenizerInfo.from_huggingface(
        tokenizer, vocab_size=vocab_size, stop_token_ids=list(stop_token_ids))
    if not excluded:
        return info
    encoded = [""] * vocab_size
    for token, token_id in tokenizer.get_vocab().items():
        if token_id < vocab_size:
            encoded[token_id] = token
    for token_id in excluded:
        if token_id < vocab_size:
            encoded[token_id] = ""
    return xgr.TokenizerInfo(encoded, info.vocab_type, vocab_size=vocab_size,
                             stop_token_ids=list(stop_token_ids),
                             add_prefix_space=info.add_prefix_space)


def choice_ebnf(choices: Sequence[str]) -> str:
    return "root ::= " + " | ".join(f"({json.dumps(choice)})" for choice in choices)


class XGrammarBackend:
    name = "xgrammar"
    library = "xgrammar"
    supported_kinds = frozenset(
        {"json_object", "json_schema", "regex", "choice", "ebnf", "lark", "tools", "sql"}
    )

    def __init__(
        self,
        tokenizer: Any,
        *,
        vocab_size: int,
        stop_token_ids: Sequence[int],
        max_whitespace: int,
        max_threads: int = 2,
        allow_extra_properties: bool = False,
        vocabulary: TokenizerVocabulary | None = None,
        json_whitespace: JsonWhitespace = DEFAULT_JSON_WHITESPACE,
    ) -> None:
        self.vocab_size = vocab_size
        self.allow_extra_properties = allow_extra_properties
        self.json_whitespace = json_whitespace
        self.stop_token_ids = tuple(stop_token_ids)
        self.max_whitespace = max_whitespace
        vocabulary = vocabulary if vocabulary is not None else TokenizerVocabulary(tokenizer)
        self.tokenizer_info = text_tokenizer_info(
            tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids,
            excluded=vocabulary.excluded_ids(stop_token_ids))
        self._compiler = xgr.GrammarCompiler(
            self.tokenizer_info, max_threads=max_threads, cache_enabled=False
        )
        self._ws_caps: dict[tuple[bytes, int], WhitespaceCap] = {}  # built on first use (~0.5 s)
        self._cap_lock = threading.Lock()

    def compile(self, spec: GrammarSpec) -> tuple[xgr.CompiledGrammar | _WithWhitespaceCap, int]:
        try:
            compiled = self._compile(spec)
        except GrammarError:
            raise
        except Exception as exc:  # xgrammar raises RuntimeError / ValueError / its own types
            raise GrammarError(f"cannot compile {spec.kind} grammar: {_error_reason(exc)}") from exc
        inner = compiled.compiled if isinstance(compiled, _WithWhitespaceCap) else compiled
        return compiled, int(inner.memory_size_bytes)

    def serialize(self, handle: Any) -> bytes | None:
        """Bytes for the disk cache (None: not cacheable, e.g. a SQL grammar with its cap)."""
        if not isinstance(handle, xgr.CompiledGrammar):
            return None
        return handle.serialize_json().encode()

    def deserialize(self, data: bytes) -> tuple[xgr.CompiledGrammar, int]:
        compiled = xgr.CompiledGrammar.deserialize_json(data.decode(), self.tokenizer_info)
        return compiled, int(compiled.memory_size_bytes)

    def _whitespace_cap(self, chars: bytes, limit: int) -> WhitespaceCap:
        with self._cap_lock:
            cap = self._ws_caps.get((chars, limit))
            if cap is None:
                cap = WhitespaceCap(self.tokenizer_info.decoded_vocab, vocab_size=self.vocab_size,
                                    limit=limit, chars=chars)
                self._ws_caps[(chars, limit)] = cap
            return cap

    @property
    def decoded_vocab(self) -> list[bytes]:
        """Each id's bytes as this backend's masks read them (special and non-text ids: b"")."""
        return self.tokenizer_info.decoded_vocab  # type: ignore[no-any-return]

    def _compile(self, spec: GrammarSpec) -> xgr.CompiledGrammar | _WithWhitespaceCap:
        # JSON whitespace stays bounded by xgrammar itself (`{0,n}`), not by WhitespaceCap,
        # though that would make masks ~4x cheaper (p50 66 -> 14 us): the cap also bounds
        # space runs inside strings, and engine.vllm recompiles `grammar` and needs the
        # identical language.
        json_options: dict[str, Any] = {
            "any_whitespace": True,
            "strict_mode": not self.allow_extra_properties,
            "max_whitespace_cnt": self.max_whitespace,
        }
        kind = spec.kind
        if kind == "json_object":
            return self._compile_json('{"type": "object"}', {**json_options, "strict_mode": False})
        if kind == "json_schema":
            source = json.dumps(self._prepared_schema(spec.source_json))
            return self._compile_json(source, json_options)
        if kind == "regex":
            return self._compiler.compile_regex(spec.source)
        if kind == "choice":
            return self._compiler.compile_grammar(choice_ebnf(spec.source_json))
        if kind == "ebnf":
            return self._compiler.compile_grammar(normalize_ebnf(spec.source))
        if kind == "lark":
            return self._compiler.compile_lark(normalize_lark(spec.source))
        if kind == "tools":
            return self._compile_tools(spec, json_options)
        if kind == "sql":
            schema = spec.source_json["schema"]
            ebnf = sql_ebnf(None if schema is None else schema["tables"])
            return _WithWhitespaceCap(
                self._compiler.compile_grammar(ebnf), b" \t\n", SQL_MAX_WHITESPACE,
                lambda: xgr.Grammar.from_ebnf(sql_ebnf_bounded(ebnf)))
        raise GrammarError(f"grammar kind '{kind}' is not supported by the xgrammar backend")

    def _json_ebnf(self, source: str, json_options: dict[str, Any]) -> str:
        """The conventional layout's EBNF for a JSON schema (grammars.json.layout)."""
        return conventional_ebnf(str(xgr.Grammar.from_json_schema(source, **json_options)))

    def _compile_json(self, source: str, json_options: dict[str, Any]) -> xgr.CompiledGrammar:
        if self.json_whitespace == "flexible":
            return self._compiler.compile_json_schema(source, **json_options)
        return self._compiler.compile_grammar(self._json_ebnf(source, json_options))

    def _prepared_schema(self, schema: Any) -> Any:
        """A JSON schema as this backend compiles it (grammars.json.policy's rules 1 and 5)."""
        check_refs_local(schema)
        folded = fold_combinators(schema)
        return folded if self.allow_extra_properties else open_memberless(folded)

    def _compile_tools(self, spec: GrammarSpec, json_options: dict[str, Any]) -> xgr.CompiledGrammar:
        """The tools grammar; a tool whose parameters cannot be compiled is named."""
        entries = spec.source_json["tools"]
        prepared: list[Any] = []
        for entry in entries:
            try:
                prepared.append(self._prepared_schema(entry["parameters"]))
            except GrammarError as exc:
                raise _tool_error(entry, exc.message) from exc
        grammars: list[str] | None = None
        if self.json_whitespace != "flexible":
            grammars = []
            for entry, schema in zip(entries, prepared, strict=True):
                try:
                    grammars.append(self._json_ebnf(json.dumps(schema), json_options))
                except Exception as exc:
                    raise _tool_error(entry, _error_reason(exc)) from exc
        tag = structural_tag(spec, max_whitespace=self.max_whitespace, schemas=prepared,
                             argument_grammars=grammars)
        try:
            return self._compiler.compile_structural_tag(json.dumps(tag))
        except Exception as whole:
            for entry, schema in zip(entries, prepared, strict=True):  # which tool is it?
                try:
                    self._compiler.compile_json_schema(json.dumps(schema), **json_options)
                except Exception as exc:
                    raise _tool_error(entry, _error_reason(exc)) from exc
            raise whole

    def matcher(
        self, handle: xgr.CompiledGrammar | _WithWhitespaceCap, *,
        encode: Callable[[str], list[int]],
    ) -> Matcher:
        if isinstance(handle, _WithWhitespaceCap):
            return XGrammarMatcher(
                handle.compiled, ws_cap=self._whitespace_cap(handle.chars, handle.limit),
                vocab_size=self.vocab_size,
                stop_token_ids=self.stop_token_ids, encode=encode,
            )
        return XGrammarMatcher(
            handle, vocab_size=self.vocab_size, stop_token_ids=self.stop_token_ids, encode=encode
        )


def _tool_error(entry: dict[str, Any], reason: str) -> GrammarError:
    return GrammarError(f"cannot enforce the parameters of tool '{entry['name']}': {reason}",
                        param=f"tools[{entry['index']}].function.parameters")


@dataclass(frozen=True, slots=True)
class _WithWhitespaceCap:
    """A compiled grammar whose matchers cap runs of `chars` at `limit` (WhitespaceCap).

    `grammar` is the same language with the bound written into the grammar (xgrammar's
    `{0,n}`), for consumers that recompile the text without our matcher (engine.vllm)."""

    compiled: xgr.CompiledGrammar
    chars: bytes
    limit: int
    bounded: Callable[[], xgr.Grammar] = field(compare=False, repr=False)

    @property
    def grammar(self) -> xgr.Grammar:
        return self.bounded()
