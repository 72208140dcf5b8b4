"""Checks of `engine.vllm.mrv2` against the real vLLM 0.34 package, run by test_vllm_mrv2.py in
a subprocess whose PYTHONPATH puts that package (Python files only, no compiled kernels) first.

Usage: python tests/engine/vllm/mrv2_check.py <qwen2.5 tokenizer dir> [<qwen3 tokenizer dir>]
(prints "OK <n> checks"; part 4 runs only with the Qwen3 tokenizer)

1. every vLLM 0.34 internal the adapter relies on exists with the expected parameters;
2. the plugin's `register()` picks the MRV2 hook set, registers `specgate_draft`, and vLLM
   resolves it to our config and speculator (and accepts the method in SpeculativeConfig);
3. the mask step on CPU tensors, through vLLM's own `DraftModelSpeculator.sample_draft`:
   greedy drafts are the masked argmax; with probabilistic drafts the logits handed to
   vLLM's Gumbel sampler (which caches them as q) are masked; `propose` syncs the matchers
   with the request's output tokens, rolls them back, and cuts an unmaskable row to -1;
4. reasoning and the draft record through the same mask step (Qwen3 tokenizer, vLLM 0.34's
   own reasoning parsers and constraint-bounds function behind the plugin's ReasoningGate):
   a reasoning request's draft rows up to and including `</think>` reach vLLM's sampler raw,
   later rows carry exactly a fresh matcher's mask over the tokens after `</think>`, one
   chain straddles `</think>`; with SPECGATE_VLLM_RECORD_DRAFTS=1 every propose leaves one
   record step equal to a DraftRecord fed what vLLM's sampler saw and cached.
"""

from __future__ import annotations

import inspect
import os
import sys
from types import SimpleNamespace
from typing import Any

import torch

V = 151_936
CHECKS = [0]


