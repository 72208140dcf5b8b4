"""specgate's grammars: request → GrammarSpec → CompiledGrammar → per-request Matcher.

Knows tokenizers and the packed int32 bitmask format; knows nothing of sampling, engines or
HTTP (never imports `sampler`, `engine` or `gateway`).

    spec = spec_from_request(body)                      # GrammarSpec | None; GrammarError
    compiler = GrammarCompiler(tokenizer, vocab_size=151936)
    compiled = compiler.compile(spec)                   # or await compiler.compile_async(spec)
    matcher = compiled.matcher()                        # one per request
    content, calls = parse_tool_calls(text, tool_names) # tool calls read back out of text
"""

from grammars.compiler import CacheInfo, CompiledGrammar, GrammarCompiler
from grammars.errors import GrammarError
from grammars.fill_times import FILL_BUCKETS_S, FillTimes
from grammars.matcher import Matcher
from grammars.request import spec_from_request
from grammars.spec import GrammarSpec
from grammars.tool_calls import ParsedToolCall, Segment, ToolCallScanner, parse_tool_calls

__all__ = [
    "FILL_BUCKETS_S",
    "CacheInfo",
    "CompiledGrammar",
    "FillTimes",
    "GrammarCompiler",
    "GrammarError",
    "GrammarSpec",
    "Matcher",
    "ParsedToolCall",
    "Segment",
    "ToolCallScanner",
    "parse_tool_calls",
    "spec_from_request",
]
