"""The grammar-masked speculative step for one sequence, synchronously (no threads, no asyncio).

One step: the drafter proposes up to K tokens (masked q, or one-hot for model-free drafts)
→ the matcher fills the K+1 verify masks (`fill_masks`, state unchanged) → ONE target
forward over the pending committed token(s) plus the K drafts → `probs_from_logits` with the
request's parameters (the same T the drafter used) → `rejection_sample` with the request's
generator → the emitted tokens advance the matcher one by one; the KV caches are cropped
back to the committed tokens at the next use. K = 0 is a plain masked sampling step. A
request's first step is plain for the draft-model drafter (the first token needs only the
target's prefill; the draft prefills on the second step). With `adaptive_k`, K per step comes
from `engine.adaptive.AdaptiveK` over the shared measured `costs` (engine.cost_model).

Stops: grammar termination (the terminating token is the last one emitted: nothing after
it, no bonus), a stop token without a grammar (unless `ignore_eos`), `max_tokens` (exact,
even when a step emits several tokens), `max_model_len`. A mask row allowing nothing raises
`GenerationError` (never an unconstrained token); a −1 placeholder never leaves this module
(only the first num_accepted+1 outputs are read) and never reaches a model (KVCache refuses).

Why the output law does not depend on speculation: the emitted tokens of a step have exactly
the law of as many plain masked sampling steps from the target (the sampler's invariant), and
all state a step reads (caches, matcher, generator) belongs to this one sequence. This module
does not know about queues, concurrency, text or stop strings.
"""

from __future__ import annotations

import random
import time
from typing import Any, Literal

import torch

from engine.adaptive import AdaptiveK
from engine.cost_model import ForwardCosts
from engine.drafters import (
    Drafter,
    ForcedDrafter,
    ModelDrafter,
    NgramDrafter,
    NoDrafter,
    PredictionDrafter,
    Proposal,
)
from engine.kv_cache import KVCache
from engine.sequence import Sequence
from engine.stats import RequestStats
from engine.types import GenerationError, GenerationRequest, PromptTooLongError
from sampler import (
    MaskDeadEndError,
    allocate_token_bitmask,
    probs_from_logits,
    rejection_sample,
    sample_from_probs,
)


def stop_token_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """EOS ids as the model config / generation config / tokenizer say, plus `<|im_end|>` and
    `<|endoftext|>` when the tokenizer has them and the config names one of them."""
    ids: set[int] = set()
    for source in (getattr(model, "config", None), getattr(model, "generation_config", None)):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    vocab = tokenizer.get_vocab()
    named = {vocab[name] for name in ("<|im_end|>", "<|endoftext|>") if name in vocab}
    if ids & named:
        ids |= named
    return frozenset(ids)


