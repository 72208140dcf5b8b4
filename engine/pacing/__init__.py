"""Pacing: how many tokens to draft, priced on this machine.

Modules: `hardware` (CPU facts: native bf16, flags, dtype choice), `cost_model` (measured
forward costs, cached per machine and model pair), `acceptance_model` (per-depth acceptance
estimates), `adaptive` (`AdaptiveK`: the K with the best expected speed-up), `output_lengths`
(expected remaining output), `pacing_keys` (what shares acceptance statistics). Used by the
torch engine and by the vLLM engine's per-step K. Importing this package imports nothing.
"""
