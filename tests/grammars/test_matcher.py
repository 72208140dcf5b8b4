"""Matcher behaviour on the real Qwen tokenizer, both backends where the kind allows."""

from __future__ import annotations

import pytest
import torch

from grammars import GrammarSpec, spec_from_request

QWEN_VOCAB = 151_936
IM_END = 151_645
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
SCHEMA_SPEC = spec_from_request({"guided_json": SCHEMA})
GOOD = '{"name": "Ada", "age": 36}'


def allowed(bitmask: torch.Tensor, row: int) -> torch.Tensor:  # bool [V]
    words = bitmask[row].to(torch.int64) & 0xFFFFFFFF
    bits = (words.unsqueeze(1) >> torch.arange(32)) & 1
    return bits.flatten()[:QWEN_VOCAB].bool()


def test_json_schema_accept_and_stop(any_compiler) -> None:  # type: ignore[no-untyped-def]
    matcher = any_compiler.compile(SCHEMA_SPEC).matcher()
    assert not matcher.can_stop()
    assert not matcher.accept_token(IM_END)  # stop refused before the grammar is complete
    assert matcher.accept_text(GOOD)
    assert matcher.can_stop() and not matcher.is_terminated()
    assert matcher.accept_token(IM_END) and matcher.is_terminated()
    assert not matcher.can_stop()
    assert not matcher.accept_token(IM_END)  # nothing after termination, no crash
    assert not matcher.accept_text("x")
    bitmask = any_compiler.allocate_bitmask(1)
    matcher.fill_mask(bitmask, 0)  # terminated: only stop tokens
    assert set(allowed(bitmask, 0).nonzero().flatten().tolist()) == set(
        any_compiler.stop_token_ids)
    matcher.rollback(1)
    assert not matcher.is_terminated() and matcher.can_stop()


def test_schema_refusals(any_compiler) -> None:  # type: ignore[no-untyped-def]
    for bad in ('{"name": "Ada"}', '{"name": "Ada", "age": "x"}',
                '{"name": "Ada", "age": 3, "x": 1}', '{"name": "Adaaaaaaaaa", "age": 3}'):
        matcher = any_compiler.compile(SCHEMA_SPEC).matcher()
        assert not (matcher.accept_text(bad) and matcher.can_stop()), bad


def test_regex_and_choice(any_compiler) -> None:  # type: ignore[no-untyped-def]
    regex = any_compiler.compile(GrammarSpec("regex", "[a-z]{2,3}-[0-9]+")).matcher()
    assert regex.accept_text("ab-") and not regex.can_stop()
    assert regex.accept_text("12") and regex.can_stop()
    assert not any_compiler.compile(GrammarSpec("regex", "[a-z]{2,3}")).matcher().accept_text("A")
    choice = any_compiler.compile(spec_from_request({"guided_choice": ["yes", "no way"]}))
    matcher = choice.matcher()
    assert matcher.accept_text("no way") and matcher.can_stop()
    assert not choice.matcher().accept_text("maybe")


def test_off_grammar_and_placeholder_tokens_never_crash(any_compiler, qwen_tokenizer) -> None:  # type: ignore[no-untyped-def]
    matcher = any_compiler.compile(SCHEMA_SPEC).matcher()
    for token in (-1, QWEN_VOCAB, QWEN_VOCAB + 5, qwen_tokenizer.encode("hello")[0], 151_660):
        assert not matcher.accept_token(token)
    assert matcher.num_accepted == 0
    assert matcher.validate([-1, 5]) == 0


def test_mask_never_allows_ids_past_the_tokenizer(any_compiler, qwen_tokenizer) -> None:  # type: ignore[no-untyped-def]
    matcher = any_compiler.compile(GrammarSpec("regex", "[\\s\\S]*")).matcher()
    bitmask = any_compiler.allocate_bitmask(1)
    matcher.fill_mask(bitmask, 0)
    mask = allowed(bitmask, 0)
    real = max(qwen_tokenizer.get_vocab().values()) + 1
    assert not mask[real:].any()
    assert mask.sum() > 100_000


def step_by_step_masks(compiler, spec, drafts) -> list[torch.Tensor]:  # type: ignore[no-untyped-def]
    matcher = compiler.compile(spec).matcher()
    bitmask = compiler.allocate_bitmask(len(drafts) + 1)
    rows = []
    for index in range(len(drafts) + 1):
        matcher.fill_mask(bitmask, index)
        rows.append(bitmask[index].clone())
        if index == len(drafts) or not matcher.accept_token(drafts[index]):
            break
        if matcher.is_terminated():
            break
    return rows


def check_fill_masks(compiler, spec, prefix: str, drafts: list[int], expected_rows: int) -> None:  # type: ignore[no-untyped-def]
    matcher = compiler.compile(spec).matcher()
    assert matcher.accept_text(prefix)
    before = compiler.allocate_bitmask(1)
    matcher.fill_mask(before, 0)
    accepted_before = matcher.num_accepted
    bitmask = compiler.allocate_bitmask(len(drafts) + 3)
    bitmask.fill_(123)
    rows = matcher.fill_masks(bitmask, drafts, start_row=1)
    assert rows == expected_rows
    reference = compiler.compile(spec).matcher()
    assert reference.accept_text(prefix)
    ref_rows = step_by_step_masks_from(compiler, reference, drafts)
    assert len(ref_rows) == rows
    for index, ref in enumerate(ref_rows):
        assert torch.equal(bitmask[1 + index], ref), index
    assert (bitmask[0] == 123).all() and (bitmask[1 + rows :] == 123).all()
    after = compiler.allocate_bitmask(1)
    matcher.fill_mask(after, 0)
    assert torch.equal(before, after) and matcher.num_accepted == accepted_before
    assert not matcher.is_terminated()


