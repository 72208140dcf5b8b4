"""`POST /v1/chat/completions` request model.

Messages are one model with a role and role-specific checks (so a validation error's `param`
is a plain path like `messages[1].content`); content is a string or a list of parts of which
only `text` (and `refusal` for assistant turns) is supported. Tools are function tools only.
`template_messages()` turns the messages into the dicts a HF chat template expects: assistant
tool-call arguments parsed from their JSON string into an object (the Qwen2.5/Hermes templates
write `arguments | tojson`, so a string would be rendered as a quoted string, not as the object
the model wrote), `developer` as `system`, content parts joined. An assistant tool call whose
`arguments` is not a JSON object is a 400 naming `messages[i].tool_calls[j].function.arguments`
(from `unsupported_fields()`, before any rendering).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.protocol.sampling_fields import SamplingFields


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    type: str
    text: str | None = None
    refusal: str | None = None


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str
    arguments: str


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    refusal: str | None = None


class FunctionDefinition(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["function"]
    function: FunctionDefinition


class PredictionPart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["text"]
    text: str


class Prediction(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["content"]
    content: str | list[PredictionPart]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    prediction: Prediction | None = None
    # accepted only at their neutral value
    modalities: list[str] | None = None
    audio: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    verbosity: str | None = None
    web_search_options: dict[str, Any] | None = None
    functions: list[dict[str, Any]] | None = None
    function_call: str | dict[str, Any] | None = None

    def unsupported_fields(self) -> list[tuple[str, str]]:
        out = super().unsupported_fields()
        if self.modalities not in (None, ["text"]):
            out.append(("modalities", "only the text modality is supported"))
        for name in ("audio", "web_search_options", "reasoning_effort", "verbosity"):
            if getattr(self, name) is not None:
                out.append((name, f"{name} is not supported by this server"))
        if self.functions is not None or self.function_call is not None:
            name = "functions" if self.functions is not None else "function_call"
            out.append((name, "the deprecated functions API is not supported; use tools"))
        for i, msg in enumerate(self.messages):
            out.extend(_message_problems(i, msg))
        return out

    def effective_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def template_messages(self) -> list[dict[str, Any]]:
        return [_template_message(m) for m in self.messages]

    def tool_dicts(self) -> list[dict[str, Any]] | None:
        if not self.tools:
            return None
        return [t.model_dump(exclude_none=True) for t in self.tools]


def _message_problems(i: int, msg: ChatMessage) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if isinstance(msg.content, list):
        allowed = {"text", "refusal"} if msg.role == "assistant" else {"text"}
        for j, part in enumerate(msg.content):
            if part.type not in allowed:
                out.append(
                    (f"messages[{i}].content[{j}].type", f"content part type '{part.type}' is not supported (text only)")
                )
            elif part.type == "text" and part.text is None:
                out.append((f"messages[{i}].content[{j}].text", "a text part needs 'text'"))
    if msg.role == "tool" and not msg.tool_call_id:
        out.append((f"messages[{i}].tool_call_id", "a tool message needs tool_call_id"))
    if msg.role != "assistant" and msg.tool_calls:
        out.append((f"messages[{i}].tool_calls", "only assistant messages carry tool_calls"))
    if msg.role in ("system", "developer", "user", "tool") and msg.content is None:
        out.append((f"messages[{i}].content", f"a {msg.role} message needs content"))
    if msg.role == "assistant" and msg.content is None and not msg.tool_calls:
        out.append((f"messages[{i}].content", "an assistant message needs content or tool_calls"))
    for j, call in enumerate(msg.tool_calls or []):
        try:
            arguments = json.loads(call.function.arguments)
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            out.append((f"messages[{i}].tool_calls[{j}].function.arguments",
                        "arguments must be a string holding a JSON object, e.g. '{\"city\": \"Paris\"}'"))
    return out


def _content_text(content: str | list[ContentPart] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.text or part.refusal or "" for part in content)


def _template_message(msg: ChatMessage) -> dict[str, Any]:
    role = "system" if msg.role == "developer" else msg.role
    out: dict[str, Any] = {"role": role, "content": _content_text(msg.content)}
    if msg.name is not None:
        out["name"] = msg.name
    if msg.tool_call_id is not None:
        out["tool_call_id"] = msg.tool_call_id
    if msg.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": json.loads(call.function.arguments)},
            }
            for call in msg.tool_calls
        ]
    return out
