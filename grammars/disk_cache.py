"""DiskGrammarCache: compiled grammars persisted across restarts, one file per grammar.

Contract:
- `DiskGrammarCache(directory, max_bytes=)`; `key(*parts)` hashes the identity of a compiled
  grammar (the compiler passes: tokenizer fingerprint, vocab size, stop ids, policy options,
  the backend that compiled it with its library version, the spec), so a different
  tokenizer, backend, library version or spec never reads another's file.
- `get(key) -> bytes | None` returns the stored payload, or None when absent, unreadable
  or corrupt (a file whose header or checksum does not match is deleted: the caller
  recompiles). `put(key, payload)` writes atomically (temp file + rename) and then evicts the
  least recently used files (by mtime; `get` touches) until the directory's `.grammar`
  files sum to at most `max_bytes`. A payload larger than `max_bytes` is not stored.
- I/O errors never propagate: the cache is an optimization; a failure is a miss.
- `hits`, `misses`, `errors` count outcomes (pure statistics; nothing is logged here).

Knows nothing of backends, grammars or tokenizers: payloads are opaque bytes.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import tempfile

_MAGIC = b"specgate-grammar-v1\n"
_SUFFIX = ".grammar"


class DiskGrammarCache:
    def __init__(self, directory: str | os.PathLike[str], *, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.directory = pathlib.Path(directory).expanduser()
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        self.errors = 0

    @staticmethod
    def key(*parts: object) -> str:
        digest = hashlib.sha256()
        for part in parts:
            digest.update(repr(part).encode("utf-8", "surrogatepass"))
            digest.update(b"\x00")
        return digest.hexdigest()[:40]

    def _path(self, key: str) -> pathlib.Path:
        return self.directory / f"{key}{_SUFFIX}"

    def get(self, key: str) -> bytes | None:
        path = self._path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self.misses += 1
            return None
        except OSError:
            self.errors += 1
            return None
        header_end = len(_MAGIC) + 64
        payload = data[header_end:]
        if (not data.startswith(_MAGIC)
                or data[len(_MAGIC):header_end] != hashlib.sha256(payload).hexdigest().encode()):
            self.errors += 1
            path.unlink(missing_ok=True)  # corrupt: drop it, the caller recompiles
            return None
        try:
            os.utime(path)  # recently used
        except OSError:
            pass
        self.hits += 1
        return payload

    def put(self, key: str, payload: bytes) -> None:
        if len(payload) + len(_MAGIC) + 64 > self.max_bytes:
            return
        data = _MAGIC + hashlib.sha256(payload).hexdigest().encode() + payload
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, self._path(key))
            self._evict()
        except OSError:
            self.errors += 1

    def _evict(self) -> None:
        entries = []
        for path in self.directory.glob(f"*{_SUFFIX}"):
            try:
                stat = path.stat()
            except OSError:
                continue
            entries.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size


__all__ = ["DiskGrammarCache"]