def ok(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(what)
    CHECKS[0] += 1


def main(tokenizer_dir: str, qwen3_dir: str | None = None) -> None:
    import vllm

    ok(vllm.__version__.startswith("0.34"), f"vLLM under test is {vllm.__version__}")
    from engine.vllm.internals import check_internals

    problems = check_internals("mrv2")
    ok(not problems, "vLLM 0.34 internals moved:\n" + "\n".join(problems))

    # 2. registration through the plugin entry point
    os.environ["SPECGATE_VLLM_MODE"] = "full"
    from engine.vllm import plugin

    ok(plugin.vllm_api() == "mrv2", f"hook set {plugin.vllm_api()}")
    plugin.register()
    plugin.register()  # re-entrant (vLLM may load plugins more than once)
    from vllm.v1.worker.gpu.spec_decode import speculator_config as sc
    from vllm.v1.worker.gpu.spec_decode.speculator import BaseSpeculator
    from vllm.v1.worker.gpu.spec_decode.standalone_ar.config import StandaloneARSpeculatorConfig
    from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import StandaloneARSpeculator

    ok("specgate_draft" in sc.registered_speculative_methods(), "specgate_draft not registered")
    cfg = sc.get_custom_speculator_config_class("specgate_draft")
    ok(cfg is not None and issubclass(cfg, StandaloneARSpeculatorConfig), f"config {cfg}")
    assert cfg is not None
    ok(cfg.base_method == "draft_model", f"base method {cfg.base_method}")
    from vllm.utils.import_utils import resolve_obj_by_qualname

    spec_cls = resolve_obj_by_qualname(cfg.speculator_class)
    from engine.vllm.mrv2 import SpecgateDraftSpeculator

    ok(spec_cls is SpecgateDraftSpeculator and issubclass(spec_cls, StandaloneARSpeculator)
       and issubclass(spec_cls, BaseSpeculator), f"speculator {spec_cls}")
    ok("req_states" in inspect.signature(spec_cls).parameters, "init_speculator would not pass req_states")
    from vllm.config.speculative import SpeculativeConfig

    ok(SpeculativeConfig._validate_method("specgate_draft") == "specgate_draft", "method refused")
    for name in ("propose", "compute_draft_logits", "sample_draft", "init_cudagraph_manager", "add_request",
                 "on_requests_finished", "_configure_decode_metadata_update"):
        base = inspect.signature(getattr(StandaloneARSpeculator, name)).parameters
        ours = inspect.signature(getattr(SpecgateDraftSpeculator, name)).parameters
        ok(list(ours)[:2] == list(base)[:2], f"{name}: {list(ours)} vs vLLM's {list(base)}")
    from vllm.v1.worker.worker_base import WorkerBase

    ok(all(hasattr(WorkerBase, m) for m in ("specgate_draft_mask_stats", "specgate_request_counts",
                                            "specgate_recent_drafts")), "RPCs")

    # 3. the mask step on CPU tensors
    mask_step(tokenizer_dir)
    # 4. reasoning and the draft record
    if qwen3_dir is not None:
        for parser in ("qwen3", "deepseek_r1"):
            reasoning_step(qwen3_dir, parser)
    print(f"OK {CHECKS[0]} checks")


def _speculator(masker: Any, lm_logits: torch.Tensor) -> Any:
    """A SpecgateDraftSpeculator without vLLM's device set-up: only what sample_draft reads."""
    from engine.vllm.mrv2 import SpecgateDraftSpeculator

    spec = object.__new__(SpecgateDraftSpeculator)
    spec.model = SimpleNamespace(compute_logits=lambda h: lm_logits[: h.shape[0]].clone())
    spec.use_local_argmax_reduction = False
    spec.draft_watermarker = None
    spec.acceptance_estimator = None
    spec.use_fp64_gumbel = False
    spec._masking = True
    spec._specgate_masker = masker
    spec._slot_params = {}
    spec._recording = None
    spec._masked_logits = None
    return spec


def mask_step(tokenizer_dir: str) -> None:
    import xgrammar as xgr
    from transformers import AutoTokenizer

    from engine.vllm.draft_mask import DraftMasker, MaskRow
    from grammars import GrammarCompiler, spec_from_request
    from sampler import unpack_bitmask

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    compiled = GrammarCompiler(tok, vocab_size=V).compile(spec_from_request(
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}))
    ids = list(tok.encode('{"a": 12}', add_special_tokens=False))

    def allowed_after(prefix: list[int]) -> torch.Tensor:
        m = compiled.matcher()
        for t in prefix:
            assert m.accept_token(t)
        bm = torch.zeros(1, (V + 31) // 32, dtype=torch.int32)
        m.fill_mask(bm, 0)
        return unpack_bitmask(bm, V)[0]

    # raw draft logits whose argmax the grammar forbids at the first position: token 0 ('!')
    raw = torch.zeros(2, V)
    raw[:, 0] = 50.0
    raw[:, ids[0]] = 5.0
    masker = DraftMasker(compile_fn=lambda _k: xgr.GrammarMatcher(compiled._handle), vocab_size=V, debug=True)
    spec = _speculator(masker, raw)
    args = (torch.zeros(2, 8), torch.zeros(2, dtype=torch.int64), torch.tensor([0, 1]),
            torch.ones(2), torch.zeros(2, dtype=torch.int64), torch.tensor(0))
    # greedy drafts: row 0 has the grammar, row 1 none
    masker.begin([MaskRow("g", history=(), new_tokens=(), grammar_key="k"), MaskRow("f", (), (), masked=False)])
    sampled = spec.sample_draft(*args, None)
    ok(int(sampled[0]) == ids[0], f"greedy draft {int(sampled[0])} is not the masked argmax {ids[0]}")
    ok(int(sampled[1]) == 0, "the unconstrained row must keep vLLM's raw argmax")
    masker.end()

    # probabilistic drafts: vLLM's gumbel_sample caches the logits it is given as q
    import vllm.v1.worker.gpu.spec_decode.speculator as vspec

    seen: dict[str, torch.Tensor] = {}

    def fake_gumbel(logits: torch.Tensor, *a: Any, logits_cache: torch.Tensor | None = None, **k: Any) -> Any:
        seen["logits"] = logits.clone()
        return logits.argmax(dim=-1)

    real_gumbel = vspec.gumbel_sample
    vspec.gumbel_sample = fake_gumbel
    try:
        masker.begin([MaskRow("g", history=(), new_tokens=(), grammar_key="k"), MaskRow("f", (), (), masked=False)])
        cache = SimpleNamespace(values=torch.zeros(2, 1, V), row_mapping=None)
        spec.sample_draft(*args, cache)
        masker.end()
    finally:
        vspec.gumbel_sample = real_gumbel
    q_support = torch.isfinite(seen["logits"][0])
    ok(bool((q_support == allowed_after([])).all()), "the q vLLM samples and caches is not the grammar's mask")
    ok(bool(torch.isfinite(seen["logits"][1]).all()), "an unconstrained row was masked")

    # propose: matchers synced from req_states, drafts cut for an unmaskable row
    from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import StandaloneARSpeculator

    prompt_len = 3
    all_ids = torch.zeros(4, 32, dtype=torch.int32)
    all_ids[0, prompt_len:prompt_len + 2] = torch.tensor(ids[:2])  # request g emitted 2 tokens
    spec.req_states = SimpleNamespace(total_len=SimpleNamespace(gpu=torch.tensor([prompt_len + 2, 0, 5, 0])),
                                      prompt_len=SimpleNamespace(np=[prompt_len, 0, prompt_len, 0]),
                                      all_token_ids=SimpleNamespace(gpu=all_ids))
    from vllm.sampling_params import StructuredOutputsParams

    def params(backend: str | None) -> Any:
        so = StructuredOutputsParams(json=schema)
        if backend is not None:
            so._backend = backend
        return SimpleNamespace(structured_outputs=so, extra_args=None)

    spec.specgate_add_request(0, "g", params("xgrammar"))
    spec.specgate_add_request(2, "u", params("guidance"))
    batch = SimpleNamespace(req_ids=["g", "u"], idx_mapping_np=[0, 2], num_reqs=2)
    raw2 = torch.zeros(2, V)
    raw2[:, 0] = 50.0
    spec.model = SimpleNamespace(compute_logits=lambda h: raw2[: h.shape[0]].clone())
    masks: list[torch.Tensor] = []

    def fake_propose(self: Any, input_batch: Any, *a: Any, **k: Any) -> torch.Tensor:
        out = torch.zeros(2, 2, dtype=torch.int64)
        for step in range(2):
            out[:, step] = self.sample_draft(*args, None)
            masks.append(torch.isfinite(self.compute_draft_logits(torch.zeros(2, 8), 0))[0])
        return out

    from engine.vllm import plugin as plug

    real_make = plug._make_masker
    real_propose = StandaloneARSpeculator.propose
    StandaloneARSpeculator.propose = fake_propose  # type: ignore[method-assign]
    plug._make_masker = lambda holder: masker  # type: ignore[assignment]
    try:
        drafts = spec.propose(batch)
    finally:
        StandaloneARSpeculator.propose = real_propose  # type: ignore[method-assign]
        plug._make_masker = real_make  # type: ignore[assignment]
    ok(masker.consumed("g") == 2, f"matcher consumed {masker.consumed('g')} of 2 output tokens")
    ok(bool((masks[0] == allowed_after(ids[:2] + [int(drafts[0, 0])])).all()),
       "the second draft step's mask is not the grammar's after output + first draft")
    ok(drafts[1].tolist() == [-1, -1], f"unmaskable row drafts {drafts[1].tolist()} (want none)")
    ok(all(int(t) >= 0 for t in drafts[0]), "the grammar row lost its drafts")
    ok(masker.stats.unmaskable_rows == 1 and masker.stats.cut_drafts == 2, f"stats {masker.stats}")
    m = compiled.matcher()
    for t in ids[:2] + drafts[0].tolist():
        ok(m.accept_token(int(t)), "a masked draft is not grammar-valid")


THINK, END_THINK = 151667, 151668
K = 4
TEXT = '<think>\nThe user wants an object with a number and a word.\n</think>{"a": 12, "b": "yes"}'


def _gate_fn(tok: Any, parser: str) -> Any:
    """The worker's gate function: for deepseek_r1 the plugin's own (`_reasoning_gate_fn`, the
    registry's parser class); vLLM's "qwen3" registry entry needs mistral_common (absent), so
    its engine parser is built with vLLM's `make_adapters`, as the registry entry does."""
    from engine.vllm import plugin
    from engine.vllm.reasoning_gate import ReasoningGate

    if parser == "qwen3":
        from vllm.parser.engine.adapters import make_adapters
        from vllm.parser.qwen3 import Qwen3Parser

        cls = make_adapters(Qwen3Parser)[0]
        return lambda state: ReasoningGate(reasoner=lambda: cls(tokenizer=tok),
                                           prompt_token_ids=state.prompt_token_ids)
    config = SimpleNamespace(structured_outputs_config=SimpleNamespace(
        reasoning_parser=parser, enable_in_reasoning=False, reasoning_parser_plugin=""),
        model_config=SimpleNamespace(skip_tokenizer_init=False))
    return plugin._reasoning_gate_fn(config, tok)


def reasoning_step(qwen3_dir: str, parser: str) -> None:
    import vllm.v1.worker.gpu.spec_decode.speculator as vspec
    import xgrammar as xgr
    from transformers import AutoTokenizer
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import StandaloneARSpeculator

    from engine.vllm import mrv2
    from engine.vllm import plugin as plug
    from engine.vllm.draft_mask import DraftMasker
    from engine.vllm.draft_record import DraftRecord
    from grammars import GrammarCompiler, spec_from_request

    tok = AutoTokenizer.from_pretrained(qwen3_dir)
    ok(tok.convert_tokens_to_ids(["<think>", "</think>"]) == [THINK, END_THINK], "Qwen3 think tokens")
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
              "required": ["a", "b"]}
    compiled = GrammarCompiler(tok, vocab_size=V).compile(spec_from_request(
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}))
    ids = list(tok.encode(TEXT, add_special_tokens=False))
    end = ids.index(END_THINK)
    prompt = list(tok.encode(tok.apply_chat_template([{"role": "user", "content": "Give me JSON."}],
                                                     add_generation_prompt=True, tokenize=False),
                             add_special_tokens=False))

    def fresh_row(tokens: list[int]) -> torch.Tensor:
        matcher = xgr.GrammarMatcher(compiled._handle)
        for t in tokens:
            assert matcher.accept_token(t), t
        bitmask = xgr.allocate_token_bitmask(1, V)
        matcher.fill_next_token_bitmask(bitmask, 0)
        logits = torch.zeros(1, V)
        xgr.apply_token_bitmask_inplace(logits, bitmask)
        return torch.isfinite(logits[0])

    masker = DraftMasker(compile_fn=lambda _params: xgr.GrammarMatcher(compiled._handle), vocab_size=V,
                         debug=True, gate_fn=_gate_fn(tok, parser))
    current: dict[str, torch.Tensor] = {}
    spec = _speculator(masker, torch.zeros(1, V))
    spec.model = SimpleNamespace(compute_logits=lambda h: current["raw"].clone())
    spec._specgate_reasoning = True  # what the plugin's _make_masker sets when it built a gate_fn
    os.environ["SPECGATE_VLLM_RECORD_DRAFTS"] = "1"
    slot, prompt_len = 1, len(prompt)
    params = SimpleNamespace(structured_outputs=StructuredOutputsParams(json=schema), extra_args=None)
    runner = SimpleNamespace(speculator=spec, req_states=SimpleNamespace(req_id_to_index={"r": slot}))
    new_req = SimpleNamespace(req_id="r", sampling_params=params, prompt_token_ids=prompt)
    mrv2._wrap_add_requests(lambda self, out: None)(runner, SimpleNamespace(scheduled_new_reqs=[new_req]))
    ok(list(spec._slot_params[slot].prompt_token_ids) == prompt, "the runner hook lost the prompt")
    all_ids = torch.zeros(4, prompt_len + len(ids) + K + 2, dtype=torch.int32)
    all_ids[slot, :prompt_len] = torch.tensor(prompt)
    all_ids[slot, prompt_len:prompt_len + len(ids)] = torch.tensor(ids)
    total = torch.zeros(4, dtype=torch.int64)
    spec.req_states = SimpleNamespace(total_len=SimpleNamespace(gpu=total),
                                      prompt_len=SimpleNamespace(np=[0, prompt_len, 0, 0]),
                                      all_token_ids=SimpleNamespace(gpu=all_ids))
    batch = SimpleNamespace(req_ids=["r"], idx_mapping_np=[slot], num_reqs=1)
    cache = SimpleNamespace(values=torch.zeros(4, K, V), row_mapping=None)
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []  # (logits vLLM's sampler got, the model's)
    reference = DraftRecord()

    def fake_gumbel(logits: torch.Tensor, idx_mapping: torch.Tensor, *a: Any,
                    logits_cache: torch.Tensor | None = None, logits_cache_col: torch.Tensor | None = None,
                    **k: Any) -> Any:  # vLLM's kernel: caches the logits it samples, at (slot, draft step)
        seen.append((logits.clone(), current["raw"]))
        assert logits_cache is not None and logits_cache_col is not None
        logits_cache[idx_mapping.long(), logits_cache_col.long()] = logits
        reference.sample(logits, logits_cache[idx_mapping.long(), logits_cache_col.long()])
        return logits.argmax(dim=-1)

    def fake_propose(self: Any, input_batch: Any, *a: Any, **k: Any) -> torch.Tensor:
        out = torch.zeros(1, K, dtype=torch.int64)
        for step, want in enumerate(chain):
            current["raw"] = torch.randn(1, V, generator=gen)
            current["raw"][0, want] = 30.0  # the draft model's pick: the scripted token
            out[:, step] = self.sample_draft(torch.zeros(1, 8), torch.zeros(1, dtype=torch.int64),
                                             torch.tensor([slot]), torch.ones(4), torch.zeros(4, dtype=torch.int64),
                                             torch.tensor(step), cache)
        return out

    gen = torch.Generator().manual_seed(3)
    real_make, real_propose, real_gumbel = plug._make_masker, StandaloneARSpeculator.propose, vspec.gumbel_sample
    plug._make_masker = lambda holder: masker  # type: ignore[assignment]
    StandaloneARSpeculator.propose = fake_propose  # type: ignore[method-assign]
    vspec.gumbel_sample = fake_gumbel
    pos = 1  # the prefill's token is the first output token
    straddles = unmasked = steps = 0
    try:
        while pos + K < len(ids):
            total[slot] = prompt_len + pos
            chain = ids[pos:pos + K]
            straddles += 0 < chain.index(END_THINK) < K - 1 if END_THINK in chain else 0
            seen.clear()
            drafts = spec.propose(batch)
            steps += 1
            ok(drafts[0].tolist() == chain, f"{parser}: drafts {drafts[0].tolist()} != scripted {chain}")
            for i, (logits, raw) in enumerate(seen):
                at = pos + i  # the output position this row samples
                if at <= end:  # reasoning, and the row that samples `</think>`: raw
                    ok(torch.equal(logits, raw), f"{parser}: row at {at} (reasoning) was masked")
                    unmasked += 1
                else:  # after it: a fresh matcher's row over the tokens after `</think>` only
                    ok(bool((torch.isfinite(logits[0]) == fresh_row(ids[end + 1:at])).all()),
                       f"{parser}: row at {at} is not the grammar's mask after `</think>`")
            reference.close(["r"], drafts)
            # vLLM accepts every draft plus the bonus token, except once: it stops one token
            # before `</think>`, so that the next chain straddles it
            nxt = pos + K + 1
            pos = end - 1 if pos < end - 1 < nxt else nxt
    finally:
        plug._make_masker, vspec.gumbel_sample = real_make, real_gumbel  # type: ignore[assignment]
        StandaloneARSpeculator.propose = real_propose  # type: ignore[method-assign]
        os.environ.pop("SPECGATE_VLLM_RECORD_DRAFTS")
    ok(straddles == 1, f"{parser}: {straddles} chains straddle `</think>` (want 1)")
    stats = masker.stats
    ok(stats.refused_rows == stats.dead_rows == stats.limited_rows == stats.resyncs == 0, f"{parser}: {stats}")
    ok(stats.reasoning_rows == unmasked > 0 and stats.reasoning_ends == 1 and stats.masked_rows > 0,
       f"{parser}: {stats} ({unmasked} rows drawn raw)")
    record = plug._record(spec)
    got = record.steps() if record is not None else None
    ok(got is not None and len(got) == steps, f"{parser}: the 0.34 path recorded {got and len(got)} of {steps} steps")
    assert got is not None
    ok(got == reference.steps(), f"{parser}: the record differs from what vLLM's sampler saw and cached")
    ok(all(s["q_digest"] is not None and s["samples"] == K for s in got), f"{parser}: record steps {got[:1]}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