class SpecDecoder:
    """Models + drafter + the step. Thread-compatible, not thread-safe: one caller at a time."""

    def __init__(
        self,
        *,
        target_model: Any,
        tokenizer: Any,
        draft_model: Any | None = None,
        drafter: str = "model",
        k: int = 4,
        adaptive_k: bool = False,
        draft_mask: bool = True,
        unmasked_mode: Literal["argmax", "sample"] = "argmax",
        max_model_len: int = 4096,
        device: str = "cpu",
        ngram_max: int = 3,
        ngram_min: int = 1,
        costs: ForwardCosts | None = None,
    ) -> None:
        self.target_model = target_model
        self.costs = costs  # measured forward costs shared by every request's AdaptiveK
        self.draft_model = draft_model
        self.tokenizer = tokenizer
        self.device = device
        self.k = k
        self.adaptive_k = adaptive_k
        self.max_model_len = max_model_len
        self.logits_width = int(target_model.get_output_embeddings().weight.shape[0])
        if draft_model is not None:
            draft_width = int(draft_model.get_output_embeddings().weight.shape[0])
            if draft_width != self.logits_width:
                raise ValueError(f"draft logits width {draft_width} != target's {self.logits_width}")
        self.vocab_limit = min(len(tokenizer), self.logits_width)
        self.stop_token_ids = stop_token_ids(target_model, tokenizer)
        self.drafter: Drafter
        if drafter == "model":
            if draft_model is None:
                raise ValueError("drafter='model' needs a draft model")
            self.drafter = ModelDrafter(masked=draft_mask, unmasked_mode=unmasked_mode)
        elif drafter == "ngram":
            self.drafter = NgramDrafter(n_max=ngram_max, n_min=ngram_min)
        elif drafter == "forced":
            self.drafter = ForcedDrafter()
        elif drafter == "none":
            self.drafter = NoDrafter()
        else:
            raise ValueError(f"unknown drafter {drafter!r} (model|ngram|forced|none)")
        self.drafter_name = drafter
        self.draft_mask = draft_mask
        self.unmasked_mode = unmasked_mode

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

    def new_sequence(self, request: GenerationRequest) -> Sequence:
        self.check_prompt(request)
        seed = request.sampling.seed
        generator = torch.Generator(device=self.device)
        generator.manual_seed(seed if seed is not None else random.getrandbits(63))
        drafter: Drafter = self.drafter
        if request.prediction and self.drafter_name != "none":
            predicted = self.tokenizer.encode(request.prediction, add_special_tokens=False)
            drafter = PredictionDrafter(list(predicted))
        k_max = max(self.k, 1)
        return Sequence(
            request=request,
            tokens=list(request.prompt_token_ids),
            prompt_len=len(request.prompt_token_ids),
            target_kv=KVCache(self.target_model, device=self.device),
            draft_kv=(
                KVCache(self.draft_model, device=self.device)
                if self.draft_model is not None and self.drafter_name == "model"
                else None
            ),
            matcher=request.grammar.matcher() if request.grammar is not None else None,
            generator=generator,
            bitmask=allocate_token_bitmask(k_max + 1, self.logits_width),
            draft_bitmask=allocate_token_bitmask(1, self.logits_width),
            logits_width=self.logits_width,
            vocab_limit=self.vocab_limit,
            stop_token_ids=self.stop_token_ids,
            drafter=drafter,
            stats=RequestStats(prompt_tokens=len(request.prompt_token_ids)),
            adaptive=AdaptiveK(k_max=self.k, costs=self.costs, free_drafts=not isinstance(drafter, ModelDrafter)) if (self.adaptive_k and self.k > 0) else None,
        )

    def choose_k(self, seq: Sequence, *, speculate: bool = True) -> int:
        if not speculate or self.k == 0:
            return 0
        if isinstance(seq.drafter, ModelDrafter) and not seq.output_ids:
            return 0  # first token from the target's prefill alone: the draft's prefill is off the TTFT path
        if seq.adaptive is None:
            return self.k
        behind = len(seq.tokens) - len(seq.draft_kv) if seq.draft_kv is not None else 0
        return seq.adaptive.choose_k(catch_up_tokens=behind if isinstance(seq.drafter, ModelDrafter) else 0)

    # ---- the step --------------------------------------------------------------------------

    def step(self, seq: Sequence, *, k: int | None = None) -> list[int]:
        """Run one step; return the tokens committed by it (sets `seq.finish_reason` on stop)."""
        if seq.finished or seq.target_kv is None:
            raise RuntimeError(f"request {seq.request.request_id} is finished or freed")
        k = self.choose_k(seq) if k is None else k
        sampling = seq.request.sampling
        stats = seq.stats
        room = min(sampling.max_tokens - len(seq.output_ids), self.max_model_len - len(seq.tokens))
        k = max(0, min(k, room - 1, seq.bitmask.shape[0] - 1))

        t0 = time.perf_counter()
        proposal: Proposal = seq.drafter.propose(seq, k=k) if k > 0 else Proposal(token_ids=[])
        drafts = proposal.token_ids[:k]
        t1 = time.perf_counter()
        stats.time_draft_s += t1 - t0

        num_rows = len(drafts) + 1
        if seq.matcher is not None:
            num_rows = seq.matcher.fill_masks(seq.bitmask, drafts, start_row=0)
        num_drafts = min(len(drafts), num_rows)
        drafts = drafts[:num_drafts]
        forced = self._forced_draft_flags(seq, num_drafts)
        t2 = time.perf_counter()
        stats.time_mask_s += t2 - t1

        todo = seq.target_kv.sync_to(seq.tokens)
        if not todo:
            seq.target_kv.crop(len(seq.target_kv) - 1)
            todo = [seq.tokens[-1]]
        logits = seq.target_kv.extend(todo + drafts, num_logits=num_drafts + 1)  # [n+1, V]
        t3 = time.perf_counter()
        stats.time_target_s += t3 - t2

        emitted, num_accepted = self._sample(seq, logits, drafts, proposal, num_rows)
        t4 = time.perf_counter()
        stats.time_sampler_s += t4 - t3

        stats.steps += 1
        stats.draft_forwards += proposal.forwards
        if num_drafts:
            stats.spec_steps += 1
            stats.draft_tokens += num_drafts
            stats.accepted_tokens += num_accepted
            stats.forced_draft_tokens += sum(forced)
            stats.forced_accepted_tokens += sum(forced[:num_accepted])
        if self.drafter_name == "model" and seq.matcher is not None and (
            proposal.ends_refused or (len(proposal.token_ids) < k and num_rows == len(proposal.token_ids) + 1)
        ):
            stats.draft_strays += 1  # a masked drafter stops short only where the grammar ends
        if seq.adaptive is not None:
            seq.adaptive.observe(
                k=k, num_drafts=num_drafts, num_accepted=num_accepted,
                draft_s=t1 - t0, target_s=t3 - t2,
            )
        committed = self._commit(seq, emitted)
        stats.time_total_s += time.perf_counter() - t0
        return committed

    @staticmethod
    def _forced_draft_flags(seq: Sequence, num_drafts: int) -> list[bool]:
        """Per draft: did its verify mask row allow exactly one token (grammar-forced)?"""
        if seq.matcher is None or num_drafts == 0:
            return [False] * num_drafts
        rows = seq.bitmask[:num_drafts]  # int32 [n, W]
        one_word = (rows != 0).sum(dim=1) == 1  # [n]
        word = rows.sum(dim=1)  # [n]: the only nonzero word where one_word
        return (one_word & ((word & (word - 1)) == 0)).tolist()

    def _sample(
        self, seq: Sequence, logits: torch.Tensor, drafts: list[int], proposal: Proposal, num_rows: int
    ) -> tuple[list[int], int]:
        """(emitted tokens, num_accepted) from the target logits [n+1, V]."""
        sampling = seq.request.sampling
        num_drafts = len(drafts)
        masked_rows = min(num_rows, num_drafts + 1)
        try:
            target_probs = probs_from_logits(
                logits[:masked_rows],
                bitmask=seq.bitmask[:masked_rows] if seq.matcher is not None else None,
                vocab_size=seq.vocab_limit,
                temperature=sampling.temperature,
                top_k=sampling.top_k,
                top_p=sampling.top_p,
                min_p=sampling.min_p,
            )  # [rows, V]
        except MaskDeadEndError as exc:
            raise GenerationError(
                f"grammar allows no token at step {seq.stats.steps} (dead end)",
                request_id=seq.request.request_id, cause=exc,
            ) from exc
        if masked_rows < num_drafts + 1:
            # Rows past a terminating (or refused) draft: never read, because the draft before
            # them either ends the grammar (we stop there) or is rejected with certainty.
            filler = torch.zeros(num_drafts + 1 - masked_rows, logits.shape[1], dtype=torch.float32)
            filler[:, 0] = 1.0
            target_probs = torch.cat([target_probs, filler])
        if num_drafts == 0:
            return [int(sample_from_probs(target_probs, generator=seq.generator)[0])], 0
        draft_ids = torch.tensor([drafts], dtype=torch.long)  # [1, n]
        if proposal.draft_probs is not None:
            draft_probs = proposal.draft_probs[:num_drafts]  # [n, V]
        else:
            draft_probs = torch.zeros(num_drafts, logits.shape[1], dtype=torch.float32)
            draft_probs[torch.arange(num_drafts), draft_ids[0]] = 1.0
        out, num_accepted = rejection_sample(
            draft_ids, draft_probs[None], target_probs[None], generator=seq.generator
        )  # [1, n+1], [1]
        accepted = int(num_accepted[0])
        return out[0, : accepted + 1].tolist(), accepted

    def _commit(self, seq: Sequence, emitted: list[int]) -> list[int]:
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
            if seq.matcher is not None:
                if seq.matcher.is_terminated():
                    seq.finish_reason = "stop"
                    break
            elif token in seq.stop_token_ids and not sampling.ignore_eos:
                seq.finish_reason = "stop"
                break
            if len(seq.output_ids) >= sampling.max_tokens or len(seq.tokens) >= self.max_model_len:
                seq.finish_reason = "length"
                break
        seq.stats.completion_tokens = len(seq.output_ids)
        return committed

    def generate(self, request: GenerationRequest, *, speculate: bool = True) -> Sequence:
        """Run a request to completion synchronously (tests, CLI, benchmarks)."""
        seq = self.new_sequence(request)
        try:
            while not seq.finished:
                self.step(seq, k=self.choose_k(seq, speculate=speculate))
        finally:
            seq.free()
        return seq

