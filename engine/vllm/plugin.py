"""specgate's vLLM plugin (entry point `vllm.general_plugins`: `specgate_vllm =
"engine.vllm.plugin:register"`), loaded by vLLM in every process (API process, EngineCore,
workers) before the workers register their kernels.

What `register()` does, per `SPECGATE_VLLM_MODE` (read in each process; the gateway sets it):
- "off": nothing (vLLM exactly as shipped);
- "kernel-fix": only the CPU `expand` kernel fix (`engine.vllm.kernel_fix`);
- "full" (default): the fix, plus draft masking in the V1 model runner:
  * `GPUModelRunner.propose_draft_token_ids` is wrapped: before vLLM drafts, the runner's
    DraftMasker advances each grammar request's matcher by the tokens vLLM accepted this step
    (row i of `sampled_token_ids`, -1 placeholders dropped); after, it rolls the drafts back.
  * `SpecDecodeBaseProposer._sample_draft_tokens` is replaced: at every draft step the draft
    logits are cast to fp32, masked with each grammar request's current mask, then sampled
    by vLLM's own `_sample_from_logits` (argmax for greedy rows; with
    `draft_sample_method="probabilistic"`, a sample from softmax(masked/T) whose probs —
    the masked q — vLLM keeps for its rejection sampler, whose p vLLM already masks).
  Requests without a grammar, or with `SamplingParams.extra_args["specgate_draft_mask"]`
  false (default from `SPECGATE_VLLM_DRAFT_MASK`, "1"), keep vLLM's behaviour.

Matchers are compiled in the worker with vLLM's own XgrammarBackend from the request's
`structured_outputs` and `all_stop_token_ids`, so the draft masks are byte-identical to the
scheduler's target masks. In "full" mode that backend (in every process: target and draft)
is given specgate's TokenizerInfo (`install_text_vocabulary`): non-text vocabulary entries
and special control tokens are in no mask, as on the torch engine. Only the xgrammar structured-output backend and draft-model /
EAGLE-style proposers (`SpecDecodeBaseProposer`) are masked; n-gram drafts stay vLLM's
(truncated at the first invalid token by the scheduler). `SPECGATE_VLLM_DEBUG=1` asserts
that no placeholder (-1) or out-of-range id reaches a matcher, the draft model, or the
scheduler among the drafts (`SPECGATE_VLLM_TRACE=1` with it logs every step's drafts and the
masker's counters). Knows nothing of the gateway.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

from engine.vllm.draft_mask import DraftMasker, MaskRow

logger = logging.getLogger("specgate.vllm.plugin")

MODES = ("off", "kernel-fix", "full")
EXTRA_ARG = "specgate_draft_mask"
_PATCHED = "_specgate_patched"


def plugin_mode() -> str:
    mode = os.environ.get("SPECGATE_VLLM_MODE", "full").strip().lower()
    if mode not in MODES:
        raise ValueError(f"SPECGATE_VLLM_MODE must be one of {MODES}, got {mode!r}")
    return mode


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() not in ("0", "false", "off", "no")


def register() -> None:
    """The vLLM general-plugin entry point (called with no arguments, once per process)."""
    mode = plugin_mode()
    if mode == "off":
        return
    from engine.vllm.kernel_fix import apply_cpu_kernel_fix

    apply_cpu_kernel_fix()
    if mode == "full":
        install_draft_masking()


def install_draft_masking() -> None:
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    install_text_vocabulary()
    if getattr(GPUModelRunner, _PATCHED, False):
        return
    GPUModelRunner.propose_draft_token_ids = _wrap_propose(  # type: ignore[method-assign]
        GPUModelRunner.propose_draft_token_ids)
    SpecDecodeBaseProposer._sample_draft_tokens = _wrap_sample_draft(  # type: ignore[method-assign]
        SpecDecodeBaseProposer._sample_draft_tokens)
    setattr(GPUModelRunner, _PATCHED, True)


def install_text_vocabulary() -> None:
    """vLLM's XgrammarBackend (the scheduler's target masks and this plugin's draft masks)
    gets specgate's TokenizerInfo: non-text vocabulary entries (Qwen's `[PAD151665]`…) and
    special control tokens encoded as special, so neither mask allows them (stop tokens still
    come per request as xgrammar's override stop tokens). Mistral / plamo3 keep vLLM's."""
    from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

    if getattr(XgrammarBackend, _PATCHED, False):
        return
    original = XgrammarBackend.__post_init__

    @functools.wraps(original)
    def post_init(self: Any) -> None:
        original(self)
        if not hasattr(self.tokenizer, "backend_tokenizer"):
            return
        try:
            import xgrammar as xgr

            from grammars.backends.xgrammar_backend import text_tokenizer_info
            from grammars.vocabulary import TokenizerVocabulary

            eos = getattr(self.tokenizer, "eos_token_id", None)
            stops = [int(eos)] if eos is not None else []
            info = text_tokenizer_info(
                self.tokenizer, vocab_size=self.vocab_size, stop_token_ids=stops,
                excluded=TokenizerVocabulary(self.tokenizer).excluded_ids(stops))
            old = self.compiler
            self.compiler = xgr.GrammarCompiler(
                info, max_threads=8, cache_enabled=True,
                cache_limit_bytes=getattr(old, "cache_limit_bytes", -1))
        except Exception:  # noqa: BLE001 - keep vLLM's own (both masks still agree)
            logger.exception("specgate: text-only vocabulary unavailable; vLLM's kept")

    XgrammarBackend.__post_init__ = post_init  # type: ignore[method-assign]
    setattr(XgrammarBackend, _PATCHED, True)


# ---- runner side --------------------------------------------------------------------------


def _make_masker(runner: Any) -> DraftMasker | None:
    """The runner's DraftMasker, created on first use (None when the build cannot mask)."""
    masker = getattr(runner, "_specgate_masker", None)
    if masker is not None or getattr(runner, "_specgate_no_masker", False):
        return masker
    try:
        from vllm.tokenizers import cached_tokenizer_from_config
        from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend
        from vllm.v1.structured_output.request import get_structured_output_key

        model_config = runner.model_config
        vocab_size = model_config.get_vocab_size()
        backend = XgrammarBackend(
            runner.vllm_config,
            tokenizer=cached_tokenizer_from_config(model_config),
            vocab_size=vocab_size,
        )

        def compile_fn(sampling_params: Any) -> Any:
            key = get_structured_output_key(sampling_params.structured_outputs)
            grammar = backend.compile_grammar(*key, stop_token_ids=sampling_params.all_stop_token_ids)
            return grammar.matcher  # type: ignore[attr-defined]  # XgrammarGrammar

        masker = DraftMasker(compile_fn=compile_fn, vocab_size=vocab_size,
                             debug=_env_flag("SPECGATE_VLLM_DEBUG", False))
    except Exception:  # noqa: BLE001 - never take the engine down: log and keep vLLM's path
        logger.exception("specgate: draft masking unavailable in this worker")
        runner._specgate_no_masker = True
        return None
    runner._specgate_masker = masker
    return masker


def _grammar_key(sampling_params: Any) -> Any:
    so = getattr(sampling_params, "structured_outputs", None)
    if so is None:
        return None
    backend = getattr(so, "_backend", None)
    if backend not in (None, "xgrammar"):
        return None
    return sampling_params


def _draft_mask_on(sampling_params: Any, default: bool) -> bool:
    extra = getattr(sampling_params, "extra_args", None) or {}
    return bool(extra.get(EXTRA_ARG, default))


def _rows_for(runner: Any, sampled_token_ids: Any, default_on: bool) -> list[MaskRow]:
    req_ids = list(runner.input_batch.req_ids)
    keys = []
    for rid in req_ids:
        state = runner.requests.get(rid) if rid is not None else None
        keys.append(None if state is None else _grammar_key(state.sampling_params))
    if all(k is None for k in keys):
        return [MaskRow(req_id=str(rid), history=(), new_tokens=()) for rid in req_ids]
    if hasattr(sampled_token_ids, "tolist"):
        sampled = sampled_token_ids.tolist()  # [num_reqs, <= K+1], -1 where rejected
    else:
        sampled = [list(r) for r in sampled_token_ids]
    discard = getattr(getattr(runner, "discard_request_mask", None), "np", None)
    rows = []
    for i, (rid, key) in enumerate(zip(req_ids, keys, strict=True)):
        if key is None:
            rows.append(MaskRow(req_id=str(rid), history=(), new_tokens=()))
            continue
        state = runner.requests[rid]
        rows.append(MaskRow(
            req_id=rid,
            history=state.output_token_ids,
            new_tokens=sampled[i] if i < len(sampled) else (),
            grammar_key=key,
            masked=_draft_mask_on(state.sampling_params, default_on),
            discard=bool(discard[i]) if discard is not None and i < len(discard) else False,
        ))
    return rows


_PREEMPTED_SEEN = [0]


def _note_preempted(req_ids: Any) -> None:
    """Count vLLM's preemptions seen by this worker; the first one is logged (a resumed
    request's matcher resyncs from its history, and its first step carries -1 pad drafts)."""
    n = len(req_ids)
    if n and _PREEMPTED_SEEN[0] == 0:
        logger.warning("specgate: vLLM preempted %d request(s); their draft matchers resync on resume", n)
    _PREEMPTED_SEEN[0] += n


def _wrap_propose(orig: Any) -> Any:
    @functools.wraps(orig)
    def propose_draft_token_ids(self: Any, scheduler_output: Any, sampled_token_ids: Any,
                                *args: Any, **kwargs: Any) -> Any:
        drafter = getattr(self, "drafter", None)
        if drafter is None or not hasattr(drafter, "_sample_from_logits"):
            return orig(self, scheduler_output, sampled_token_ids, *args, **kwargs)
        masker = _make_masker(self)
        if masker is None:
            return orig(self, scheduler_output, sampled_token_ids, *args, **kwargs)
        masker.drop(getattr(scheduler_output, "finished_req_ids", ()) or ())
        _note_preempted(getattr(scheduler_output, "preempted_req_ids", None) or ())
        masker.begin(_rows_for(self, sampled_token_ids,
                               _env_flag("SPECGATE_VLLM_DRAFT_MASK", True)))
        drafter._specgate_masker = masker
        drafter._last_draft_probs = None  # never reuse a previous step's q
        try:
            drafts = orig(self, scheduler_output, sampled_token_ids, *args, **kwargs)
            if masker.debug and _env_flag("SPECGATE_VLLM_TRACE", False):
                logger.warning("specgate trace: drafts=%s masker=%s", drafts.tolist(), masker.stats)
        finally:
            masker.end()
            drafter._specgate_masker = None
        live = set(self.requests)
        masker.drop([rid for rid in masker.live_request_ids if rid not in live])
        if masker.debug and hasattr(drafts, "min") and drafts.numel():
            assert int(drafts.min()) >= 0, "a -1 placeholder left the drafter"
        return drafts

    return propose_draft_token_ids


# ---- proposer side ------------------------------------------------------------------------


def _wrap_sample_draft(orig: Any) -> Any:
    @functools.wraps(orig)
    def _sample_draft_tokens(self: Any, hidden_states: Any, sampling_metadata: Any) -> Any:
        masker: DraftMasker | None = getattr(self, "_specgate_masker", None)
        if masker is None or not masker.any_active or getattr(self, "use_heterogeneous_vocab", False):
            return orig(self, hidden_states, sampling_metadata)
        if masker.debug:
            ids = getattr(self, "input_ids", None)
            n = hidden_states.shape[0]
            if ids is not None and n:
                assert int(ids[:n].min()) >= 0, "a -1 placeholder reached the draft model's input"
        logits = self.model.compute_logits(hidden_states).float()  # [B, V]
        masker.mask_logits(logits)
        draft_token_ids, draft_probs = self._sample_from_logits(logits, sampling_metadata)
        masker.advance(draft_token_ids)
        return draft_token_ids, draft_probs

    return _sample_draft_tokens
