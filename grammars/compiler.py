"""GrammarCompiler: GrammarSpec → CompiledGrammar, with a byte-bounded LRU cache and a timeout.

Contract:
- One compiler per (tokenizer, backend): the backend's tokenizer tables (xgrammar
  TokenizerInfo ≈1.1 s on Qwen, the llguidance LLTokenizer, the outlines Vocabulary) are
  built once, in __init__. `backend="auto"` holds xgrammar and llguidance and tries, per
  spec, the backends `grammars.backends.selection.auto_backends` lists (JSON schema:
  llguidance, then xgrammar if llguidance refuses it; the rest: xgrammar);
  `CompiledGrammar.backend` names the one that compiled it.
- Concurrent `compile` calls for the same uncached spec share one compilation (the others
  wait for its result), so a burst of identical requests costs one compile.
- `compile(spec)` returns a CompiledGrammar or raises GrammarError (bad grammar, kind the
  backend does not support, or compilation past `compile_timeout_s`). A timed-out compile
  keeps running in its worker thread but its result is discarded, never half-used.
- `compile_async(spec)` does the same in a worker thread, keeping the event loop free.
- The cache key is (tokenizer fingerprint, backend, vocab_size, stop ids, max_whitespace,
  allow_extra_properties, property_order, json_whitespace, spec); entries are evicted least-recently-used once their summed size passes
  `cache_bytes`; `cache_info()` reports hits, misses, entries and bytes. A grammar larger
  than the whole budget is returned but not cached.
- With a `disk_cache` (grammars.disk_cache; `enable_disk_cache(directory, max_bytes=)`),
  a grammar missing from memory is loaded from disk when a file for the same tokenizer
  fingerprint, policy options, TRANSLATION_VERSION, backend + library version and spec
  exists, else compiled and
  written there (backends with `serialize`/`deserialize`: xgrammar, llguidance; SQL
  grammars with a whitespace cap are not written). A corrupt file is a miss (recompiled).
  `CompiledGrammar.from_disk` says which happened.
- `json_whitespace` is where JSON may put whitespace (grammars.json.layout):
  "conventional" (default: never before `,` / `:`) or "flexible" (between any two tokens).
- `vocab_size` is the model's logits width (151,936 for Qwen2.5); mask rows have
  ceil(vocab_size/32) int32 words and ids the tokenizer lacks are never allowed.
- Schema-aware SQL (a `sql` spec with a `schema`) gets the identifier-scope layer here, on
  top of whichever backend compiled the grammar (grammars.sql.mask.matcher): the schema's
  scope view is made at compile time (`CompiledGrammar.scope`, shared by its matchers) and
  the layer's vocabulary view once per backend (over the backend's `decoded_vocab`), off
  the first request's first mask.

Knows nothing of sampling, engines or HTTP.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import hashlib
import importlib.metadata
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from grammars.backends.llguidance.object_rules import PROPERTY_ORDERS, PropertyOrder
from grammars.backends.selection import BACKENDS, auto_backends, make_backend
from grammars.disk_cache import DiskGrammarCache
from grammars.errors import GrammarError
from grammars.json.layout import DEFAULT_JSON_WHITESPACE, JsonWhitespace, check_json_whitespace
from grammars.matcher import Matcher
from grammars.spec import GrammarSpec
from grammars.sql.mask.matcher import prepare_vocab, scoped_sql_matcher, sql_scope_schema
from grammars.sql.mask.vocab import SqlVocab
from grammars.sql.scope import SqlSchema
from grammars.stop_tokens import stop_token_ids as stop_token_ids_for
from grammars.vocabulary import TokenizerVocabulary


@dataclass(frozen=True, slots=True)
class CacheInfo:
    hits: int
    misses: int
    entries: int
    bytes: int
    max_bytes: int


@dataclass(eq=False)
class CompiledGrammar:
    """A compiled grammar; cheap to share across requests, `matcher()` per request."""

    spec: GrammarSpec
    backend: str
    memory_bytes: int
    compile_time_s: float
    _handle: Any = field(repr=False)
    _compiler: GrammarCompiler = field(repr=False)
    from_disk: bool = False  # loaded from the DiskGrammarCache, not compiled
    scope: SqlSchema | None = field(default=None, repr=False)  # schema-aware SQL: the scope layer's schema

    @functools.cached_property
    def family(self) -> str:
        """What metrics and benchmarks group this grammar's costs by: the spec's kind, with
        schema-aware SQL (a `schema` given, so the identifier-scope layer runs) as `sql_schema`."""
        if self.spec.kind == "sql" and self.spec.source_json.get("schema") is not None:
            return "sql_schema"
        return self.spec.kind

    @functools.cached_property
    def pacing_family(self) -> str:
        """What an engine's learned pacing (output lengths, draft acceptance) may generalize
        over: the family, with what shapes the output beyond the schema (the SQL dialect, the
        tool-choice mode): "sql_schema:sqlite", "tools:required", "json_schema". Never the
        schema itself: every new schema is a new grammar, and its family is not new."""
        if self.spec.kind == "sql":
            return f"{self.family}:{self.spec.source_json.get('dialect', 'sqlite')}"
        if self.spec.kind == "tools":
            return f"tools:{self.spec.source_json.get('mode', 'auto')}"
        return self.family

    def matcher(self) -> Matcher:
        compiler = self._compiler
        matcher: Matcher = compiler._get_backend(self.backend).matcher(self._handle, encode=compiler.encode)
        if self.scope is None:
            return matcher
        return scoped_sql_matcher(matcher, schema=self.scope, vocab=compiler._sql_vocab(self.backend))


# bumped whenever specgate's own translation of a spec into a backend grammar changes, so a
# grammar persisted by an older specgate is never read back (2: grammars.json.fold on xgrammar;
# 3: grammars.backends.llguidance.object_rules on llguidance; 4: its members only where the object can still
# close; 5: search-pattern strings with their sliceable twins, grammars.backends.llguidance.search_strings;
# 6: percent-encoded `$ref` fragments resolved; 7: keywords beside a `$ref` resolved first,
# grammars.backends.llguidance.ref_siblings; 8: and a `$ref` beside keywords defined as their conjunction)
TRANSLATION_VERSION = 8


def _library_version(backend: Any) -> str:
    library = getattr(backend, "library", None)
    if library is None:
        return "?"
    try:
        return importlib.metadata.version(library)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def tokenizer_fingerprint(tokenizer: Any, vocab_size: int, stop_token_ids: Sequence[int]) -> str:
    digest = hashlib.sha256()
    for token, token_id in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1]):
        digest.update(f"{token_id}\x00{token}\x01".encode("utf-8", "surrogatepass"))
    digest.update(f"V={vocab_size};stop={list(stop_token_ids)}".encode())
    return digest.hexdigest()[:16]


class GrammarCompiler:
    def __init__(
        self,
        tokenizer: Any,
        *,
        backend: Literal["xgrammar", "llguidance", "outlines", "auto"] = "xgrammar",
        vocab_size: int | None = None,
        stop_token_ids: Sequence[int] | None = None,
        cache_bytes: int = 256 * 1024 * 1024,
        compile_timeout_s: float = 60.0,
        max_whitespace: int = 16,
        max_threads: int = 2,
        allow_extra_properties: bool = False,
        property_order: PropertyOrder = "schema",
        disk_cache: DiskGrammarCache | None = None,
        json_whitespace: JsonWhitespace = DEFAULT_JSON_WHITESPACE,
    ) -> None:
        if cache_bytes < 0 or compile_timeout_s <= 0 or max_whitespace < 0:
            raise ValueError("cache_bytes, compile_timeout_s and max_whitespace must be positive")
        self.tokenizer = tokenizer
        tokenizer_size = max(len(tokenizer), max(tokenizer.get_vocab().values()) + 1)
        self.vocab_size = int(vocab_size if vocab_size is not None else tokenizer_size)
        if self.vocab_size < tokenizer_size:
            raise ValueError(
                f"vocab_size {self.vocab_size} is smaller than the tokenizer ({tokenizer_size})"
            )
        self.stop_token_ids = tuple(
            stop_token_ids if stop_token_ids is not None else stop_token_ids_for(tokenizer)
        )
        self.backend_name = backend
        self.cache_bytes = cache_bytes
        self.compile_timeout_s = compile_timeout_s
        self.max_whitespace = max_whitespace
        self.allow_extra_properties = allow_extra_properties
        if property_order not in PROPERTY_ORDERS:
            raise ValueError(f"property_order must be one of {PROPERTY_ORDERS}")
        self.property_order = property_order
        self.json_whitespace = check_json_whitespace(json_whitespace)
        self.disk_cache = disk_cache
        self.fingerprint = tokenizer_fingerprint(tokenizer, self.vocab_size, self.stop_token_ids)
        if backend not in BACKENDS:
            raise GrammarError(f"unknown grammar backend {backend!r} ({' | '.join(BACKENDS)})")
        # non-text vocabulary entries (Qwen's `[PAD151665]`…) and special control tokens are
        # never allowed by any backend's mask (grammars.vocabulary), stop tokens aside
        self.vocabulary = TokenizerVocabulary(tokenizer)
        self._backend_options: dict[str, Any] = {
            "vocab_size": self.vocab_size, "stop_token_ids": self.stop_token_ids,
            "vocabulary": self.vocabulary,
            "max_whitespace": max_whitespace, "max_threads": max_threads,
            "allow_extra_properties": allow_extra_properties,
            "property_order": property_order,
            "json_whitespace": self.json_whitespace,
        }
        self._backends: dict[str, Any] = {}
        self._sql_vocabs: dict[str, SqlVocab] = {}  # per backend, on the first schema-aware SQL grammar
        self._backend_lock = threading.Lock()
        for name in ("xgrammar", "llguidance") if backend == "auto" else (backend,):
            self._get_backend(name)  # tokenizer tables once, up front (≈1 s each on Qwen)
        self._max_threads = max_threads
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_threads, thread_name_prefix="grammar-compile"
        )
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[Any, ...], CompiledGrammar] = OrderedDict()
        self._cache_used = 0
        self._pending: dict[tuple[Any, ...], concurrent.futures.Future[CompiledGrammar]] = {}
        self._hits = 0
        self._misses = 0

    def _get_backend(self, name: str) -> Any:
        with self._backend_lock:
            backend = self._backends.get(name)
            if backend is None:
                backend = make_backend(name, self.tokenizer, **self._backend_options)
                self._backends[name] = backend
            return backend

    def _sql_vocab(self, name: str) -> SqlVocab:
        """The scope layer's view of backend `name`'s vocabulary (built once, ~0.5 s on Qwen)."""
        backend = self._get_backend(name)
        with self._backend_lock:
            vocab = self._sql_vocabs.get(name)
            if vocab is None:
                decoded = getattr(backend, "decoded_vocab", None)
                if decoded is None:
                    raise GrammarError(f"schema-aware SQL needs a backend with a decoded vocabulary, not {name}")
                vocab = self._sql_vocabs[name] = SqlVocab(decoded, vocab_size=self.vocab_size)
        return vocab

    def _scope_for(self, name: str, spec: GrammarSpec) -> SqlSchema | None:
        """Schema-aware SQL: the scope layer's schema, its vocabulary view prepared now."""
        schema = spec.source_json.get("schema") if spec.kind == "sql" else None
        if schema is None:
            return None
        prepare_vocab(self._sql_vocab(name))
        return sql_scope_schema(schema["tables"])

    def enable_disk_cache(self, directory: str | os.PathLike[str], *, max_bytes: int) -> None:
        """Persist compiled grammars under `directory` (at most `max_bytes` of files)."""
        self.disk_cache = DiskGrammarCache(directory, max_bytes=max_bytes)

    def _disk_key(self, name: str, spec: GrammarSpec) -> str:
        return DiskGrammarCache.key(
            self.fingerprint, self.vocab_size, self.stop_token_ids, self.max_whitespace,
            self.allow_extra_properties, self.property_order, TRANSLATION_VERSION, name,
            self.json_whitespace,
            _library_version(self._get_backend(name)), spec)

    def _from_disk(self, name: str, spec: GrammarSpec) -> tuple[Any, int] | None:
        if self.disk_cache is None or not hasattr(self._get_backend(name), "deserialize"):
            return None
        data = self.disk_cache.get(self._disk_key(name, spec))
        if data is None:
            return None
        try:
            return self._get_backend(name).deserialize(data)  # type: ignore[no-any-return]
        except Exception:  # noqa: BLE001 - an unreadable entry is a miss: recompile
            self.disk_cache.errors += 1
            return None

    def _to_disk(self, name: str, spec: GrammarSpec, handle: Any) -> None:
        backend = self._get_backend(name)
        if self.disk_cache is None or not hasattr(backend, "serialize"):
            return
        data = backend.serialize(handle)
        if data is not None:
            self.disk_cache.put(self._disk_key(name, spec), data)

    @property
    def supported_kinds(self) -> frozenset[str]:
        return frozenset().union(*(b.supported_kinds for b in self._backends.values()))

    def backends_for(self, spec: GrammarSpec) -> tuple[str, ...]:
        """The backends that may compile `spec`, tried in order: the configured one, or
        under "auto" `grammars.backends.selection.auto_backends` (llguidance first for JSON
        schemas, xgrammar when llguidance refuses the schema; xgrammar for the rest)."""
        if self.backend_name != "auto":
            return (self.backend_name,)
        return auto_backends(spec)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _key(self, spec: GrammarSpec) -> tuple[Any, ...]:
        return (self.fingerprint, self.backend_name, self.vocab_size, self.stop_token_ids,
                self.max_whitespace, self.allow_extra_properties, self.property_order,
                self.json_whitespace, spec)

    def compile(self, spec: GrammarSpec) -> CompiledGrammar:
        if not isinstance(spec, GrammarSpec):
            raise TypeError(f"compile() takes a GrammarSpec, got {type(spec).__name__}")
        names = self.backends_for(spec)
        supported = [n for n in names if spec.kind in self._get_backend(n).supported_kinds]
        if not supported:
            kinds = self._get_backend(names[0]).supported_kinds
            raise GrammarError(
                f"grammar kind '{spec.kind}' is not supported by the {names[0]} "
                f"backend (supported: {', '.join(sorted(kinds))})"
            )
        key = self._key(spec)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                self._hits += 1
                return cached
            self._misses += 1
            pending = self._pending.get(key)
            owner = pending is None
            if owner:
                pending = self._pending[key] = concurrent.futures.Future()
        assert pending is not None
        if not owner:  # the same spec is compiling for another request: share its result
            try:
                return pending.result(timeout=self.compile_timeout_s)
            except concurrent.futures.TimeoutError as exc:
                raise GrammarError(f"{spec.kind} grammar compilation exceeded "
                                   f"{self.compile_timeout_s:g} s") from exc
        try:
            compiled = self._compile_first(spec, supported)
        except BaseException as exc:
            pending.set_exception(exc)
            raise
        else:
            pending.set_result(compiled)
            self._insert(key, compiled)
            return compiled
        finally:
            with self._lock:
                self._pending.pop(key, None)

    def _compile_first(self, spec: GrammarSpec, names: Sequence[str]) -> CompiledGrammar:
        """Compile with the first backend that accepts `spec` within the time limit."""
        start = time.perf_counter()
        first_error: GrammarError | None = None
        for name in names:
            remaining = self.compile_timeout_s - (time.perf_counter() - start)
            loaded = self._from_disk(name, spec)
            if loaded is not None:
                handle, size = loaded
                return CompiledGrammar(spec, name, size, time.perf_counter() - start, handle, self,
                                       from_disk=True, scope=self._scope_for(name, spec))
            try:
                handle, size = self._run(self._get_backend(name).compile, spec, remaining)
            except GrammarError as exc:
                first_error = first_error or exc
                continue
            self._to_disk(name, spec, handle)
            return CompiledGrammar(spec, name, size, time.perf_counter() - start, handle, self,
                                   scope=self._scope_for(name, spec))
        assert first_error is not None
        raise first_error

    def _run(self, fn: Any, spec: GrammarSpec, timeout: float) -> tuple[Any, int]:
        if timeout <= 0:
            raise GrammarError(
                f"{spec.kind} grammar compilation exceeded {self.compile_timeout_s:g} s")
        future = self._executor.submit(fn, spec)
        try:
            return future.result(timeout=timeout)  # type: ignore[no-any-return]
        except concurrent.futures.TimeoutError as exc:
            # the backend call cannot be interrupted: give it up to its thread and move on to a
            # fresh pool, so later compiles never queue behind a runaway one
            with self._lock:
                self._executor.shutdown(wait=False)
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self._max_threads, thread_name_prefix="grammar-compile"
                )
            raise GrammarError(
                f"{spec.kind} grammar compilation exceeded {self.compile_timeout_s:g} s"
            ) from exc

    async def compile_async(self, spec: GrammarSpec) -> CompiledGrammar:
        return await asyncio.to_thread(self.compile, spec)

    def _insert(self, key: tuple[Any, ...], compiled: CompiledGrammar) -> None:
        if compiled.memory_bytes > self.cache_bytes:
            return
        with self._lock:
            if key in self._cache:
                return
            self._cache[key] = compiled
            self._cache_used += compiled.memory_bytes
            while self._cache_used > self.cache_bytes:
                _, evicted = self._cache.popitem(last=False)
                self._cache_used -= evicted.memory_bytes

    def cache_info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self._hits, self._misses, len(self._cache), self._cache_used,
                             self.cache_bytes)

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()
            self._cache_used = 0

    def allocate_bitmask(self, rows: int) -> Any:  # -> int32 [rows, ceil(V/32)], all allowed
        from tokenmask import allocate_token_bitmask

        return allocate_token_bitmask(rows, self.vocab_size)
