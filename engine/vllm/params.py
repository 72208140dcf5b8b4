"""Translation of specgate's engine requests into vLLM's: SamplingParams, structured
outputs, speculative config. Pure functions; vLLM is imported lazily inside them.

- `grammar_source(compiled)`: the EBNF text of a specgate `CompiledGrammar` (xgrammar
  backend), i.e. the exact grammar specgate compiled — JSON schema with its whitespace bound,
  tools (structural tag), regex, choice, EBNF, Lark, SQL all become one vLLM `grammar`, and
  vLLM's xgrammar backend recompiles it to the same token masks. Reads the xgrammar handle
  inside `CompiledGrammar` (the grammars package exposes no public accessor for it).
- `sampling_params_for(request, ...)`: streaming DELTA outputs, the request's sampling
  options, stop strings/ids, the grammar, and the request's draft-mask switch
  (`request.draft_mask` → `extra_args["specgate_draft_mask"]`, read by the plugin in the worker).
- `speculative_config_for(config, draft_model_path=...)`: `--drafter model|ngram|none`, `-k`;
  `--drafter model` is vLLM's `draft_model` method, or on vLLM >= 0.34 with the plugin in
  "full" mode the plugin's registered `specgate_draft` method (`engine.vllm.mrv2`).

Knows nothing of HTTP or of how the engine runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engine.config import EngineConfig
from engine.types import GenerationRequest

if TYPE_CHECKING:
    from grammars import CompiledGrammar

DRAFT_MASK_ARG = "specgate_draft_mask"


def grammar_source(compiled: CompiledGrammar) -> str:
    """EBNF of a compiled grammar; ValueError for a backend other than xgrammar."""
    if compiled.backend != "xgrammar":
        raise ValueError(
            f"the vLLM engine needs grammars compiled by the xgrammar backend, got {compiled.backend!r}"
        )
    return str(compiled._handle.grammar)


def sampling_params_for(
    request: GenerationRequest,
    *,
    stop_token_ids: Sequence[int] = (),
) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

    s = request.sampling
    structured = None
    if request.grammar is not None:
        structured = StructuredOutputsParams(grammar=grammar_source(request.grammar))
    extra: dict[str, Any] = {}
    if request.draft_mask is not None:
        extra[DRAFT_MASK_ARG] = bool(request.draft_mask)
    return SamplingParams(
        n=1,
        temperature=s.temperature,
        top_p=s.top_p,
        top_k=s.top_k if s.top_k > 0 else 0,
        min_p=s.min_p,
        seed=s.seed,
        max_tokens=s.max_tokens,
        stop=list(s.stop) or None,
        stop_token_ids=list(stop_token_ids) or None,
        ignore_eos=s.ignore_eos,
        output_kind=RequestOutputKind.DELTA,
        structured_outputs=structured,
        extra_args=extra or None,
        stream_interval=1,
        skip_special_tokens=True,
    )


def speculative_config_for(
    config: EngineConfig,
    *,
    draft_model_path: str | None,
) -> dict[str, Any] | None:
    """vLLM `speculative_config` for the engine config; None without speculation."""
    if config.drafter == "none" or config.k == 0:
        return None
    if config.drafter == "model":
        if not draft_model_path:
            raise ValueError("drafter 'model' needs a draft model")
        method = "draft_model"
        if config.vllm.plugin_mode == "full":
            from engine.vllm.plugin import vllm_api

            if vllm_api() == "mrv2":  # vLLM >= 0.34: the registered, grammar-masking method
                method = "specgate_draft"
        return {
            "method": method,
            "model": draft_model_path,
            "num_speculative_tokens": config.k,
            "draft_sample_method": config.vllm.draft_sample,
        }
    if config.drafter == "ngram":
        return {
            "method": "ngram",
            "num_speculative_tokens": config.k,
            "prompt_lookup_min": max(1, config.ngram_min),
            "prompt_lookup_max": max(config.ngram_min, config.ngram_max),
        }
    raise ValueError(
        f"drafter {config.drafter!r} is not available on the vLLM engine (use model, ngram or none)"
    )
