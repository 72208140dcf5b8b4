"""The torch engine: specgate's own in-process engine (transformers or llama.cpp kernels).

Modules: `engine` (`TorchEngine`, the async `Engine` over one decoder thread), `decoder`
(`SpecDecoder`: draft → K+1 masks → one target forward → verify), `sequence_state` (one
request's state in a step), `transform` (`RequestTransform`, the one transform T shared by
draft and target), `kv_cache` (the only code that touches transformers' cache API),
`prefix_cache` (shared prompt prefixes), `llama_cpp_model` (llama.cpp kernels behind the same
cache interface), `kernels` (which kernels run the models here), `detokenizer`.
Importing this package imports nothing; `engine.build` assembles the engine.
"""