def step_by_step_masks_from(compiler, matcher, drafts) -> list[torch.Tensor]:  # type: ignore[no-untyped-def]
    bitmask = compiler.allocate_bitmask(1)
    rows = []
    for index in range(len(drafts) + 1):
        matcher.fill_mask(bitmask, 0)
        rows.append(bitmask[0].clone())
        if index == len(drafts) or not matcher.accept_token(drafts[index]):
            break
        if matcher.is_terminated():
            break
    return rows


def test_fill_masks_all_accepted_gives_k_plus_one_rows(any_compiler, qwen_tokenizer) -> None:  # type: ignore[no-untyped-def]
    drafts = qwen_tokenizer.encode('"Ada", "age')
    check_fill_masks(any_compiler, SCHEMA_SPEC, '{"name": ', drafts, len(drafts) + 1)


def test_fill_masks_stops_at_refused_draft(any_compiler, qwen_tokenizer) -> None:  # type: ignore[no-untyped-def]
    good = qwen_tokenizer.encode('"Ada"')
    drafts = good + qwen_tokenizer.encode("}") + good  # "}" is refused: age is required
    check_fill_masks(any_compiler, SCHEMA_SPEC, '{"name": ', drafts, len(good) + 1)
    check_fill_masks(any_compiler, SCHEMA_SPEC, '{"name": ', [-1, 5, 6], 1)


def test_fill_masks_stops_after_termination(any_compiler, qwen_tokenizer) -> None:  # type: ignore[no-untyped-def]
    tail = qwen_tokenizer.encode("36}")
    drafts = tail + [IM_END] + qwen_tokenizer.encode(" ")
    check_fill_masks(any_compiler, SCHEMA_SPEC, '{"name": "Ada", "age": ', drafts, len(tail) + 1)
    # stop token as a draft terminates: its row is filled, nothing after it
    matcher = any_compiler.compile(SCHEMA_SPEC).matcher()
    assert matcher.accept_text(GOOD)
    bitmask = any_compiler.allocate_bitmask(4)
    assert matcher.fill_masks(bitmask, [IM_END, 5, 6]) == 1
    assert matcher.accept_token(IM_END)
    assert matcher.fill_masks(bitmask, [5, 6]) == 0


def test_validate_and_rollback(any_compiler, qwen_tokenizer) -> None:  # type: ignore[no-untyped-def]
    matcher = any_compiler.compile(SCHEMA_SPEC).matcher()
    tokens = qwen_tokenizer.encode(GOOD)
    assert matcher.validate(tokens + [IM_END, 5]) == len(tokens) + 1
    assert matcher.num_accepted == 0 and not matcher.is_terminated()
    assert matcher.validate(qwen_tokenizer.encode('{"age": 1}')) == 1  # '{"' ok, 'age' refused
    for token in tokens[:4]:
        assert matcher.accept_token(token)
    matcher.rollback(3)
    assert matcher.num_accepted == 1
    with pytest.raises(ValueError, match="cannot roll back 2"):
        matcher.rollback(2)


def test_whitespace_runs_are_bounded(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    for spec in (SCHEMA_SPEC, GrammarSpec("json_object", "")):
        matcher = xgr_compiler.compile(spec).matcher()
        limit = xgr_compiler.max_whitespace
        assert matcher.accept_text("{" + " " * limit)
        assert not matcher.accept_text(" " * 200)
    within = xgr_compiler.compile(SCHEMA_SPEC).matcher()
    assert within.accept_text('{\n  "name": "Ada",\n  "age": 36\n}') and within.can_stop()


def test_whitespace_runs_are_bounded_outlines(outlines_compiler) -> None:  # type: ignore[no-untyped-def]
    matcher = outlines_compiler.compile(SCHEMA_SPEC).matcher()
    assert matcher.accept_text("{" + " " * outlines_compiler.max_whitespace)
    assert not matcher.accept_text(" " * 200)


def test_jump_forward_text(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    matcher = xgr_compiler.compile(GrammarSpec("regex", "id-(alpha|beta)-[0-9]")).matcher()
    assert matcher.jump_forward_text() == "id-"
    assert matcher.accept_text("id-al")
    assert matcher.jump_forward_text() == "pha-"
    assert matcher.accept_text("pha-7") and matcher.jump_forward_text() == ""
    assert matcher.accept_token(IM_END) and matcher.jump_forward_text() == ""


def test_bad_bitmask_is_a_clear_error(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    matcher = xgr_compiler.compile(SCHEMA_SPEC).matcher()
    with pytest.raises(ValueError, match="int32"):
        matcher.fill_mask(torch.zeros(1, 10, dtype=torch.int32))
    with pytest.raises(ValueError, match="out of range"):
        matcher.fill_masks(xgr_compiler.allocate_bitmask(2), [1, 2, 3])
