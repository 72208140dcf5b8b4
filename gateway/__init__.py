"""specgate's gateway: the OpenAI-compatible HTTP service, its protocol models, streaming,
metrics and the `specgate` CLI.

The gateway is the only layer that does I/O with clients, logs and exports metrics. It does
not know how tokens are produced: it turns requests into `grammars.GrammarSpec`s and engine
requests, and engine outputs into OpenAI responses. Imports go one way: gateway → engine →
{grammars, sampler}.
"""
