"""`/v1/chat/completions` against a real server + the real torch engine (tiny random Qwen
pair), through the official `openai` SDK; every response and stream chunk is validated
against OpenAI's OpenAPI description. Text is gibberish (random weights): assertions are on
structure, grammar validity, determinism and stream/non-stream equality."""

from __future__ import annotations

import json
from typing import Any, Literal

import jsonschema
import pytest
from gateway_harness import API_KEY
from pydantic import BaseModel, Field

from grammars.regions import REGIONS

PERSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "color": {"enum": ["red", "green", "blue"]},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "color", "ok"],
    "additionalProperties": False,
}

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"enum": ["Paris", "Tokyo"]}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
TIME_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"tz": {"enum": ["UTC", "CET"]}},
            "required": ["tz"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER_TOOL, TIME_TOOL]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris? Answer with a tool call."}]


def sse_events(response: Any) -> list[Any]:
    """An SSE body as JSON payloads ("[DONE]" stays a string)."""
    events: list[Any] = []
    for line in response.iter_lines():
        if line:
            assert line.startswith("data: "), line
            data = line[len("data: "):]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def _check_calls(calls: list[Any]) -> None:
    for call in calls:
        assert call.id.startswith("call_") and len(call.id) == len("call_") + 24
        assert call.type == "function"
        jsonschema.validate(json.loads(call.function.arguments), PARAMS[call.function.name])


def _post(http: Any, openapi: Any, body: dict[str, Any]) -> dict[str, Any]:
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    data = r.json()
    openapi.validate(data, "CreateChatCompletionResponse")
    return data


def test_models_health_and_schema(http: Any, openapi: Any, model_id: str) -> None:
    models = http.get("/v1/models").json()
    openapi.validate(models, "ListModelsResponse")
    assert [m["id"] for m in models["data"]] == [model_id]
    weights = models["data"][0]["specgate_weights"]  # which kernels and weights run (tiny HF model: torch)
    assert weights["kernels"] == "torch" and weights["dtype"] in ("bfloat16", "float32") and "torch" in weights["note"]
    openapi.validate(http.get(f"/v1/models/{model_id}").json(), "Model")
    assert http.get("/health").json()["status"] == "ok"


