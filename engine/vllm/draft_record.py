"""DraftRecord: one worker's recent draft steps, so that the ranks of a tensor-parallel group
can be compared (`collective_rpc("specgate_recent_drafts")`).

Under tensor parallelism every rank runs the draft model and the plugin's masker on the same
inputs; the scheduler keeps rank 0's drafts, but every rank feeds its own sampled draft i
into draft forward i+1 and keeps its own q for its rejection sampler, so the ranks must draw
the same drafts from the same masked logits, or the draft model's all-reduce mixes
different sequences and the ranks' outputs part. A record lets a test see it.

Per speculative step (one propose call: the runner's `propose_draft_token_ids` on vLLM
0.32, the speculator's `propose` on vLLM >= 0.34) the record keeps:
- `req_ids`: the batch's request ids in row order;
- `drafts`: the draft token ids the proposer returned, per row;
- `mask_digest`: a BLAKE2b digest of, at every draft sample of the step, which logits were
  -inf after the plugin masked them (the effective mask, all rows);
- `q_digest`: a digest of the draft distribution (q) vLLM keeps for rejection sampling: the
  draft probabilities on 0.32, the cached pre-temperature draft logits on 0.34 (absent at
  T=0: greedy drafts keep no q);
- `samples`: draft samples seen in the step (masked and unmasked).

Bounded (`steps`, oldest dropped). Recording costs a copy and a hash of the [B, V] mask per
draft sample, so it is off unless SPECGATE_VLLM_RECORD_DRAFTS=1 (read by the plugin).
Knows nothing of vLLM: it is handed tensors and ids.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Sequence
from typing import Any

import torch


class DraftRecord:
    def __init__(self, *, steps: int = 256) -> None:
        self._steps: deque[dict[str, Any]] = deque(maxlen=steps)
        self._open()

    def _open(self) -> None:
        self._mask = hashlib.blake2b(digest_size=16)
        self._q = hashlib.blake2b(digest_size=16)
        self._has_q = False
        self._samples = 0

    def sample(self, masked_logits: torch.Tensor | None, draft_probs: torch.Tensor | None) -> None:
        """One draft sample: the logits as sampled (after the mask; None when the plugin did
        not mask this sample) and vLLM's q, probabilities or logits (None for greedy drafts)."""
        self._samples += 1
        if masked_logits is not None:
            bits = torch.isneginf(masked_logits.detach()).to("cpu").contiguous()
            self._mask.update(str(tuple(bits.shape)).encode())
            self._mask.update(bits.numpy().tobytes())
        if draft_probs is not None:
            q = draft_probs.detach().to("cpu", torch.float32).contiguous()
            self._q.update(q.numpy().tobytes())
            self._has_q = True

    def close(self, req_ids: Sequence[str], drafts: Any) -> None:
        """End the step: `drafts` as the proposer returned them ([B, K] tensor or lists)."""
        rows = drafts.tolist() if hasattr(drafts, "tolist") else [list(d) for d in drafts]
        self._steps.append({"req_ids": list(req_ids), "drafts": rows, "samples": self._samples,
                            "mask_digest": self._mask.hexdigest(),
                            "q_digest": self._q.hexdigest() if self._has_q else None})
        self._open()

    def steps(self, *, reset: bool = False) -> list[dict[str, Any]]:
        out = list(self._steps)
        if reset:
            self._steps.clear()
        return out
