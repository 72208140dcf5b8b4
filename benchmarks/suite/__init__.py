"""`specgate bench`: specgate against its peers, side by side, on json / tools / sql / chat.

Modules: workloads (cases from the shared data), bfcl (BFCL → OpenAI tools), validity
(independent oracles), configs (the named configurations), torch_runner / hf_runner /
vllm_rows (one request each), records, metrics (aggregation, predicted speedup), report
(JSON + markdown), plots (PNG sweeps), runner (the whole run). Entry point:
`benchmarks.suite.runner.run_bench(settings)`; the CLI is `cli/bench.py`.
"""
