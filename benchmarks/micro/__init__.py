"""Micro-benchmarks: one cost at a time, no server and (mostly) no model.

`mask_cost` (mask fill per token position, per backend and grammar family, and as the torch
engine fills them), `sql_first_fill` and `fill_overlap` (the schema-aware SQL mask's first
fills and their overlap with a forward), `served_mask_fills` (the fills a running gateway
measured, read from its /metrics), `sampler_bench` (the rejection sampler), `forward_cost`
(target and draft forwards per token count, the cost model's inputs), `acceptance_trace` and
`adaptive_replay` (acceptance per position, adaptive K replayed over recorded traces). Each
writes one result file under benchmarks/results/; docs/benchmarks.md says how to run each.
"""
