"""Grammar backends: each turns a GrammarSpec into a compiled object and Matchers over it.

A backend module exposes a class with `supported_kinds`, `compile(spec) -> (handle, bytes)`
and `matcher(handle) -> Matcher`. The compiler (grammars.compiler) owns caching, timeouts
and the tokenizer fingerprint; backends own only the library calls.
"""
