"""The `hf-assisted` peer: HF transformers assisted generation under an xgrammar grammar.

`run_hf_assisted(runner, workload, case, k=, temperature=, max_tokens=, seed=)` calls
`target.generate(input_ids, assistant_model=draft, logits_processor=[processor])` where the
processor is `benchmarks.suite.hf_processor.PrefixGrammarProcessor` on xgrammar's
`GrammarMatcher` and the SAME compiled grammar specgate uses (xgrammar's own
`contrib.hf.LogitsProcessor` cannot follow assisted generation; hf_processor says why), a
constant K (`num_assistant_tokens_schedule="constant"`, `assistant_confidence_threshold=0`),
greedy at T=0 else HF's speculative sampling. HF runs one processor list on the assistant
and on the target, so its draft is masked too (q and p masked alike, like `specgate`).

HF does not report acceptance, so it is derived from forward counts (hooks on both models):
verify steps = target forwards, drafted = draft forwards (one candidate token each),
accepted = emitted − steps. The time split and mask share are not measurable (None).
A failure of the peer is recorded (error / validity), never hidden. Knows nothing about
aggregation or output files.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from benchmarks.suite.records import RequestRecord, describe_error
from benchmarks.suite.validity import is_valid

if TYPE_CHECKING:
    from benchmarks.suite.torch_runner import TorchRunner
    from benchmarks.suite.workloads import Case, Workload


def _count_forwards(model: Any) -> tuple[list[int], Any]:
    counter = [0]

    def hook(_module: Any, _args: Any, _output: Any) -> None:
        counter[0] += 1

    return counter, model.register_forward_hook(hook)


def run_hf_assisted(
    runner: TorchRunner, workload: Workload, case: Case, *, k: int, temperature: float, max_tokens: int,
    seed: int,
) -> RequestRecord:
    import torch
    from transformers import GenerationConfig

    record = RequestRecord(workload.name, "hf-assisted", case.case_id, k, temperature)
    if runner.draft_model is None:
        record.error = "hf-assisted needs a draft model"
        return record
    start = time.perf_counter()
    hooks = []
    try:
        processors = []
        grammar = runner.grammar(workload, case)
        if grammar is not None:
            if grammar.backend != "xgrammar":
                raise ValueError(f"hf-assisted needs the xgrammar backend, got {grammar.backend!r}")
            from benchmarks.suite.hf_processor import PrefixGrammarProcessor

            handle = grammar._handle  # specgate's SQL grammar wraps xgrammar's with a whitespace cap:
            compiled = getattr(handle, "compiled", handle)  # HF gets the bare xgrammar grammar
        ids = torch.tensor([runner.prompt_ids(case)], dtype=torch.long)
        if grammar is not None:
            processors.append(PrefixGrammarProcessor(compiled, prompt_len=ids.shape[1]))
        target_calls, hook = _count_forwards(runner.target_model)
        hooks.append(hook)
        draft_calls, hook = _count_forwards(runner.draft_model)
        hooks.append(hook)
        runner.draft_model.generation_config.num_assistant_tokens = k
        runner.draft_model.generation_config.num_assistant_tokens_schedule = "constant"
        runner.draft_model.generation_config.assistant_confidence_threshold = 0.0
        config = GenerationConfig(
            max_new_tokens=max_tokens, do_sample=temperature > 0,
            temperature=temperature if temperature > 0 else None, top_p=None, top_k=None,
            eos_token_id=runner.stop_ids, pad_token_id=runner.stop_ids[0],
            num_assistant_tokens=k, num_assistant_tokens_schedule="constant",
        )
        torch.manual_seed(seed)
        with torch.no_grad():
            out = runner.target_model.generate(
                ids, attention_mask=torch.ones_like(ids), generation_config=config,
                assistant_model=runner.draft_model, logits_processor=processors,
            )
        new_ids = out[0, ids.shape[1]:].tolist()
        record.latency_s = time.perf_counter() - start
        record.completion_tokens = len(new_ids)
        record.steps = target_calls[0]
        record.draft_tokens = draft_calls[0]
        record.accepted_tokens = max(0, len(new_ids) - target_calls[0])
        record.decode_tokens = len(new_ids)
        record.decode_steps = target_calls[0]
        record.decode_time_s = record.latency_s  # no separate prefill in HF assisted decoding
        record.finish_reason = "stop" if new_ids and new_ids[-1] in runner.stop_ids else "length"
        record.text = runner.text(new_ids)
        record.valid = is_valid(record.text, case.check)
    except Exception as exc:  # the peer failing is a finding, recorded per request
        record.latency_s = time.perf_counter() - start
        record.error = describe_error(exc)
    finally:
        for hook in hooks:
            hook.remove()
    return record
