"""DraftRecord (the per-rank record compared across tensor-parallel ranks): equal inputs give
equal steps; a different mask, q or draft gives a different step; bounded; reset."""

from __future__ import annotations

import hashlib
from typing import Any

import torch

from engine.vllm.draft_record import DraftRecord


def _step(record: DraftRecord, *, masked: list[int], q_shift: float = 0.0, drafts: Any = None,
          greedy: bool = False) -> None:
    for _ in range(3):
        logits = torch.randn(2, 40, generator=torch.Generator().manual_seed(1))
        logits[0, masked] = float("-inf")
        probs = None if greedy else (logits.softmax(-1) + q_shift)
        record.sample(logits, probs)
    record.close(["a", "b"], drafts if drafts is not None else torch.tensor([[1, 2, 3], [4, 5, 6]]))


def test_equal_inputs_equal_steps_and_each_difference_shows() -> None:
    ref, same, mask, q, draft = (DraftRecord() for _ in range(5))
    _step(ref, masked=[3, 4])
    _step(same, masked=[3, 4])
    _step(mask, masked=[3, 5])
    _step(q, masked=[3, 4], q_shift=1e-7)
    _step(draft, masked=[3, 4], drafts=[[1, 2, 3], [4, 5, 7]])
    (r,), (s,), (m,), (qq,), (d,) = (x.steps() for x in (ref, same, mask, q, draft))
    assert r == s and r["req_ids"] == ["a", "b"] and r["drafts"] == [[1, 2, 3], [4, 5, 6]] and r["samples"] == 3
    assert m["mask_digest"] != r["mask_digest"]
    assert qq["q_digest"] != r["q_digest"] and qq["mask_digest"] == r["mask_digest"]
    assert d["drafts"] != r["drafts"] and d["mask_digest"] == r["mask_digest"]


def test_greedy_steps_have_no_q_unmasked_samples_no_mask_and_the_record_is_bounded() -> None:
    greedy = DraftRecord()
    _step(greedy, masked=[1], greedy=True)
    assert greedy.steps()[0]["q_digest"] is None
    record = DraftRecord(steps=2)
    _step(record, masked=[1])
    record.sample(None, None)  # a sample the plugin did not mask, greedy
    record.close(["a"], [[9]])
    _step(record, masked=[2])
    unmasked, last = record.steps()  # the first step dropped
    assert unmasked == {"req_ids": ["a"], "drafts": [[9]], "samples": 1, "q_digest": None,
                        "mask_digest": hashlib.blake2b(digest_size=16).hexdigest()}
    assert last["q_digest"] is not None and last["samples"] == 3
    assert len(record.steps(reset=True)) == 2 and record.steps() == []
