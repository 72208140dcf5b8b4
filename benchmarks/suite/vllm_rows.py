"""The vLLM rows (`vllm-no-spec`, `vllm-native`, `vllm-native-fixed`, `specgate-vllm`), from
`benchmarks.vllm.configs.run_vllm_config(config_name, prompts, *, max_tokens, temperature, k,
repeats) -> list[dict]`.

`vllm_records(workloads, config, ..., repeats=R)` passes every case of the workloads, in one
call (one engine start per configuration, R passes over the cases in it), as OpenAI-shaped
bodies (`messages`, `tools`, plus the case's grammar fields) and maps each returned dict onto
a `RequestRecord` (`repeat` = the pass) by key (`text`, `completion_tokens`, `steps`,
`draft_tokens`, `proposed_tokens`, `accepted_tokens`, `latency_s`, `ttft_s`, `decode_s`,
`finish_reason`, `error`, `plugin_times`); keys it does not return stay None. Timing: when
the result carries `ttft_s`/`decode_s` (first streamed token to last), decode tokens/s is
(tokens - 1) / decode_s, apart from TTFT (`timing="decode"`); otherwise end to end
(`timing="e2e"`). `draft_tokens` on the record are the PROPOSED drafts (steps x K, those the
scheduler cut at a grammar-invalid token included), so acceptance means the same as on the
torch engine. `plugin_times` become `plugin_s` (the plugin's own host time) and
`worker_step_s` (the runner's step time).
`vllm_unavailable_reason()` says why the rows cannot be measured (vllm not importable), or
None. Never fabricates a number. Knows nothing about aggregation.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from benchmarks.suite.records import RequestRecord, describe_error
from benchmarks.suite.validity import is_valid
from benchmarks.suite.workloads import Workload


def vllm_unavailable_reason() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed in this environment (SPECGATE_SKIP_VLLM=1 at bootstrap?)"
    return None


def case_body(case: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": case.messages, **case.body}
    if case.tools is not None:
        body["tools"] = case.tools
    return body


def vllm_records(
    workloads: list[Workload], config: str, *, k: int, temperature: float, max_tokens: int, repeats: int = 1
) -> list[RequestRecord]:
    """Every case of every workload, `repeats` times, through ONE `run_vllm_config` call."""
    reason = vllm_unavailable_reason()
    cases = [(workload, case) for workload in workloads for case in workload.cases]
    pairs = [(rep, w, case) for rep in range(repeats) for w, case in cases]
    records = [RequestRecord(w.name, config, case.case_id, k, temperature, timing="e2e", repeat=rep)
               for rep, w, case in pairs]
    if reason is not None:
        for record in records:
            record.error = f"unavailable: {reason}"
        return records
    module = importlib.import_module("benchmarks.vllm.configs")  # read from sys.modules: tests put a fake there
    try:
        kwargs: dict[str, Any] = {"repeats": repeats} if repeats != 1 else {}
        results = module.run_vllm_config(config, [case_body(case) for _, case in cases],
                                         max_tokens=max_tokens, temperature=temperature, k=k, **kwargs)
    except Exception as exc:  # the peer failing is a finding
        for record in records:
            record.error = describe_error(exc)
        return records
    for record, (_, _, case), result in zip(records, pairs, results, strict=False):
        text = str(result.get("text", ""))
        record.text = text
        record.completion_tokens = int(result.get("completion_tokens", 0) or 0)
        record.steps = int(result.get("steps", 0) or 0)
        for key in ("draft_tokens", "accepted_tokens"):
            if result.get(key) is not None:
                setattr(record, key, int(result[key]))
        if result.get("proposed_tokens"):  # acceptance over proposed drafts, as on the torch engine
            record.draft_tokens = max(int(result["proposed_tokens"]), record.draft_tokens or 0)
        record.latency_s = float(result.get("latency_s", 0.0) or 0.0)
        if result.get("ttft_s") is not None and result.get("decode_s") is not None:
            record.timing = "decode"
            record.ttft_s = float(result["ttft_s"])
            record.decode_time_s = float(result["decode_s"])
            record.decode_tokens = max(0, record.completion_tokens - 1)
        else:  # no split: end to end
            record.decode_time_s = record.latency_s
            record.decode_tokens = record.completion_tokens
        record.decode_steps = record.steps
        times = result.get("plugin_times")
        if times:
            record.plugin_s = float(times["plugin_s"])
            record.worker_step_s = float(times["step_s"])
        record.finish_reason = result.get("finish_reason")
        record.error = result.get("error")
        record.valid = is_valid(text, case.check) if record.error is None else None
    return records
