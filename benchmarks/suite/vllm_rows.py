"""The vLLM rows (`vllm-native`, `vllm-native-fixed`, `specgate-vllm`), from
`benchmarks.vllm_configs.run_vllm_config(config_name, prompts, *, max_tokens, temperature, k)
-> list[dict]`.

`vllm_records(workloads, config, ...)` passes every case of the workloads, in one call (one
engine start per configuration), as OpenAI-shaped bodies (`messages`, `tools`, plus the
case's grammar fields) and maps each returned dict onto a `RequestRecord` by key (`text`,
`completion_tokens`, `steps`, `draft_tokens`, `accepted_tokens`, `latency_s`,
`finish_reason`, `error`); keys it does not return stay None. Timing is end to end
(`timing="e2e"`: vLLM's results do not split the prefill off).
`vllm_unavailable_reason()` says why the rows cannot be measured (vllm not importable), or
None. Never fabricates a number. Knows nothing about aggregation.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from benchmarks.suite.records import RequestRecord, describe_error
from benchmarks.suite.validity import is_valid
from benchmarks.suite.workloads import Workload


def vllm_unavailable_reason() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed in this environment (SPECGATE_SKIP_VLLM=1 at bootstrap?)"
    return None


def _body(case: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": case.messages, **case.body}
    if case.tools is not None:
        body["tools"] = case.tools
    return body


def vllm_records(
    workloads: list[Workload], config: str, *, k: int, temperature: float, max_tokens: int
) -> list[RequestRecord]:
    """Every case of every workload through ONE `run_vllm_config` call (one engine start)."""
    reason = vllm_unavailable_reason()
    pairs = [(workload, case) for workload in workloads for case in workload.cases]
    records = [RequestRecord(w.name, config, case.case_id, k, temperature, timing="e2e") for w, case in pairs]
    if reason is not None:
        for record in records:
            record.error = f"unavailable: {reason}"
        return records
    from benchmarks import vllm_configs as module
    try:
        results = module.run_vllm_config(config, [_body(case) for _, case in pairs],
                                         max_tokens=max_tokens, temperature=temperature, k=k)
    except Exception as exc:  # the peer failing is a finding
        for record in records:
            record.error = describe_error(exc)
        return records
    for record, (_, case), result in zip(records, pairs, results, strict=False):
        text = str(result.get("text", ""))
        record.text = text
        record.completion_tokens = int(result.get("completion_tokens", 0) or 0)
        record.steps = int(result.get("steps", 0) or 0)
        for key in ("draft_tokens", "accepted_tokens"):
            if result.get(key) is not None:
                setattr(record, key, int(result[key]))
        record.latency_s = float(result.get("latency_s", 0.0) or 0.0)
        record.decode_time_s = record.latency_s  # vLLM does not split the prefill off: e2e timing
        record.decode_tokens = record.completion_tokens
        record.decode_steps = record.steps
        record.finish_reason = result.get("finish_reason")
        record.error = result.get("error")
        record.valid = is_valid(text, case.check) if record.error is None else None
    return records
