"""Multi-turn tool use end to end on the real Qwen2.5-Coder pair (1.5B target, 0.5B draft),
through the real HTTP server and the OpenAI client, `tool_choice` omitted as clients usually
send it: turn 1 gets a tool call; the test answers it with a tool result and turn 2 answers
from that result (its value appears in the answer); turn 3, a follow-up question, gets a new
call with the new argument, whose result is answered in turn 4 (the 2-turn test stops after
turn 2). T=0, so each run is deterministic. Pulls the models on first use; fails, never skips.

Measured: the shipped 1.5B target does not answer from a tool result; it calls the same tool
again with the same arguments (with `tool_choice` omitted, and unconstrained with
`tool_choice: "none"` it writes that call as text), for several phrasings of the question and
of the result. The history is rendered as the template was trained (token for token:
tests/gateway/test_multi_turn.py), so this is the model's behaviour. The answer turns are
therefore strict xfails: they fail the suite the day a model answers (then drop the mark);
the turn-1 call and the server's acceptance of the whole history are asserted plainly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from gateway_harness import API_KEY, RunningServer, make_settings, start_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "the city name"}},
                   "required": ["city"]}}}]
RESULTS = {"paris": "Paris: 17 degrees Celsius, light rain", "tokyo": "Tokyo: 23 degrees Celsius, clear sky"}


@pytest.fixture(scope="module")
def qwen_server(require_models: Any) -> Iterator[RunningServer]:
    from gateway_harness import SpyEngine

    from engine import build_engine
    from gateway.app import create_app

    require_models("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")  # pulls if missing; fails, never skips
    settings = make_settings(max_model_len=2048)
    engine = SpyEngine(build_engine(settings.engine_config()))
    yield from start_server(create_app(settings, engine=engine), engine)


@pytest.fixture()
def client(qwen_server: RunningServer) -> Any:
    import openai

    return openai.OpenAI(base_url=qwen_server.v1, api_key=API_KEY, max_retries=0, timeout=900)


def _ask(client: Any, messages: list[dict[str, Any]], max_tokens: int = 60) -> Any:
    model = client.models.list().data[0].id
    return client.chat.completions.create(model=model, messages=messages, tools=TOOLS, temperature=0,
                                          max_tokens=max_tokens).choices[0]


def _call_turn(client: Any, messages: list[dict[str, Any]], city: str) -> None:
    """One turn that must call get_weather for `city`; appends the call and its result."""
    choice = _ask(client, messages)
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls, choice.message
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert city in json.loads(call.function.arguments)["city"].lower(), call.function.arguments
    messages.append(choice.message.model_dump(exclude_none=True))  # sent back as the client got it
    messages.append({"role": "tool", "tool_call_id": call.id, "content": RESULTS[city]})


def _answer_turn(client: Any, messages: list[dict[str, Any]], value: str) -> None:
    """One turn that must answer from the last tool result (its value in the text)."""
    choice = _ask(client, messages)
    assert choice.finish_reason == "stop" and not choice.message.tool_calls, choice.message
    assert value in (choice.message.content or ""), choice.message.content
    messages.append({"role": "assistant", "content": choice.message.content})


MODEL_REPEATS_THE_CALL = pytest.mark.xfail(
    strict=True, reason="Qwen2.5-Coder-1.5B calls the tool again instead of answering from its result")


def test_turn_one_calls_and_the_history_is_accepted(client: Any) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    _call_turn(client, messages, "paris")
    choice = _ask(client, messages)  # the full history, with the call and its result, is a 200
    assert choice.finish_reason in ("stop", "tool_calls", "length")


@MODEL_REPEATS_THE_CALL
def test_two_turns_answer_from_the_tool_result(client: Any) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    _call_turn(client, messages, "paris")
    _answer_turn(client, messages, "17")


@MODEL_REPEATS_THE_CALL
def test_three_turns_with_a_follow_up_question(client: Any) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    _call_turn(client, messages, "paris")
    _answer_turn(client, messages, "17")
    messages.append({"role": "user", "content": "And in Tokyo?"})
    _call_turn(client, messages, "tokyo")
    _answer_turn(client, messages, "23")
