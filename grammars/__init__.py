"""specgate's grammars: request → GrammarSpec → CompiledGrammar → per-request Matcher.

Knows tokenizers and the packed int32 bitmask format; knows nothing of sampling, engines or
HTTP (never imports `sampler`, `engine` or `gateway`).
"""
