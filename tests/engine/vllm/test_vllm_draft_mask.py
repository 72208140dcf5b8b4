"""DraftMasker (the worker-side matchers of the vLLM plugin), driven without vLLM: real
xgrammar matchers on the Qwen tokenizer, a scripted sequence of speculative steps."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine.vllm.draft_mask import DraftMasker, MaskRow
from grammars import GrammarCompiler, spec_from_request

V = 151_936
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


@pytest.fixture(scope="module")
def compiled(qwen_tokenizer: Any) -> Any:
    compiler = GrammarCompiler(qwen_tokenizer, vocab_size=V)
    return compiler.compile(spec_from_request(
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}}))


@pytest.fixture
def masker(compiled: Any) -> DraftMasker:
    import xgrammar as xgr

    def compile_fn(_key: Any) -> Any:
        return xgr.GrammarMatcher(compiled._handle)

    return DraftMasker(compile_fn=compile_fn, vocab_size=V, debug=True)


def _ids(tok: Any, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


def _allowed(logits: torch.Tensor) -> set[int]:
    return set(torch.isfinite(logits).nonzero().flatten().tolist())


def test_masks_follow_accepted_tokens_and_drafts(masker: DraftMasker, compiled: Any, qwen_tokenizer: Any) -> None:
    toks = _ids(qwen_tokenizer, '{"a": 12}')
    ref = compiled.matcher()
    # step 1: prefill emitted toks[0]; rows: one grammar request + one free request
    masker.begin([MaskRow("g", history=(), new_tokens=[toks[0]], grammar_key="k"),
                  MaskRow("free", history=(), new_tokens=[5])])
    logits = torch.zeros(2, V)
    masker.mask_logits(logits)
    assert ref.accept_token(toks[0])
    want = torch.zeros(1, (V + 31) // 32, dtype=torch.int32)
    ref.fill_mask(want, 0)
    from sampler import unpack_bitmask

    allowed_ref = set(unpack_bitmask(want, V)[0].nonzero().flatten().tolist())
    assert _allowed(logits[0]) == allowed_ref
    assert torch.isfinite(logits[1]).all()  # no grammar: untouched
    masker.advance(torch.tensor([toks[1], 7]))
    logits = torch.zeros(2, V)
    masker.mask_logits(logits)
    assert toks[2] in _allowed(logits[0])
    masker.end()
    # step 2: vLLM accepted toks[1] and emitted toks[2] (then -1 placeholders)
    masker.begin([MaskRow("g", history=[toks[0]], new_tokens=[toks[1], toks[2], -1, -1], grammar_key="k")])
    logits = torch.zeros(1, V)
    masker.mask_logits(logits)
    for t in toks[1:3]:
        assert ref.accept_token(t)
    ref.fill_mask(want, 0)
    assert _allowed(logits[0]) == set(unpack_bitmask(want, V)[0].nonzero().flatten().tolist())
    masker.end()
    assert masker.stats.resyncs == 0


def test_history_mismatch_resyncs(masker: DraftMasker, qwen_tokenizer: Any) -> None:
    toks = _ids(qwen_tokenizer, '{"a": 12}')
    masker.begin([MaskRow("g", history=(), new_tokens=[toks[0]], grammar_key="k")])
    masker.end()
    # the request was preempted and resumed: the worker's history is longer than the matcher's
    masker.begin([MaskRow("g", history=toks[:3], new_tokens=[toks[3]], grammar_key="k")])
    assert masker.stats.resyncs == 0  # the sync runs at the first use, not in begin
    assert masker.any_active
    assert masker.stats.resyncs == 1
    logits = torch.zeros(1, V)
    masker.mask_logits(logits)
    assert toks[4] in _allowed(logits[0])
    masker.end()


def test_grammar_terminating_inside_draft_window(masker: DraftMasker, qwen_tokenizer: Any) -> None:
    toks = _ids(qwen_tokenizer, '{"a": 1}')
    eos = 151645
    masker.begin([MaskRow("g", history=(), new_tokens=toks[:-1], grammar_key="k")])
    logits = torch.zeros(1, V)
    masker.mask_logits(logits)
    masker.advance(torch.tensor([toks[-1]]))  # closes the object
    logits = torch.zeros(1, V)
    masker.mask_logits(logits)
    assert _allowed(logits[0]) <= {eos, 151643} | set(_ids(qwen_tokenizer, " \n"))
    masker.advance(torch.tensor([eos]))  # grammar terminated: row stops masking/advancing
    assert not masker.any_active
    logits = torch.zeros(1, V)
    masker.mask_logits(logits)
    assert torch.isfinite(logits).all()
    masker.advance(torch.tensor([123]))  # drafts after termination are vLLM's to cut
    masker.end()
    # back at the accepted state: the closing brace is still what the grammar expects
    masker.begin([MaskRow("g", history=toks[:-1], new_tokens=[], grammar_key="k")])
    logits = torch.zeros(1, V)
    masker.mask_logits(logits)
    assert toks[-1] in _allowed(logits[0])
    masker.end()


def test_mask_switch_discard_and_drop(masker: DraftMasker, qwen_tokenizer: Any) -> None:
    toks = _ids(qwen_tokenizer, '{"a": 1}')
    masker.begin([MaskRow("off", history=(), new_tokens=[toks[0]], grammar_key="k", masked=False),
                  MaskRow("disc", history=(), new_tokens=[], grammar_key="k", discard=True)])
    assert not masker.any_active
    logits = torch.zeros(2, V)
    masker.mask_logits(logits)
    assert torch.isfinite(logits).all()
    masker.end()
    assert masker.live_request_ids == {"disc"}  # a row with the mask off keeps no matcher
    masker.drop(["off", "disc"])
    assert masker.live_request_ids == set()


def test_debug_refuses_placeholder_drafts(masker: DraftMasker, qwen_tokenizer: Any) -> None:
    toks = _ids(qwen_tokenizer, '{"a": 1}')
    masker.begin([MaskRow("g", history=(), new_tokens=[toks[0]], grammar_key="k")])
    with pytest.raises(AssertionError, match="placeholder"):
        masker.advance(torch.tensor([-1]))
    masker.end()


def test_batch_rows_match_single_matchers_and_roll_back(masker: DraftMasker, compiled: Any,
                                                         qwen_tokenizer: Any) -> None:
    """Three grammar rows (batch fill / accept / rollback paths) plus a free row: every row's mask
    equals its own reference matcher's at every draft step, and after `end()` the matchers are
    back at the accepted state; each phase's time is recorded."""
    from sampler import unpack_bitmask

    texts = ['{"a": 12}', '{"a": 345}', '{ "a": 6}']
    toks = [_ids(qwen_tokenizer, t) for t in texts]
    rows = [MaskRow(f"g{j}", history=(), new_tokens=[toks[j][0]], grammar_key="k") for j in range(3)]
    rows.insert(1, MaskRow("free", history=(), new_tokens=[9]))
    grammar_rows = [0, 2, 3]  # input-batch row of g0, g1, g2
    refs = [compiled.matcher() for _ in range(3)]
    for j in range(3):
        assert refs[j].accept_token(toks[j][0])
    want = torch.zeros(1, (V + 31) // 32, dtype=torch.int32)
    masker.begin(rows)
    for step in range(1, 3):
        logits = torch.zeros(4, V)
        masker.mask_logits(logits)
        for j, row in enumerate(grammar_rows):
            refs[j].fill_mask(want, 0)
            assert _allowed(logits[row]) == set(unpack_bitmask(want, V)[0].nonzero().flatten().tolist())
        assert torch.isfinite(logits[1]).all()
        ids = torch.tensor([toks[0][step], 5, toks[1][step], toks[2][step]])
        masker.advance(ids)
        for j in range(3):
            assert refs[j].accept_token(toks[j][step])
    masker.end()
    # next step: nothing newly accepted; masks are those after the first token again
    masker.begin([MaskRow(f"g{j}", history=[toks[j][0]], new_tokens=[], grammar_key="k") for j in range(3)])
    logits = torch.zeros(3, V)
    masker.mask_logits(logits)
    fresh = compiled.matcher()
    assert fresh.accept_token(toks[2][0])
    fresh.fill_mask(want, 0)
    assert _allowed(logits[2]) == set(unpack_bitmask(want, V)[0].nonzero().flatten().tolist())
    masker.end()
    assert masker.stats.resyncs == 0 and masker.stats.masked_rows == 3 * 2 + 3
    for phase in ("sync", "fill", "apply", "advance", "rollback"):
        assert masker.times.phase_s[phase] > 0.0, phase


def test_new_tokens_from_the_sampled_tensor(masker: DraftMasker, compiled: Any, qwen_tokenizer: Any) -> None:
    """`begin(rows, sampled=...)`: grammar rows take their accepted tokens from row i of the
    step's sampled ids (-1 placeholders dropped), the free row's are ignored."""
    from sampler import unpack_bitmask

    toks = _ids(qwen_tokenizer, '{"a": 12}')
    sampled = torch.tensor([[7, 8, -1], [toks[0], toks[1], -1]])
    masker.begin([MaskRow("free", history=(), new_tokens=()),
                  MaskRow("g", history=(), new_tokens=(), grammar_key="k")], sampled=sampled)
    logits = torch.zeros(2, V)
    masker.mask_logits(logits)
    ref = compiled.matcher()
    assert ref.accept_token(toks[0]) and ref.accept_token(toks[1])
    want = torch.zeros(1, (V + 31) // 32, dtype=torch.int32)
    ref.fill_mask(want, 0)
    assert _allowed(logits[1]) == set(unpack_bitmask(want, V)[0].nonzero().flatten().tolist())
    assert torch.isfinite(logits[0]).all()
    masker.end()
    masker.begin([MaskRow("g", history=toks[:2], new_tokens=(), grammar_key="k")], sampled=torch.tensor([[-1]]))
    masker.end()
    assert masker.stats.resyncs == 0  # consumed 2 == history 2


def test_bf16_logits_get_the_same_mask(masker: DraftMasker, qwen_tokenizer: Any) -> None:
    """The plugin masks the draft's bf16 logits in place (no fp32 copy): same allowed set,
    and the masked argmax is the argmax of the fp32 masking."""
    toks = _ids(qwen_tokenizer, '{"a": 12}')
    gen = torch.Generator().manual_seed(0)
    raw = torch.randn(1, V, generator=gen)
    masked = {}
    for dtype in (torch.float32, torch.bfloat16):
        masker.begin([MaskRow("g", history=(), new_tokens=[toks[0]], grammar_key="k")])
        logits = raw.to(dtype)
        masker.mask_logits(logits)
        masker.end()
        masked[dtype] = logits
    assert _allowed(masked[torch.bfloat16].float()) == _allowed(masked[torch.float32])
    assert int(masked[torch.bfloat16].argmax()) == int(masked[torch.float32].to(torch.bfloat16).float().argmax())


# ---- exactness: rows that cannot be masked keep only their masked drafts -------------------


def test_unmaskable_row_drafts_nothing_and_is_counted(masker: DraftMasker, qwen_tokenizer: Any) -> None:
    toks = _ids(qwen_tokenizer, '{"a": 1}')
    masker.begin([MaskRow("u", history=(), new_tokens=[toks[0]], unmaskable=True),
                  MaskRow("g", history=(), new_tokens=[toks[0]], grammar_key="k"),
                  MaskRow("free", history=(), new_tokens=[3], masked=False)])
    logits = torch.zeros(3, V)
    masker.mask_logits(logits)
    assert torch.isfinite(logits[0]).all() and not torch.isfinite(logits[1]).all()
    masker.advance(torch.tensor([7, toks[1], 9]))
    limits = masker.end()
    assert limits == {"u": 0}  # g (masked all the way) and the free row keep all their drafts
    assert masker.stats.unmaskable_rows == 1 and masker.stats.limited_rows == 1
    assert masker.take_request_counts(["u", "g"]) == {"u": 1}
    assert masker.take_request_counts(["u"]) == {}  # read once


def test_dead_end_mid_window_keeps_the_masked_prefix(compiled: Any, qwen_tokenizer: Any) -> None:
    """A mask that allows nothing at draft step 3: the row keeps its 2 masked drafts, not
    the raw ones after; the next step it drafts nothing at all (the row stays dead)."""
    import xgrammar as xgr

    toks = _ids(qwen_tokenizer, '{"a": 12}')
    real = xgr.GrammarMatcher(compiled._handle)

    class DeadAfter:  # a matcher whose mask turns empty after `n` accepted drafts
        def __init__(self, n: int) -> None:
            self.n, self.accepted = n, 0

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def accept_token(self, tok: int) -> bool:
            self.accepted += 1
            return bool(real.accept_token(tok))

        def rollback(self, k: int) -> None:
            self.accepted -= k
            real.rollback(k)

        def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0) -> Any:
            out = real.fill_next_token_bitmask(bitmask, index)
            if self.accepted >= self.n:
                bitmask[index].zero_()
            return out

    m = DraftMasker(compile_fn=lambda _k: DeadAfter(3), vocab_size=V, debug=True)
    m.begin([MaskRow("g", history=(), new_tokens=[toks[0]], grammar_key="k")])
    for step in range(1, 4):
        logits = torch.zeros(1, V)
        m.mask_logits(logits)
        m.advance(torch.tensor([toks[step]]))
    assert m.end() == {"g": 2}
    assert m.stats.dead_rows == 1
    m.begin([MaskRow("g", history=[toks[0]], new_tokens=[], grammar_key="k")])
    assert not m.any_active
    assert m.end() == {"g": 0}
    assert m.stats.limited_rows == 2 and m.stats.resyncs == 0
    assert m.take_request_counts(["g"]) == {"g": 2}


def test_refused_accepted_token_stops_drafting(masker: DraftMasker, qwen_tokenizer: Any) -> None:
    """vLLM accepted a token the worker's matcher refuses (masks disagree): the request
    drafts nothing from then on, counted as a refused row."""
    masker.begin([MaskRow("g", history=(), new_tokens=_ids(qwen_tokenizer, "hello"), grammar_key="k")])
    assert not masker.any_active
    assert masker.end() == {"g": 0}
    assert masker.stats.refused_rows == 1


def test_internal_request_ids_are_matched(masker: DraftMasker) -> None:
    masker.begin([MaskRow("req-7-abcdef12", history=(), new_tokens=(), unmaskable=True)])
    masker.end()
    assert masker.take_request_counts(["req-7"]) == {"req-7": 1}


def test_terminated_row_keeps_drafts_through_the_stop_token(masker: DraftMasker, qwen_tokenizer: Any) -> None:
    toks = _ids(qwen_tokenizer, '{"a": 1}')
    eos = 151645
    masker.begin([MaskRow("g", history=(), new_tokens=toks[:-1], grammar_key="k")])
    for tok in (toks[-1], eos, 11, 12):
        logits = torch.zeros(1, V)
        masker.mask_logits(logits)
        masker.advance(torch.tensor([tok]))
    assert masker.end() == {"g": 2}  # '}' and the stop token; the 2 unmasked drafts after it cut
    assert masker.stats.limited_rows == 0  # not a fallback


def test_take_draft_token_ids_cuts_limited_rows() -> None:
    """The runner wrapper hands the scheduler only each limited row's masked prefix."""
    from types import SimpleNamespace

    from engine.vllm.plugin import _wrap_take_drafts

    def take(self: Any) -> Any:
        return SimpleNamespace(req_ids=["a", "b", "c"], draft_token_ids=[[1, 2, 3], [4, 5, 6], [7, 8, 9]])

    runner = SimpleNamespace(_specgate_draft_limits={"a": 0, "c": 2}, _specgate_masker=None)
    out = _wrap_take_drafts(take)(runner)
    assert out.draft_token_ids == [[], [4, 5, 6], [7, 8]]
    assert runner._specgate_draft_limits is None  # used once
    assert _wrap_take_drafts(take)(runner).draft_token_ids[0] == [1, 2, 3]
