"""The grammar-masked speculative step for one sequence, synchronously (no threads, no asyncio).

One step: the drafter proposes up to K tokens of its choice (masked q, or one-hot for
model-free drafts) and, in the same chain, up to `span` grammar-forced tokens for free
(`engine.drafters.span`: where the grammar allows one continuation text; q one-hot),
and, for the masked draft model, what earlier outputs of the same tenant and grammar wrote
after the same tokens (`engine.drafters.history`: q one-hot, no forward; in the K slots,
then on the span budget), writing the mask at each position it drafts straight into the
verify masks → the matcher fills the verify rows the drafter did not (`fill_masks(filled_rows=)`, state unchanged: at
most the row after the last draft) → ONE target
forward over the pending committed token(s) plus the K drafts → the sequence's
`RequestTransform.probs` (the same T, same parameters, the drafter used for q) → `rejection_sample` with the request's
generator → the emitted tokens advance the matcher one by one; the KV caches are cropped
back to the committed tokens at the next use. K = 0 is a plain masked sampling step. A
request's first step is plain for the draft-model drafter (the first token needs only the
target's prefill; the draft prefills on the second step). With `adaptive_k`, K per step comes
from `engine.pacing.adaptive.AdaptiveK` over the shared measured `costs` (engine.pacing.cost_model), with
what the engine learned from finished requests (output lengths, the pair's acceptance) keyed
by `engine.pacing.pacing_keys`: the exact grammar, then its family, so a new schema of a known family
is paced by its family's record from its first step.
On llama.cpp kernels (`engine.torch_engine.llama_cpp_model`) a new sequence's caches may start holding a
common prefix of its prompt (a pooled context's); that is their prefix cache, and
`engine.torch_engine.prefix_cache` is not used. With a prefix cache (`config.prefix_cache_mib` > 0), a new sequence's
target and draft caches start from the longest cached prefix of its prompt (the draft's is
looked up again while it is still empty), and each model's prompt is published once its cache
covers it; the draft's catch-up counts only the positions it really has to prefill.

Stops: grammar termination (the terminating token is the last one emitted: nothing after
it, no bonus), a stop token without a grammar (unless `ignore_eos`), `max_tokens` (exact,
even when a step emits several tokens), `max_model_len`. With `close_within_max_tokens`, within
CLOSING_WINDOW tokens of the end each step searches the grammar's closing (grammars.closing):
the step's drafts are cut to half the room the closing leaves (what a step writes may lengthen
the closing by as much again), and where not even one token fits, the closing is committed
instead (no forward; the answer ends valid, and the output law changes there); where no
closing is found it samples on. A target mask row allowing nothing (a grammar dead end)
finishes the sequence with `finish_reason = "dead_end"` and the output so
far, never an unconstrained token, and is not recorded as an output length; a −1 placeholder never leaves this module
(only the first num_accepted+1 outputs are read) and never reaches a model (the caches refuse it).

Why the output law does not depend on speculation: the emitted tokens of a step have exactly
the law of as many plain masked sampling steps from the target (the sampler's invariant), and
all state a step reads (caches, matcher, generator) belongs to this one sequence. This module
does not know about queues, concurrency, text or stop strings.
"""

from __future__ import annotations

import random
import time
from collections.abc import Hashable
from typing import Any

import torch

from engine.config import EngineConfig
from engine.drafters import (
    Drafter,
    ForcedDrafter,
    ModelDrafter,
    NgramDrafter,
    NoDrafter,
    PredictionDrafter,
    Proposal,
)
from engine.drafters.history import HistoryDrafts, HistoryIndex
from engine.drafters.span import ForcedSpans
from engine.drafters.window import draft_prompt
from engine.loader import model_stop_token_ids
from engine.pacing.acceptance_model import AcceptancePriors
from engine.pacing.adaptive import AdaptiveK
from engine.pacing.cost_model import ForwardCosts
from engine.pacing.output_lengths import OutputLengths
from engine.pacing.pacing_keys import pacing_keys
from engine.stats import RequestStats
from engine.torch_engine.kv_cache import cache_for, logits_width
from engine.torch_engine.prefix_cache import PrefixCache
from engine.torch_engine.sequence_state import SequenceState
from engine.torch_engine.transform import RequestTransform
from engine.types import GenerationError, GenerationRequest, PromptTooLongError
from grammars.closing import closing_tokens
from grammars.regions import RegionScanner, region_kind
from sampler import MaskDeadEndError, allocate_token_bitmask, rejection_sample, sample_from_probs

