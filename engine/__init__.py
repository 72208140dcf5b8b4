"""specgate's engines: models, KV caches, drafters and the grammar-masked speculative loop.

The engine knows nothing of HTTP or the OpenAI protocol; it takes token ids, a grammar spec
and sampling parameters and produces tokens with statistics. It never imports `gateway`.
"""
