"""Runs one case under one torch configuration, step by step, and measures it.

`TorchRunner(target_model, draft_model, tokenizer)` holds the loaded pair and one
`GrammarCompiler` per whitespace bound. `run(workload, case, config, k=, temperature=,
max_tokens=, seed=)` builds the prompt with the tokenizer's chat template (tools rendered
by it, as the gateway does: `engine.prompts.render_chat`), the grammar with
`grammars.spec_from_request` on the case's OpenAI-shaped body, then drives
`SpecDecoder.new_sequence` / `step` and reads `RequestStats` deltas after every step (strays
near the start, decode-only times). The same seed gives every configuration the same
sampling stream start. Knows nothing about aggregation or output files.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.suite.configs import TORCH_CONFIGS
from benchmarks.suite.records import EARLY_TOKENS, RequestRecord, describe_error
from benchmarks.suite.validity import is_valid
from benchmarks.suite.workloads import Case, Workload
from engine.torch_engine.kv_cache import common_prefix_length


class TorchRunner:
    def __init__(self, *, target_model: Any, draft_model: Any | None, tokenizer: Any,
                 draft_window: int | None = None) -> None:
        from engine.loader import model_stop_token_ids
        from engine.torch_engine.kv_cache import logits_width

        self.target_model = target_model
        self.draft_model = draft_model
        self.tokenizer = tokenizer
        # the draft's prompt window (engine.drafters.window; None: the engine's default, 0: the whole prompt)
        self.draft_window = draft_window
        self.logits_width = logits_width(target_model)
        self.stop_ids = model_stop_token_ids(target_model, tokenizer)
        self._compilers: dict[int, Any] = {}
        self._grammars: dict[tuple[int, str], Any] = {}
        self._decoders: dict[tuple[str, int, str], Any] = {}
        self.costs: Any = None  # engine.pacing.cost_model.ForwardCosts: adaptive K and the predicted times
        self.llama_draft: Any = None  # the draft on llama.cpp kernels (`llama_draft` configurations)
        self.llama_draft_costs: Any = None  # the costs measured for the target with that draft
        self.llama_draft_why_not = ""  # why that draft could not be loaded (its rows then show the error)

    def compiler(self, max_whitespace: int) -> Any:
        from grammars import GrammarCompiler

        if max_whitespace not in self._compilers:
            self._compilers[max_whitespace] = GrammarCompiler(
                self.tokenizer, vocab_size=self.logits_width, stop_token_ids=self.stop_ids,
                max_whitespace=max_whitespace,
            )
        return self._compilers[max_whitespace]

    def grammar(self, workload: Workload, case: Case) -> Any | None:
        """The compiled grammar for a case (None when the body asks for no constraint)."""
        from grammars import spec_from_request
        from grammars.spec import canonical_json

        spec = spec_from_request(case.body)
        if spec is None:
            return None
        key = (workload.max_whitespace, canonical_json(case.body))
        if key not in self._grammars:
            self._grammars[key] = self.compiler(workload.max_whitespace).compile(spec)
        return self._grammars[key]

    def prompt_ids(self, case: Case) -> list[int]:
        from engine.prompts import encode_text, render_chat

        return encode_text(self.tokenizer, render_chat(self.tokenizer, case.messages, case.tools))

    def decoder(self, config_name: str, k: int, *, scope: str = "") -> Any:
        """The decoder of `config_name` at `k`, one per `scope` (its own prefix cache and
        history: runs in different scopes never reuse each other's prompts)."""
        from engine.config import EngineConfig
        from engine.torch_engine.decoder import SpecDecoder

        config = TORCH_CONFIGS[config_name]
        key = (config_name, k if config.speculates else 0, scope)
        if key not in self._decoders:
            if config.drafter == "model" and self.draft_model is None:
                raise ValueError(f"configuration {config_name!r} needs a draft model")
            if config.llama_draft and self.llama_draft is None:
                raise ValueError(f"configuration {config_name!r} needs the draft on llama.cpp: "
                                 f"{self.llama_draft_why_not or 'not loaded'}")
            draft = self.llama_draft if config.llama_draft else self.draft_model
            costs = self.costs_for(config_name)
            self._decoders[key] = SpecDecoder(
                target_model=self.target_model, tokenizer=self.tokenizer,
                draft_model=draft if config.drafter == "model" else None,
                config=EngineConfig(
                    model="bench-target", draft_model="bench-draft", drafter=config.drafter, k=k if config.speculates else 0,
                    draft_mask=config.draft_mask, unmasked_mode=config.unmasked_mode,
                    adaptive_k=config.adaptive_k and costs is not None,
                    prefix_cache_mib=EngineConfig.prefix_cache_mib if config.prefix_cache else 0,
                    history_tokens=EngineConfig.history_tokens if config.history else 0,
                    draft_window=0 if config.whole_prompt else (
                        EngineConfig.draft_window if self.draft_window is None else self.draft_window),
                ),
                costs=costs,
            )
        return self._decoders[key]

    def costs_for(self, config_name: str) -> Any:
        return self.llama_draft_costs if TORCH_CONFIGS[config_name].llama_draft else self.costs

    def clear_history(self) -> None:
        """Forget every configuration's history drafts (before cases that ran already)."""
        from engine.drafters.history import HistoryIndex

        for decoder in self._decoders.values():
            if decoder.history is not None:
                decoder.history = HistoryIndex(max_tokens=decoder.history.max_tokens)

    def clear_prefix_caches(self) -> None:
        """Forget every configuration's cached prompts (after a warm-up, so that no
        configuration starts with a prompt the others never saw)."""
        for decoder in self._decoders.values():
            if decoder.prefix_cache is not None:
                decoder.prefix_cache.clear()
        for model in (self.target_model, self.draft_model, self.llama_draft):
            if model is not None and hasattr(model, "forget_prefixes"):  # llama.cpp: pooled contexts are its prefix cache
                model.forget_prefixes()

    def text(self, token_ids: list[int]) -> str:
        ids = list(token_ids)
        while ids and ids[-1] in self.stop_ids:
            ids.pop()
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))

    def run(
        self, workload: Workload, case: Case, config_name: str, *, k: int, temperature: float,
        max_tokens: int, seed: int, scope: str = "",
    ) -> RequestRecord:
        from engine.types import GenerationRequest, SamplingOptions

        record = RequestRecord(workload.name, config_name, case.case_id,
                               k if TORCH_CONFIGS[config_name].speculates else 0, temperature)
        start = time.perf_counter()
        try:
            grammar = self.grammar(workload, case)
            decoder = self.decoder(config_name, k, scope=scope)
            request = GenerationRequest(
                case.case_id, self.prompt_ids(case),
                SamplingOptions(temperature=temperature, max_tokens=max_tokens, seed=seed,
                                close_within_max_tokens=TORCH_CONFIGS[config_name].close), grammar=grammar,
            )
            seq = decoder.new_sequence(request)
            stats = seq.stats
            strays_early = 0
            costs = self.costs_for(config_name)
            if costs is not None:
                record.decode_predicted_s = record.decode_plain_predicted_s = 0.0
            try:
                while not seq.finished:
                    before_tokens = len(seq.output_ids)
                    before = (stats.time_total_s, stats.time_draft_s, stats.draft_strays, stats.steps)
                    drafted, forwards = stats.draft_tokens, stats.draft_forwards
                    synced = common_prefix_length(seq.draft_kv.tokens, seq.draft_tokens) if seq.draft_kv is not None else 0
                    decoder.step(seq)
                    if record.ttft_s is None and seq.output_ids:
                        record.ttft_s = time.perf_counter() - start
                    strays_early += int(stats.draft_strays > before[2] and before_tokens < EARLY_TOKENS)
                    if before[3] > 0 and costs is not None:
                        step_forwards = stats.draft_forwards - forwards
                        fed = len(seq.draft_kv) - synced if (step_forwards and seq.draft_kv is not None) else 0
                        record.decode_predicted_s = (record.decode_predicted_s or 0.0) + costs.step_s(
                            stats.draft_tokens - drafted, draft_forwards=step_forwards,
                            draft_catch_up=max(0, fed - 2 * step_forwards))  # beyond ~2 tokens per forward
                        record.decode_plain_predicted_s = (record.decode_plain_predicted_s or 0.0) + (
                            len(seq.output_ids) - before_tokens) * costs.plain_s
                    if before[3] > 0:  # decode steps only: the first step carries the prefill
                        record.decode_steps += 1
                        record.decode_tokens += len(seq.output_ids) - before_tokens
                        record.decode_time_s += stats.time_total_s - before[0]
                        record.decode_draft_s = (record.decode_draft_s or 0.0) + stats.time_draft_s - before[1]
            finally:
                seq.free()
            record.latency_s = time.perf_counter() - start
            record.decode_verify_s = record.decode_time_s - (record.decode_draft_s or 0.0)
            record.completion_tokens = stats.completion_tokens
            record.steps = stats.steps
            for name in ("cached_tokens", "draft_tokens", "accepted_tokens", "forced_draft_tokens", "forced_accepted_tokens",
                         "region_drafts", "region_accepted", "draft_forwards", "draft_strays", "time_draft_s", "time_target_s", "time_mask_s",
                         "time_sampler_s", "first_draft_step", "pacing_record", "closing_tokens"):
                setattr(record, name, getattr(stats, name))
            record.strays_early = strays_early
            record.finish_reason = seq.finish_reason
            record.text = self.text(seq.output_ids)
            record.valid = is_valid(record.text, case.check)
        except Exception as exc:  # one failing case is a recorded error, not a lost run
            record.latency_s = time.perf_counter() - start
            record.error = describe_error(exc)
        return record
