"""Where a vLLM worker's per-request grammar compile time goes (the draft masker's path), offline.

    python -m benchmarks.vllm.grammar_compile

For each grammar `benchmarks.vllm.ab` sends (two JSON schemas, two tool sets, as the EBNF
specgate gives vLLM), with the Qwen2.5 tokenizer and the text-only TokenizerInfo the plugin
installs: a fresh xgrammar compile (cache miss), the same compile again (xgrammar's cache hit),
and one GrammarMatcher as vLLM's XgrammarBackend builds it. Then one compile on a thread
while the main thread spins, to show whether the compile releases the GIL (it can then overlap
the prefill forward: `engine.vllm.grammar_cache`). Prints milliseconds; asserts nothing.
"""

from __future__ import annotations

import os
import threading
import time


def main() -> None:
    import xgrammar as xgr
    from transformers import AutoTokenizer

    from benchmarks.vllm.ab import BODIES
    from engine.vllm.params import grammar_source
    from grammars import GrammarCompiler, spec_from_request
    from grammars.backends.xgrammar.backend import text_tokenizer_info
    from grammars.vocabulary import TokenizerVocabulary

    path = os.path.expanduser("~/.cache/specgate/models/qwen2.5-coder-1.5b")
    tok = AutoTokenizer.from_pretrained(path)
    vocab = 151_936
    compiler = GrammarCompiler(tok, backend="xgrammar", vocab_size=vocab)
    ebnfs = []
    for body in BODIES:
        spec = spec_from_request({k: v for k, v in body.items() if k != "messages"})
        assert spec is not None
        ebnfs.append(grammar_source(compiler.compile(spec)))
    eos = int(tok.eos_token_id)
    info = text_tokenizer_info(tok, vocab_size=vocab, stop_token_ids=[eos],
                               excluded=TokenizerVocabulary(tok).excluded_ids([eos]))
    for i, ebnf in enumerate(ebnfs):
        xc = xgr.GrammarCompiler(info, max_threads=8, cache_enabled=True)
        t0 = time.perf_counter()
        ctx = xc.compile_grammar(ebnf)
        t1 = time.perf_counter()
        xc.compile_grammar(ebnf)
        t2 = time.perf_counter()
        xgr.GrammarMatcher(ctx, override_stop_tokens=[eos], max_rollback_tokens=4)
        t3 = time.perf_counter()
        print(f"grammar {i} ({len(ebnf)} chars EBNF): compile {1e3 * (t1 - t0):.1f} ms, cache hit "
              f"{1e3 * (t2 - t1):.2f} ms, matcher {1e3 * (t3 - t2):.2f} ms", flush=True)
    xc = xgr.GrammarCompiler(info, max_threads=8, cache_enabled=True)
    took: dict[str, float] = {}

    def work() -> None:
        s = time.perf_counter()
        xc.compile_grammar(ebnfs[-1])
        took["s"] = time.perf_counter() - s

    thread = threading.Thread(target=work)
    spins = 0
    thread.start()
    while thread.is_alive():
        spins += 1
    print(f"compile on a thread: {1e3 * took['s']:.1f} ms; the main thread meanwhile ran {spins} "
          f"loop iterations (0 would mean the compile holds the GIL)")


if __name__ == "__main__":
    main()
