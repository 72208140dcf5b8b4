"""The speculative step on the tiny float32 pair: greedy identity, grammar edges. (The output
law is tested in test_engine_law.py, on a peaked, clearly different model pair.)"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine.pacing.pacing_keys import pacing_keys
from engine.types import GenerationRequest, PromptTooLongError, SamplingOptions
from grammars import GrammarSpec

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
SCHEMA_BODY = {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA, "strict": True}}}


def _prompt(tokenizer: Any) -> list[int]:
    return list(tokenizer.encode('Answer {"name": "bob", "age": 3} {"name": "bob", "age": 3}'))


def _run(decoder: Any, prompt: list[int], **kwargs: Any) -> Any:
    sampling = SamplingOptions(temperature=0.0, max_tokens=kwargs.pop("max_tokens", 24))
    return decoder.generate(GenerationRequest("r", prompt, sampling, **kwargs))


@pytest.fixture(scope="module")
def greedy_reference(make_decoder: Any, compile_body: Any, tiny_pair: Any) -> list[int]:
    seq = _run(make_decoder(drafter="none", k=0), _prompt(tiny_pair[2]), grammar=compile_body(SCHEMA_BODY))
    assert seq.finish_reason in ("stop", "length")
    return seq.output_ids


@pytest.mark.parametrize(
    "drafter,options",
    [
        ("model", {}),
        ("model", {"draft_window": 4}),
        ("model", {"draft_mask": False}),
        ("model", {"draft_mask": False, "unmasked_mode": "sample"}),
        ("ngram", {}),
        ("forced", {}),
        ("prediction", {}),
    ],
)
def test_greedy_speculative_equals_greedy_plain(
    drafter: str, options: dict[str, Any], make_decoder: Any, compile_body: Any, tiny_pair: Any,
    greedy_reference: list[int],
) -> None:
    extra: dict[str, Any] = {}
    if drafter == "prediction":  # Predicted Outputs ride on any drafter but "none"
        drafter, extra = "forced", {"prediction": '{"name": "bob", "age": 3}'}
    decoder = make_decoder(drafter=drafter, k=4, **options)
    seq = _run(decoder, _prompt(tiny_pair[2]), grammar=compile_body(SCHEMA_BODY), **extra)
    assert seq.output_ids == greedy_reference
    assert seq.stats.steps < len(greedy_reference) or drafter == "model"  # speculation did something
    # the drafter writes the verify rows at its positions; the verify fills at most the row
    # after the last draft (none when the drafter already filled it or a draft ended the grammar)
    verify, drafting, stats = seq.stats.target_mask_fills, seq.stats.draft_mask_fills, seq.stats
    assert verify is not None and drafting is not None
    assert verify.count <= stats.steps
    assert drafting.count >= stats.draft_tokens
    if drafter != "model" or options.get("draft_mask", True):
        assert seq.stats.draft_tokens > 0


def test_masked_draft_never_proposes_invalid_tokens(make_decoder: Any, compile_body: Any, tiny_pair: Any) -> None:
    decoder = make_decoder(drafter="model", k=4)
    request = GenerationRequest("r", _prompt(tiny_pair[2]), SamplingOptions(temperature=1.0, seed=3, max_tokens=30),
                                grammar=compile_body(SCHEMA_BODY))
    seq = decoder.new_sequence(request)
    proposals = 0
    while not seq.finished:
        proposal = seq.drafter.propose(seq, k=4)
        assert seq.matcher.validate(proposal.token_ids) == len(proposal.token_ids)
        assert seq.matcher.num_accepted == len(seq.output_ids)  # state restored
        proposals += len(proposal.token_ids)
        decoder.step(seq, k=4)
    assert proposals > 0
    assert seq.matcher.is_terminated() or seq.finish_reason == "length"


def test_grammar_terminating_inside_draft_window_emits_nothing_after(
    make_decoder: Any, compile_body: Any, tiny_pair: Any
) -> None:
    grammar = compile_body({"structured_outputs": {"regex": "yes|no"}})
    decoder = make_decoder(drafter="forced", k=6)
    tokenizer = tiny_pair[2]
    seq = decoder.new_sequence(GenerationRequest(
        "r", _prompt(tokenizer), SamplingOptions(temperature=0.0, max_tokens=20), grammar=grammar,
        prediction="yes and then a lot more text"))
    committed = decoder.step(seq)
    while not seq.finished:
        committed = decoder.step(seq)
    assert seq.finish_reason == "stop"
    assert seq.output_ids[-1] in decoder.stop_token_ids and committed[-1] == seq.output_ids[-1]
    assert tokenizer.decode(seq.output_ids, skip_special_tokens=True) in ("yes", "no")
    # the commit itself cuts at termination: tokens after a terminating one are dropped
    seq2 = decoder.new_sequence(GenerationRequest("r2", [1, 2], SamplingOptions(max_tokens=20), grammar=grammar))
    yes = tokenizer.encode("yes")
    stop = min(decoder.stop_token_ids)
    out = decoder._commit(seq2, [*yes, stop, *yes])
    assert out == [*yes, stop] and seq2.finish_reason == "stop"


@pytest.mark.parametrize("drafter", ["model", "ngram"])
def test_max_tokens_is_exact(drafter: str, make_decoder: Any, tiny_pair: Any) -> None:
    decoder = make_decoder(drafter=drafter, k=4)
    for max_tokens in (1, 5, 7):
        request = GenerationRequest("r", _prompt(tiny_pair[2]),
                                    SamplingOptions(temperature=0.0, max_tokens=max_tokens, ignore_eos=True))
        seq = decoder.generate(request)
        assert len(seq.output_ids) == max_tokens and seq.finish_reason == "length"


def test_prompt_too_long_and_bad_ids(make_decoder: Any) -> None:
    decoder = make_decoder(drafter="none", k=0, max_model_len=8)
    with pytest.raises(PromptTooLongError):
        decoder.new_sequence(GenerationRequest("r", list(range(8)), SamplingOptions()))
    with pytest.raises(ValueError, match="out of range"):
        decoder.new_sequence(GenerationRequest("r", [-1, 3], SamplingOptions()))


class _DeadEndMatcher:
    """A matcher whose masks allow nothing: the engine must stop, not sample freely."""

    num_accepted = 0

    def __init__(self) -> None:
        from grammars import FillTimes

        self.fill_times, self.fill_masks_times = FillTimes(), FillTimes()

    def fill_masks(self, bitmask: torch.Tensor, draft_tokens: list[int], *, start_row: int = 0,
                   filled_rows: int = 0) -> int:
        bitmask[start_row] = 0
        return 1

    def is_terminated(self) -> bool:
        return False


class _DeadEndGrammar:
    family = pacing_family = "regex"
    backend = "none"
    spec = GrammarSpec("regex", "a+")

    def matcher(self) -> _DeadEndMatcher:
        return _DeadEndMatcher()


def test_all_zero_target_row_ends_the_sequence_as_a_dead_end(make_decoder: Any) -> None:
    """Never an unconstrained token: the sequence ends with what it has (nothing here) and
    finish_reason "dead_end", which is not recorded as an output length."""
    decoder = make_decoder(drafter="none", k=0)
    request = GenerationRequest("r", [1, 2, 3], SamplingOptions(), grammar=_DeadEndGrammar())  # type: ignore[arg-type]
    seq = decoder.generate(request)
    assert seq.finish_reason == "dead_end" and seq.output_ids == [] and seq.stats.steps == 1
    keys = pacing_keys(request.grammar).lengths
    assert keys and all(decoder.output_lengths.count(key) == 0 for key in keys)
