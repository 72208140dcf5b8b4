"""`usage()`: prediction counts exclude grammar-forced drafts; speculative figures add up; the
closing count; an engine's unsupported option maps to a 400."""

from __future__ import annotations

from engine.stats import RequestStats
from gateway.protocol.responses import usage


def test_prediction_usage_excludes_forced_drafts() -> None:
    stats = RequestStats(prompt_tokens=5)
    stats.completion_tokens, stats.steps = 12, 4
    stats.draft_tokens, stats.accepted_tokens = 10, 8
    stats.forced_draft_tokens, stats.forced_accepted_tokens = 3, 3
    stats.region_drafts, stats.region_accepted = {"forced": 3, "string": 7}, {"forced": 3, "string": 5}
    with_prediction = usage([stats], prompt_tokens=5, with_prediction=True)
    details = with_prediction["completion_tokens_details"]
    assert details["accepted_prediction_tokens"] == 5  # 8 accepted - 3 forced
    assert details["rejected_prediction_tokens"] == 2  # 7 predicted - 5 accepted
    assert with_prediction["speculative"] == {
        "proposed_tokens": 10, "draft_tokens": 10, "accepted_tokens": 8, "acceptance_rate": 0.8, "steps": 4,
        "unmasked_steps": 0,
        "regions": {"forced": {"draft_tokens": 3, "accepted_tokens": 3},
                    "string": {"draft_tokens": 7, "accepted_tokens": 5}},
    }
    assert with_prediction["closing_tokens"] == 0
    stats.closing_tokens = 6
    assert usage([stats, stats], prompt_tokens=5)["closing_tokens"] == 12
    plain = usage([stats], prompt_tokens=5)["completion_tokens_details"]
    assert plain["accepted_prediction_tokens"] == plain["rejected_prediction_tokens"] == 0


def test_acceptance_counts_drafts_cut_before_verification_as_wasted() -> None:
    """An unmasked draft cut at its first grammar-invalid token was proposed, never verified:
    acceptance is over proposed drafts, on both engines."""
    stats = RequestStats(prompt_tokens=5)
    stats.completion_tokens, stats.steps = 12, 4
    stats.proposed_tokens, stats.draft_tokens, stats.accepted_tokens = 16, 10, 8
    spec = usage([stats], prompt_tokens=5)["speculative"]
    assert (spec["proposed_tokens"], spec["draft_tokens"], spec["accepted_tokens"]) == (16, 10, 8)
    assert spec["acceptance_rate"] == 0.5 == stats.acceptance_rate


def test_cached_tokens_are_the_fewest_over_choices_and_bounded_by_the_prompt() -> None:
    a, b = RequestStats(prompt_tokens=40), RequestStats(prompt_tokens=40)
    a.cached_tokens, b.cached_tokens = 32, 16
    assert usage([a, b], prompt_tokens=40)["prompt_tokens_details"]["cached_tokens"] == 16
    assert usage([a], prompt_tokens=20)["prompt_tokens_details"]["cached_tokens"] == 20
    assert usage([], prompt_tokens=20)["prompt_tokens_details"]["cached_tokens"] == 0


def test_an_option_the_engine_does_not_serve_is_a_400_naming_it() -> None:
    from engine import UnsupportedRequestError
    from gateway.engine_errors import to_api_error

    error = to_api_error(UnsupportedRequestError("close_within_max_tokens is served by the torch engine only",
                                                 param="close_within_max_tokens"),
                         retry_after_s=1, prompt_param="messages")
    assert error is not None and error.status_code == 400 and error.param == "close_within_max_tokens"
