"""The speculative method specgate registers on vLLM >= 0.34 (Model Runner V2):
`--speculative-config '{"method": "specgate_draft", "model": <draft>, "num_speculative_tokens": K,
"draft_sample_method": "probabilistic"}'`.

`SpecgateDraftSpeculatorConfig` is vLLM's `draft_model` config (`StandaloneARSpeculatorConfig`:
draft model loaded from `model`, own vocabulary checked against the target's, K lookahead
slots) with its speculator replaced by `engine.vllm.mrv2.SpecgateDraftSpeculator`, which masks
the draft logits with each request's grammar before vLLM samples them. vLLM registers it
through `register_speculative_method` (called by the plugin's `register()` in every process)
by qualified name, and imports this module lazily; like vLLM's own config modules it imports
no speculator (it is read in every process, the API server included). Knows nothing else.
"""

from __future__ import annotations

from vllm.v1.worker.gpu.spec_decode.standalone_ar.config import StandaloneARSpeculatorConfig

METHOD = "specgate_draft"
SPECULATOR = "engine.vllm.mrv2.SpecgateDraftSpeculator"


class SpecgateDraftSpeculatorConfig(StandaloneARSpeculatorConfig):
    """vLLM's draft-model speculator config, with the grammar-masking speculator."""

    speculator_class = SPECULATOR


def register_method() -> None:
    """`register_speculative_method(METHOD, <this config, by qualified name>)`, once."""
    from vllm.v1.worker.gpu.spec_decode.speculator_config import (
        register_speculative_method,
        registered_speculative_methods,
    )

    if METHOD not in registered_speculative_methods():
        register_speculative_method(METHOD, f"{__name__}.SpecgateDraftSpeculatorConfig")