def test_json_schema_output_validates(http: Any, openapi: Any, model_id: str) -> None:
    for strict in (True, False):
        data = _post(http, openapi, {
            "model": model_id, "messages": MESSAGES, "temperature": 0.8, "seed": 3, "max_tokens": 80, "n": 2,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "person", "schema": PERSON_SCHEMA, "strict": strict}},
        })
        assert len(data["choices"]) == 2
        for choice in data["choices"]:
            assert choice["finish_reason"] == "stop", choice
            jsonschema.validate(json.loads(choice["message"]["content"]), PERSON_SCHEMA)
        usage = data["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        spec = usage["speculative"]
        assert spec["draft_tokens"] >= spec["accepted_tokens"] >= 0 and spec["steps"] > 0
        regions = spec["regions"]  # every verified draft in exactly one region of the answer
        assert sum(r["draft_tokens"] for r in regions.values()) == spec["draft_tokens"] > 0
        assert sum(r["accepted_tokens"] for r in regions.values()) == spec["accepted_tokens"]
        assert set(regions) <= set(REGIONS) and "text" not in regions  # all inside the JSON answer
    exported = http.get("/metrics").text
    assert 'specgate_spec_region_draft_tokens_total{region="' in exported


def test_history_drafts_are_per_caller(http: Any, openapi: Any, model_id: str) -> None:
    """The same request again drafts from the first one's output (region `history`, all
    accepted at T=0, the same text); with another `user` it never does."""
    body = {"model": model_id, "messages": [{"role": "user", "content": "history, please"}], "temperature": 0,
            "max_tokens": 40, "response_format": {"type": "json_schema",
                                                  "json_schema": {"name": "person", "schema": PERSON_SCHEMA}}}
    first = _post(http, openapi, {**body, "user": "alice"})
    again = _post(http, openapi, {**body, "user": "alice"})
    other = _post(http, openapi, {**body, "user": "bob"})
    texts = {d["choices"][0]["message"]["content"] for d in (first, again, other)}
    assert len(texts) == 1  # greedy: history changes no token
    history = again["usage"]["speculative"]["regions"].get("history", {})
    assert history.get("draft_tokens", 0) > 0 and history["accepted_tokens"] == history["draft_tokens"]
    assert "history" not in other["usage"]["speculative"]["regions"]


def test_regex_choice_and_legacy_fields(http: Any, openapi: Any, model_id: str) -> None:
    base = {"model": model_id, "messages": MESSAGES, "temperature": 0, "max_tokens": 40}
    data = _post(http, openapi, {**base, "structured_outputs": {"regex": "[ab]{3}-[0-9]{2}"}})
    assert __import__("re").fullmatch("[ab]{3}-[0-9]{2}", data["choices"][0]["message"]["content"])
    data = _post(http, openapi, {**base, "guided_choice": ["yes", "no"]})
    assert data["choices"][0]["message"]["content"] in ("yes", "no")


def test_parse_with_pydantic_model(client: Any, model_id: str) -> None:
    class Pet(BaseModel):
        kind: Literal["cat", "dog"]
        name: str = Field(max_length=5)
        legs: Literal[2, 4]

    completions = client.chat.completions
    parse = getattr(completions, "parse", None) or client.beta.chat.completions.parse
    result = parse(model=model_id, messages=MESSAGES, response_format=Pet, temperature=0, max_tokens=60)
    parsed = result.choices[0].message.parsed
    assert isinstance(parsed, Pet) and len(parsed.name) <= 5


def test_tool_choice_required_named_and_no_parallel(client: Any, model_id: str) -> None:
    required = client.chat.completions.create(
        model=model_id, messages=MESSAGES, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
        temperature=0, max_tokens=120,
    )
    choice = required.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    _check_calls(choice.message.tool_calls)
    named = client.chat.completions.create(
        model=model_id, messages=MESSAGES, tools=TOOLS, temperature=0.9, seed=1, max_tokens=100, n=2,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    for choice in named.choices:
        assert choice.finish_reason == "tool_calls"
        assert [c.function.name for c in choice.message.tool_calls] == ["get_time"]
        _check_calls(choice.message.tool_calls)
    single = client.chat.completions.create(
        model=model_id, messages=MESSAGES, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
        temperature=1.0, seed=5, n=2, max_tokens=100,
    )
    for choice in single.choices:
        assert len(choice.message.tool_calls) == 1
        _check_calls(choice.message.tool_calls)


def test_parallel_tool_calls(client: Any, model_id: str) -> None:
    """With parallel calls allowed this (seeded, greedy) model keeps calling: several valid calls."""
    resp = client.chat.completions.create(
        model=model_id, messages=MESSAGES, tools=TOOLS, tool_choice="required", temperature=0, max_tokens=130,
    )
    calls = resp.choices[0].message.tool_calls
    assert calls and len(calls) >= 2, resp.choices[0]
    assert len({c.id for c in calls}) == len(calls)
    _check_calls(calls)


def test_tool_choice_auto_and_tool_turns(client: Any, http: Any, openapi: Any, model_id: str) -> None:
    messages = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_abc", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'}}]},
        {"role": "tool", "tool_call_id": "call_abc", "content": "18 degrees, sunny"},
    ]
    for seed in range(3):
        data = _post(http, openapi, {"model": model_id, "messages": messages, "tools": TOOLS, "tool_choice": "auto",
                                     "temperature": 1.0, "seed": seed, "max_tokens": 30})
        _check_auto_choice(data["choices"][0])


def _check_auto_choice(choice: dict[str, Any]) -> bool:
    """Under tool_choice=auto: content XOR well-formed tool calls, with the matching
    finish_reason. Returns whether the choice is tool calls."""
    message = choice["message"]
    calls, content = message.get("tool_calls") or [], message.get("content") or ""
    assert bool(calls) != bool(content), message
    if calls:
        assert choice["finish_reason"] == "tool_calls" and message.get("content") is None
        for call in calls:
            assert call["id"].startswith("call_") and call["type"] == "function"
            jsonschema.validate(json.loads(call["function"]["arguments"]), PARAMS[call["function"]["name"]])
    else:
        assert choice["finish_reason"] in ("stop", "length") and "<tool_call>" not in content
    return bool(calls)


@pytest.fixture(scope="module")
def biased_http(tiny_qwen_factory: Any, tiny_engine_factory: Any, qwen_tokenizer: Any) -> Any:
    """A server on a tiny model whose greedy choice is fixed by a logit bonus (conftest
    `build_tiny_qwen(logit_bonus=...)`): `<tool_call>` (+24) over `}` (+20) over `{}` (+16)
    over everything else (flat). Unconstrained it writes "<tool_call><tool_call>...", not JSON."""
    import httpx
    from gateway_harness import make_settings, start_server

    from gateway.app import create_app

    ids = {text: qwen_tokenizer.convert_tokens_to_ids(text) for text in ("<tool_call>", "}", "{}")}
    model_dir = tiny_qwen_factory(seed=0, logit_bonus={ids["<tool_call>"]: 24.0, ids["}"]: 20.0, ids["{}"]: 16.0})
    engine = tiny_engine_factory(model=str(model_dir), draft_model=str(model_dir))
    for running in start_server(create_app(make_settings(), engine=engine), engine):
        with httpx.Client(base_url=running.base_url, headers={"Authorization": f"Bearer {API_KEY}"},
                          timeout=120) as c:
            yield c


def test_json_object_output_parses_as_an_object(biased_http: Any, openapi: Any) -> None:
    model = biased_http.get("/v1/models").json()["data"][0]["id"]
    base = {"model": model, "messages": MESSAGES, "temperature": 0, "max_tokens": 40}
    free = _post(biased_http, openapi, base)["choices"][0]["message"]["content"]
    with pytest.raises(json.JSONDecodeError):  # the model alone writes no JSON ("<tool_call>...") ...
        json.loads(free)
    data = _post(biased_http, openapi, {**base, "response_format": {"type": "json_object"}})  # ... the grammar does
    choice = data["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    assert isinstance(json.loads(choice["message"]["content"]), dict), choice


def test_tool_choice_auto_gives_a_call_where_the_model_wants_one(biased_http: Any, openapi: Any) -> None:
    """The model's greedy first token is `<tool_call>`: under auto the grammar must turn that
    into one well-formed call, and nothing else."""
    model = biased_http.get("/v1/models").json()["data"][0]["id"]
    data = _post(biased_http, openapi, {"model": model, "messages": MESSAGES, "tools": TOOLS, "tool_choice": "auto",
                                        "parallel_tool_calls": False, "temperature": 0, "max_tokens": 80})
    assert _check_auto_choice(data["choices"][0]), data["choices"][0]
    assert len(data["choices"][0]["message"]["tool_calls"]) == 1


def _stream(http: Any, openapi: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    assert events[-1] == "[DONE]" and all(isinstance(e, dict) for e in events[:-1])
    for event in events[:-1]:
        openapi.validate(event, "CreateChatCompletionStreamResponse")
        assert event["object"] == "chat.completion.chunk"
    assert len({e["id"] for e in events[:-1]}) == 1
    return events[:-1]


def _reassemble(chunks: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            acc = out.setdefault(choice["index"], {"role": None, "content": "", "calls": {}, "finish": None})
            delta = choice["delta"]
            if "role" in delta:
                assert acc["role"] is None and not acc["content"]  # role comes first, once
                acc["role"] = delta["role"]
            acc["content"] += delta.get("content") or ""
            for tc in delta.get("tool_calls") or []:
                calls = acc["calls"]
                if tc["index"] not in calls:
                    assert tc["type"] == "function" and tc["id"].startswith("call_") and tc["function"]["name"]
                    calls[tc["index"]] = {"name": tc["function"]["name"], "arguments": tc["function"]["arguments"]}
                else:
                    assert "name" not in tc["function"] and "id" not in tc
                    calls[tc["index"]]["arguments"] += tc["function"]["arguments"]
            if choice["finish_reason"] is not None:
                assert acc["finish"] is None
                acc["finish"] = choice["finish_reason"]
    return out


@pytest.mark.parametrize("case", ["text", "schema", "tools", "n2"])
def test_stream_equals_non_stream_under_greedy(http: Any, openapi: Any, model_id: str, case: str) -> None:
    body: dict[str, Any] = {"model": model_id, "messages": MESSAGES, "temperature": 0, "max_tokens": 40}
    if case == "schema":
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON_SCHEMA}}
        body["max_tokens"] = 80
    if case == "tools":
        body.update(tools=TOOLS, tool_choice="required", parallel_tool_calls=False, max_tokens=100)
    if case == "n2":
        body.update(n=2, temperature=0.9, seed=11)
    full = _post(http, openapi, body)
    chunks = _stream(http, openapi, {**body, "stream_options": {"include_usage": True}})
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] > 0
    assert all(c["usage"] is None for c in chunks[:-1])
    assert usage_chunk["usage"]["completion_tokens"] == full["usage"]["completion_tokens"]
    streamed = _reassemble(chunks[:-1])
    assert sorted(streamed) == [c["index"] for c in full["choices"]]
    for choice in full["choices"]:
        got = streamed[choice["index"]]
        message = choice["message"]
        assert got["role"] == "assistant" and got["finish"] == choice["finish_reason"]
        assert got["content"] == (message["content"] or "")
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
        assert [(c["name"], c["arguments"]) for _, c in sorted(got["calls"].items())] == calls
    if case == "tools":
        assert streamed[0]["calls"] and streamed[0]["finish"] == "tool_calls"


def test_stream_without_usage_has_no_usage_chunk(http: Any, openapi: Any, model_id: str) -> None:
    chunks = _stream(http, openapi, {"model": model_id, "messages": MESSAGES, "max_tokens": 5, "temperature": 0})
    assert all(c["choices"] for c in chunks) and all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_seeded_sampling_is_reproducible_and_n_uses_distinct_seeds(http: Any, openapi: Any, model_id: str) -> None:
    body = {"model": model_id, "messages": MESSAGES, "temperature": 1.0, "seed": 42, "max_tokens": 12, "n": 2}
    a, b = _post(http, openapi, body), _post(http, openapi, body)
    texts = [c["message"]["content"] for c in a["choices"]]
    assert texts == [c["message"]["content"] for c in b["choices"]]
    assert texts[0] != texts[1]  # seeds 42 and 43
    one = _post(http, openapi, {**body, "n": 1, "seed": 43})
    assert one["choices"][0]["message"]["content"] == texts[1]


def test_prediction_fills_prediction_usage(http: Any, openapi: Any, model_id: str) -> None:
    body = {"model": model_id, "messages": MESSAGES, "temperature": 0, "max_tokens": 30,
            "structured_outputs": {"regex": "[a-z]{1,8}( [a-z]{1,8}){6}"}}
    plain = _post(http, openapi, body)
    text = plain["choices"][0]["message"]["content"]
    prediction = {"type": "content", "content": [{"type": "text", "text": text}]}
    predicted = _post(http, openapi, {**body, "prediction": prediction})
    assert predicted["choices"][0]["message"]["content"] == text  # speculation never changes greedy output
    details = predicted["usage"]["completion_tokens_details"]
    assert details["accepted_prediction_tokens"] > 0
    # predicted drafts only: grammar-forced drafts are not prediction tokens
    assert details["accepted_prediction_tokens"] + details["rejected_prediction_tokens"] <= \
        predicted["usage"]["speculative"]["draft_tokens"]
    assert details["accepted_prediction_tokens"] <= predicted["usage"]["completion_tokens"]
    assert predicted["usage"]["speculative"]["steps"] < plain["usage"]["speculative"]["steps"]
    assert plain["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] == 0


def test_metrics_exported(http: Any, model_id: str) -> None:
    _ = http.post("/v1/chat/completions", json={"model": model_id, "messages": MESSAGES, "max_tokens": 4})
    text = http.get("/metrics").text
    for name in (
        'specgate_requests_total{endpoint="/v1/chat/completions",status="200"}',
        "specgate_prompt_tokens_total", "specgate_completion_tokens_total",
        "specgate_request_latency_seconds_bucket", "specgate_time_to_first_token_seconds_bucket",
        "specgate_spec_draft_tokens_total", "specgate_spec_accepted_tokens_total",
        "specgate_spec_acceptance_rate", "specgate_spec_mean_accepted_length",
        "specgate_grammar_compile_seconds_bucket", "specgate_grammar_cache_total",
    ):
        assert name in text, name
    drafted = [line for line in text.splitlines() if line.startswith("specgate_spec_draft_tokens_total")]
    assert float(drafted[0].split()[-1]) > 0


def _mask_fills(http: Any) -> dict[tuple[str, str, str], dict[str, float]]:
    """specgate_grammar_mask_fill_seconds samples from /metrics, per (grammar, backend, rows):
    {"count", "sum", "le=<bound>"...}."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, str], dict[str, float]] = {}
    for family in text_string_to_metric_families(http.get("/metrics").text):
        if family.name != "specgate_grammar_mask_fill_seconds":
            continue
        for sample in family.samples:
            labels = sample.labels
            key = sample.name.rsplit("_", 1)[-1] if "le" not in labels else f"le={labels['le']}"
            out.setdefault((labels["grammar"], labels["backend"], labels["rows"]), {})[key] = sample.value
    return out


def test_mask_fill_times_exported_per_grammar(http: Any, openapi: Any, model_id: str) -> None:
    """Every mask row of a constrained request, streamed or not, lands in the grammar
    family's histogram, the draft's rows apart from the target's: the drafter writes the verify
    rows at its positions, so the verify fills at most one row a step (the one after the last
    draft, unless the drafter filled it to see whether the grammar forces a span there);
    cumulative buckets, +Inf = count."""
    body = {"model": model_id, "messages": MESSAGES, "temperature": 0, "max_tokens": 60,
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON_SCHEMA}}}
    before = _mask_fills(http)
    usages = [_post(http, openapi, body)["usage"],
              _stream(http, openapi, {**body, "stream_options": {"include_usage": True}})[-1]["usage"]]
    steps = sum(u["speculative"]["steps"] for u in usages)
    verified = sum(u["speculative"]["draft_tokens"] for u in usages)
    after = _mask_fills(http)
    grown = {k: after[k].get("count", 0) - before.get(k, {}).get("count", 0) for k in after}
    grown = {k: n for k, n in grown.items() if n > 0}
    assert {k[0] for k in grown} == {"json_schema"} and len({k[1] for k in grown}) == 1
    assert "draft" in {k[2] for k in grown} <= {"draft", "target"}  # the tiny draft model is masked too
    (draft,) = [k for k in grown if k[2] == "draft"]
    assert verified > 0 and grown[draft] >= verified  # the drafter filled every drafted position
    assert sum(n for k, n in grown.items() if k[2] == "target") <= steps  # at most the row after the last draft
    for key in grown:
        bounds = sorted((float(k[3:]), v) for k, v in after[key].items() if k.startswith("le="))
        assert [v for _, v in bounds] == sorted(v for _, v in bounds)  # cumulative
        assert bounds[-1] == (float("inf"), after[key]["count"])
        assert 0.0005 in [b for b, _ in bounds] and 0.001 in [b for b, _ in bounds]
        assert after[key]["sum"] > before.get(key, {}).get("sum", 0.0)
    assert all(k[0] != "" for k in after)  # unconstrained requests record nothing


def test_shared_prefix_reports_cached_tokens_and_metrics(http: Any, openapi: Any, model_id: str) -> None:
    """Two questions over one long system prompt: the second starts from the cached prefix
    (`usage.prompt_tokens_details.cached_tokens`, as OpenAI reports it) with the output it
    would have had anyway, and /metrics counts the prefix cache's hits."""
    system = {"role": "system", "content": "Schema: " + ", ".join(f"table t{i} (id INT, name TEXT)" for i in range(12))}
    first = _post(http, openapi, {"model": model_id, "temperature": 0, "max_tokens": 6,
                                  "messages": [system, {"role": "user", "content": "Count rows of t1."}]})
    second_body = {"model": model_id, "temperature": 0, "max_tokens": 6,
                   "messages": [system, {"role": "user", "content": "Names in t2?"}]}
    second = _post(http, openapi, second_body)
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert 64 <= cached < second["usage"]["prompt_tokens"]
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] < cached
    again = _post(http, openapi, second_body)  # the whole prompt cached but its last token
    assert again["choices"][0]["message"]["content"] == second["choices"][0]["message"]["content"]
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= cached
    text = http.get("/metrics").text
    hits = [line for line in text.splitlines() if line.startswith('specgate_prefix_cache_hits_total{model="target"}')]
    assert hits and float(hits[0].split()[-1]) >= 2
    assert "specgate_prefix_cache_bytes{" in text and "specgate_prefix_cache_capacity_bytes" in text
    served = [line for line in text.splitlines() if line.startswith("specgate_prompt_cached_tokens_total")]
    assert float(served[0].split()[-1]) >= 2 * cached