CLOSING_WINDOW = 32  # tokens before max_tokens (beyond the matcher's closing debt) from which a closing is searched
CLOSING_MARGIN = 4  # room kept beyond a step's tokens and the closing: the closing may grow that step


class SpecDecoder:
    """Models + drafter + the step. Thread-compatible, not thread-safe: one caller at a time.

    Reads from `config`: drafter, k, adaptive_k, draft_mask, unmasked_mode, max_model_len,
    device, ngram_min / ngram_max (the model fields are the caller's business: it passes the
    loaded models)."""

    def __init__(
        self,
        *,
        target_model: Any,
        tokenizer: Any,
        config: EngineConfig,
        draft_model: Any | None = None,
        costs: ForwardCosts | None = None,
        prefix_cache: PrefixCache | None = None,
    ) -> None:
        self.target_model = target_model
        if hasattr(target_model, "new_cache"):  # llama.cpp: its pooled contexts are its prefix cache
            self.prefix_cache: PrefixCache | None = None
        else:
            self.prefix_cache = prefix_cache if prefix_cache is not None else PrefixCache.from_mib(config.prefix_cache_mib)
        self.costs = costs  # measured forward costs shared by every request's AdaptiveK
        self.acceptance_priors = AcceptancePriors(depth=max(config.k, 1))  # the pair's acceptance, per drafter kind
        self.output_lengths = OutputLengths()  # finished outputs' lengths: whether a draft prefill will pay
        self.draft_model = draft_model
        self.tokenizer = tokenizer
        self.config = config
        self.device = config.device
        self.k = config.k if config.drafter != "none" else 0
        self.max_model_len = config.max_model_len
        self.logits_width = logits_width(target_model)
        if draft_model is not None:
            draft_width = logits_width(draft_model)
            if draft_width != self.logits_width:
                raise ValueError(f"draft logits width {draft_width} != target's {self.logits_width}")
        if config.drafter == "model" and draft_model is None:
            raise ValueError("drafter 'model' needs a draft model")
        self.vocab_limit = min(len(tokenizer), self.logits_width)
        self.spans = ForcedSpans(tokenizer) if config.span_tokens > 0 and self.k > 0 else None
        self.history = (  # recent outputs per tenant and grammar (masked draft model only)
            HistoryIndex(max_tokens=config.history_tokens)
            if config.history_tokens > 0 and self.k > 0 and config.drafter == "model" else None
        )
        self.stop_token_ids = frozenset(model_stop_token_ids(target_model, tokenizer))
        self.drafter = self._drafter(draft_mask=config.draft_mask)

    def _drafter(self, *, draft_mask: bool) -> Drafter:
        config = self.config
        if config.drafter == "model":
            return ModelDrafter(masked=draft_mask, unmasked_mode=config.unmasked_mode)
        if config.drafter == "ngram":
            return NgramDrafter(n_max=config.ngram_max, n_min=config.ngram_min)
        if config.drafter == "forced":
            return ForcedDrafter()
        return NoDrafter()

    # ---- sequences -------------------------------------------------------------------------

    def check_prompt(self, request: GenerationRequest) -> None:
        ids = request.prompt_token_ids
        if not ids:
            raise ValueError("prompt_token_ids is empty")
        if len(ids) >= self.max_model_len:
            raise PromptTooLongError(len(ids), self.max_model_len)
        bad = [t for t in ids if not 0 <= t < self.logits_width]
        if bad:
            raise ValueError(f"prompt_token_ids out of range [0, {self.logits_width}): {bad[:5]}")

    def _drafter_for(self, request: GenerationRequest) -> Drafter:
        if self.config.drafter == "none":
            return self.drafter
        if request.prediction:
            predicted = self.tokenizer.encode(request.prediction, add_special_tokens=False)
            return PredictionDrafter(list(predicted))
        if request.draft_mask is not None and request.draft_mask != self.config.draft_mask:
            return self._drafter(draft_mask=request.draft_mask)
        return self.drafter

    def new_sequence(self, request: GenerationRequest) -> SequenceState:
        seq = self._new_sequence(request)
        assert seq.target_kv is not None
        seq.stats.cached_tokens = len(seq.target_kv)  # llama.cpp: a pooled context's common prefix
        seq.stats.draft_cached_tokens = len(seq.draft_kv) if seq.draft_kv is not None else 0
        if self.prefix_cache is not None:
            seq.unpublished = {"target", "draft"} if seq.draft_kv is not None else {"target"}
            seq.stats.cached_tokens = self.prefix_cache.restore(
                seq.target_kv, request.prompt_token_ids, pool="target")
            self._restore_draft(seq)
        return seq

    def _restore_draft(self, seq: SequenceState) -> None:
        """Seed a still-empty draft cache from the prefix cache (prompt positions only)."""
        if self.prefix_cache is None or seq.draft_kv is None or len(seq.draft_kv) or not seq.draft_kv.shareable:
            return
        version = self.prefix_cache.version("draft")
        if version != seq.draft_lookup_version:  # nothing new stored since the last miss: no lookup
            seq.draft_lookup_version = version
            seq.stats.draft_cached_tokens = self.prefix_cache.restore(
                seq.draft_kv, seq.draft_prompt_ids, pool="draft")

    def _publish(self, seq: SequenceState) -> None:
        """Offer each model's prompt to the prefix cache once its cache covers it."""
        assert self.prefix_cache is not None
        for pool, kv, prompt in (("target", seq.target_kv, seq.request.prompt_token_ids),
                                 ("draft", seq.draft_kv, seq.draft_prompt_ids)):
            if pool in seq.unpublished and kv is not None and len(kv) >= len(prompt):
                seq.unpublished.discard(pool)
                self.prefix_cache.publish(kv, prompt, pool=pool)

    def _new_sequence(self, request: GenerationRequest) -> SequenceState:
        self.check_prompt(request)
        seed = request.sampling.seed
        generator = torch.Generator(device=self.device)
        generator.manual_seed(seed if seed is not None else random.getrandbits(63))
        k_max = max(self.k, 1)
        drafter = self._drafter_for(request)
        matcher = request.grammar.matcher() if request.grammar is not None else None
        spans = self.spans if matcher is not None else None
        drafts_on_model = self.draft_model is not None and self.config.drafter == "model"
        windowed = draft_prompt(request.prompt_token_ids, window=self.config.draft_window) if drafts_on_model else None
        return SequenceState(
            request=request,
            tokens=list(request.prompt_token_ids),
            prompt_len=len(request.prompt_token_ids),
            transform=RequestTransform(request.sampling, vocab_limit=self.vocab_limit, width=self.logits_width),
            generator=generator,
            drafter=drafter,
            stop_token_ids=self.stop_token_ids,
            regions=RegionScanner(region_kind(request.grammar.family if request.grammar is not None else ""))
            if self.k > 0 else None,
            bitmask=allocate_token_bitmask(k_max + (self.config.span_tokens if spans else 0) + 1, self.logits_width),
            spans=spans,
            history=(
                HistoryDrafts(self.history, self._history_scope(request))
                if self.history is not None and isinstance(drafter, ModelDrafter) and drafter.masked
                and not self._reproducible(request) else None
            ),
            target_kv=cache_for(self.target_model, device=self.device, prefix=request.prompt_token_ids, pool=id(self)),
            draft_kv=(
                cache_for(self.draft_model, device=self.device, pool=id(self),
                          prefix=windowed if windowed is not None else request.prompt_token_ids)
                if drafts_on_model else None
            ),
            draft_prompt=windowed,
            matcher=matcher,
            stats=RequestStats(
                prompt_tokens=len(request.prompt_token_ids),
                grammar=request.grammar.family if request.grammar is not None else "",
                grammar_backend=request.grammar.backend if request.grammar is not None else "",
                draft_mask_fills=matcher.fill_times if matcher is not None else None,  # drafters fill_mask
                target_mask_fills=matcher.fill_masks_times if matcher is not None else None,
            ),
            adaptive=(
                AdaptiveK(k_max=self.k, costs=self.costs, free_drafts=not isinstance(drafter, ModelDrafter),
                          shared=self.acceptance_priors.shared(drafter.name, pacing_keys(request.grammar).family))
                if (self.config.uses_adaptive_k and self.k > 0) else None
            ),
        )

    def choose_k(self, seq: SequenceState, *, speculate: bool = True) -> int:
        if not speculate or self.k == 0:
            return 0
        if isinstance(seq.drafter, ModelDrafter) and not seq.output_ids:
            return 0  # first token from the target's prefill alone: the draft's prefill is off the TTFT path
        if seq.adaptive is None:
            return self.k
        self._restore_draft(seq)  # a prompt published since this sequence started
        if not isinstance(seq.drafter, ModelDrafter) or seq.draft_kv is None or seq.adaptive.drafted:
            return seq.adaptive.choose_k()
        room = self._room(seq)
        keys = pacing_keys(seq.request.grammar)
        expected, decided_by = self.output_lengths.predict(keys.lengths, generated=len(seq.output_ids), room=room)
        if seq.stats.steps == 1:  # the first decode step: what the record knew of this request at its start
            seq.stats.pacing_record = keys.level(decided_by) if expected is not None else ""
        return seq.adaptive.choose_k(
            catch_up_tokens=len(seq.draft_tokens) - len(seq.draft_kv), room=room, expected_remaining=expected)

    def choose_span(self, seq: SequenceState, *, k: int) -> int:
        """Grammar-forced tokens the next step's chain may add beyond `k` drafts of the
        drafter's choice: what the measured verify costs and the forced tokens' acceptance say
        pays (`AdaptiveK.span_tokens`), within `span_tokens`, the room and the verify masks."""
        if seq.spans is None:
            return 0
        limit = min(self.config.span_tokens, self._room(seq) - 1 - k, seq.bitmask.shape[0] - 1 - k)
        if limit <= 0:
            return 0
        return limit if seq.adaptive is None else seq.adaptive.span_tokens(k=k, limit=limit)

    def _closing(self, seq: SequenceState) -> list[int] | None:
        """With `close_within_max_tokens`, within CLOSING_WINDOW tokens of the end (more by
        what the matcher estimates its closing owes, `Matcher.closing_debt`): the grammar's
        closing from here (grammars.closing); None: sample on (outside the window, or no
        closing found: the search runs again next step)."""
        room = self._room(seq)
        if (seq.matcher is None or not seq.request.sampling.close_within_max_tokens
                or room > CLOSING_WINDOW + seq.matcher.closing_debt()):
            return None
        seq.stats.closing_searches += 1
        return closing_tokens(seq.matcher, budget=room)

    def _room(self, seq: SequenceState) -> int:
        """Tokens the sequence may still emit (max_tokens, then the context length)."""
        return min(seq.request.sampling.max_tokens - len(seq.output_ids), self.max_model_len - len(seq.tokens))

    def record_finished(self, seq: SequenceState) -> None:
        """Add a finished sequence's output length to the record adaptive K predicts from,
        and its output to the history index (the step does it where it finishes a sequence; a
        caller that stops one itself, on a stop string, calls this)."""
        if seq.finish_reason == "dead_end":
            return  # not a length the grammar's outputs take
        self.output_lengths.record(pacing_keys(seq.request.grammar).lengths, length=len(seq.output_ids),
                                   truncated=seq.finish_reason == "length")
        if self.history is not None:
            self.history.record(self._history_scope(seq.request),
                                prompt=seq.request.prompt_token_ids, output=seq.output_ids)

    @staticmethod
    def _reproducible(request: GenerationRequest) -> bool:
        """A seeded sampled request: the same request with the same seed must give the same
        sample, so its drafts may not depend on what other requests wrote (no history drafts;
        greedy output never depends on the drafts)."""
        return request.sampling.seed is not None and request.sampling.temperature > 0

    @staticmethod
    def _history_scope(request: GenerationRequest) -> tuple[str, Hashable]:
        """Whose and which outputs a request's history drafts come from: (tenant, the exact grammar)."""
        return request.tenant, pacing_keys(request.grammar).lengths[0]

    # ---- the step --------------------------------------------------------------------------

    def step(self, seq: SequenceState, *, k: int | None = None, span: int | None = None) -> list[int]:
        """Run one step; return the tokens committed by it (sets `seq.finish_reason` on stop).
        `k` / `span`: the drafter's drafts and the grammar-forced tokens beyond them (None:
        `choose_k` / `choose_span`; k = span = 0 is a plain step)."""
        if seq.finished or seq.target_kv is None:
            raise RuntimeError(f"request {seq.request.request_id} is finished or freed")
        k = self.choose_k(seq) if k is None else k
        stats = seq.stats
        k = max(0, min(k, self._room(seq) - 1, seq.bitmask.shape[0] - 1))
        span = self.choose_span(seq, k=k) if span is None else max(0, min(span, self.choose_span(seq, k=k)))
        closing = self._closing(seq)
        if closing is not None:  # the step may emit what leaves room for the closing, else the closing comes now
            # half the spare room: each token written may lengthen the closing by about one more
            spare = (self._room(seq) - len(closing) - CLOSING_MARGIN) // 2
            if spare < 1:
                committed = self._commit(seq, closing)
                stats.closing_tokens += len(committed)
                if seq.finished:
                    self.record_finished(seq)
                return committed
            k = min(k, spare - 1)
            span = min(span, spare - 1 - k)

        t0 = time.perf_counter()
        if k > 0:
            self._restore_draft(seq)
        proposal: Proposal = seq.drafter.propose(seq, k=k, span=span) if k + span > 0 else Proposal()
        drafts = proposal.token_ids[:k + span]
        t1 = time.perf_counter()
        stats.time_draft_s += t1 - t0

        num_rows = len(drafts) + 1
        if seq.matcher is not None:  # the drafter wrote the rows at its positions: fill the rest
            num_rows = seq.matcher.fill_masks(seq.bitmask, drafts, filled_rows=proposal.mask_rows)
        num_drafts = min(len(drafts), num_rows)
        drafts = drafts[:num_drafts]
        forced = list(proposal.forced[:num_drafts]) or [False] * num_drafts
        history = list(proposal.history[:num_drafts]) or [False] * num_drafts
        sources = ["forced" if f else "history" if h else "model" for f, h in zip(forced, history, strict=True)]
        t2 = time.perf_counter()
        stats.time_mask_s += t2 - t1

        todo = seq.target_kv.pending_for_logits(seq.tokens)
        logits = seq.target_kv.extend(todo + drafts, num_logits=num_drafts + 1)  # [n+1, V]
        t3 = time.perf_counter()
        stats.time_target_s += t3 - t2

        emitted, num_accepted = self._verify(seq, logits, drafts, proposal, num_rows)
        t4 = time.perf_counter()
        stats.time_sampler_s += t4 - t3

        stats.steps += 1
        stats.draft_forwards += proposal.forwards
        stats.proposed_tokens += len(proposal.token_ids[:k + span]) + proposal.dropped
        if num_drafts:
            stats.spec_steps += 1
            stats.first_draft_step = stats.first_draft_step or stats.steps
            stats.draft_tokens += num_drafts
            stats.accepted_tokens += num_accepted
            stats.forced_draft_tokens += sum(forced)
            stats.forced_accepted_tokens += sum(forced[:num_accepted])
            if seq.history is not None and "history" in sources[: num_accepted + 1]:
                seq.history.observe(judged=sources[: num_accepted + 1].count("history"),
                                    accepted=sources[:num_accepted].count("history"))
            self._count_regions(seq, drafts, sources, num_accepted)
        chosen = len(proposal.token_ids) - sum(proposal.forced)
        if isinstance(seq.drafter, ModelDrafter) and seq.matcher is not None and (
            proposal.ends_refused or (chosen < k and num_rows == len(proposal.token_ids) + 1)
        ):
            stats.draft_strays += 1  # a masked drafter stops short only where the grammar ends
        if seq.adaptive is not None:  # the draft model's drafts and the forced ones, apart (history has its own gate)
            judged = sources[: num_accepted + 1]  # the drafts the verify judged: the accepted, then a rejected one
            model_judged = judged.count("model")
            model_rejected = num_accepted < num_drafts and sources[num_accepted] == "model"
            seq.adaptive.observe(
                k=k, num_drafts=model_judged, num_accepted=model_judged - model_rejected,
                draft_s=t1 - t0, target_s=t3 - t2,
            )
            seq.adaptive.observe_forced(judged=judged.count("forced"), accepted=sources[:num_accepted].count("forced"))
        committed = self._commit(seq, emitted)
        if seq.finished:
            self.record_finished(seq)
        if seq.unpublished:
            self._publish(seq)
        stats.time_total_s += time.perf_counter() - t0
        return committed

    def _count_regions(self, seq: SequenceState, drafts: list[int], sources: list[str], num_accepted: int) -> None:
        """Add this step's verified and accepted drafts to their output regions (forced and
        history drafts to their source's)."""
        if seq.regions is None:
            return
        scanner = seq.regions.copy()  # the drafts are read ahead; the committed text feeds the original
        stats = seq.stats
        for i, token in enumerate(drafts):
            text = self.tokenizer.decode([token])
            region = sources[i] if sources[i] != "model" else scanner.region_of(text)
            scanner.feed(text)
            stats.region_drafts[region] = stats.region_drafts.get(region, 0) + 1
            if i < num_accepted:
                stats.region_accepted[region] = stats.region_accepted.get(region, 0) + 1

    def _verify(
        self, seq: SequenceState, logits: torch.Tensor, drafts: list[int], proposal: Proposal, num_rows: int
    ) -> tuple[list[int], int]:
        """(emitted tokens, num_accepted) from the target logits [n+1, V]."""
        transform = seq.transform
        num_drafts = len(drafts)
        masked_rows = min(num_rows, num_drafts + 1)
        try:
            target_probs = transform.probs(
                logits[:masked_rows], seq.bitmask[:masked_rows] if seq.matcher is not None else None
            )  # [rows, V]
        except MaskDeadEndError as exc:
            first_dead = min(exc.rows)
            if first_dead == 0:
                seq.finish_reason = "dead_end"  # the output so far stands; nothing is sampled freely
                return [], 0
            # The rows before the dead one stand: verify the drafts they can judge (the last of
            # them gives the bonus row); the next step meets the dead row at its first row.
            return self._verify(seq, logits[:first_dead], drafts[: first_dead - 1], proposal, first_dead)
        if masked_rows < num_drafts + 1:
            # Rows past a terminating (or refused) draft: never read, because the draft before
            # them either ends the grammar (we stop there) or is rejected with certainty.
            target_probs = torch.cat([target_probs, transform.one_hot([0] * (num_drafts + 1 - masked_rows))])
        if num_drafts == 0:
            return [int(sample_from_probs(target_probs, generator=seq.generator)[0])], 0
        draft_probs = (
            proposal.draft_probs[:num_drafts] if proposal.draft_probs is not None else transform.one_hot(drafts)
        )  # [n, V]
        draft_ids = torch.tensor([drafts], dtype=torch.long)  # [1, n]
        out, num_accepted = rejection_sample(
            draft_ids, draft_probs[None], target_probs[None], generator=seq.generator
        )  # [1, n+1], [1]
        accepted = int(num_accepted[0])
        return out[0, : accepted + 1].tolist(), accepted

    def _commit(self, seq: SequenceState, emitted: list[int]) -> list[int]:
        sampling = seq.request.sampling
        committed: list[int] = []
        for token in emitted:
            if token < 0:
                raise GenerationError("placeholder id reached the commit", request_id=seq.request.request_id)
            if seq.matcher is not None and not seq.matcher.accept_token(token):
                raise GenerationError(
                    f"grammar refused emitted token {token}", request_id=seq.request.request_id
                )
            seq.tokens.append(token)
            committed.append(token)
            if seq.regions is not None:
                seq.regions.feed(self.tokenizer.decode([token]))
            if seq.matcher is not None:
                if seq.matcher.is_terminated():
                    seq.finish_reason = "stop"
                    break
            elif seq.stops_on(token):
                seq.finish_reason = "stop"
                break
            if len(seq.output_ids) >= sampling.max_tokens or len(seq.tokens) >= self.max_model_len:
                seq.finish_reason = "length"
                break
        seq.stats.completion_tokens = len(seq.output_ids)
        return committed

    def generate(self, request: GenerationRequest, *, speculate: bool = True) -> SequenceState:
        """Run a request to completion synchronously (tests, CLI, benchmarks)."""
        seq = self.new_sequence(request)
        try:
            while not seq.finished:
                self.step(seq, k=self.choose_k(seq, speculate=speculate), span=None if speculate else 0)
        finally:
            seq.free()
        return seq

