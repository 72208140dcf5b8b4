"""The benchmark's named configurations and what each one means.

Torch-engine configurations (specgate's own `SpecDecoder`, same models, same grammar path):
- `no-spec`: constrained decoding, no speculation (the baseline every speedup divides by);
- `spec-unmasked-draft`: draft = argmax of the RAW draft logits (vLLM's default); a draft the
  grammar refuses is truncated; verification masks p (exact);
- `spec-raw-q`: drafts sampled from the unmasked q = T(raw draft logits); a refused draft is
  kept and rejected with certainty (exact); at T=0 identical to `spec-unmasked-draft`;
- `specgate`: exactly what `specgate serve` does by default: the same grammar mask on q and p
  (drafts never stray; forced tokens are free), adaptive K <= K from the measured forward
  costs (engine.pacing.cost_model) and each request's acceptance, the auto dtype;
- `specgate-fixed-k`: the same with a fixed K (the K sweep);
- `hf-plain`: transformers bf16, no speculation: the fixed reference,
  whatever dtype the bench's own backend resolves to;
- `ngram`: prompt lookup + grammar-forced tokens, no draft model;
- `forced-only`: grammar-forced tokens only (isolates what the grammar alone gives);
- `specgate-llama-draft`: `specgate` with the draft model on llama.cpp's kernels (its Q4_K_M
  GGUF; `--draft-kernels llama-cpp`), the target on the bench's own kernels, with the costs
  measured for that pair.
Every torch configuration runs with the engine's default prefix cache (each configuration its
own); `no-spec-nopc` / `specgate-nopc` are `no-spec` / `specgate` with it off (the A/B).
The masked draft-model configurations draft from history as the engine does by default
(`engine.drafters.history`), each from its own outputs, emptied at the start of every matrix
cell group and sweep point (no case ever drafts from its own earlier run);
`specgate-no-history` is `specgate` without it (the A/B).
Like the engine, the draft-model configurations draft from a prompt window (the first 4 and
the last 64 prompt tokens by default, `--draft-window`, `engine.drafters.window`); `specgate-whole-prompt` is `specgate`
whose draft reads the whole prompt (the A/B: a short draft prefill against what the draft
loses of the prompt). `specgate-close` is `specgate` with `close_within_max_tokens` (near
max_tokens a constrained answer is closed by grammars.closing: another output law there).
Peers:
- `hf-assisted`: HF transformers `generate(assistant_model=...)` under the same xgrammar
  grammar through a processor that follows input_ids (benchmarks.suite.hf_processor; xgrammar's
  own `contrib.hf.LogitsProcessor` fails under assisted generation). HF runs one processor
  list on the assistant and the target, so its draft is masked as well;
- `vllm-no-spec` (vLLM without speculation: the baseline of the vLLM rows, `VLLM_BASELINE`),
  `vllm-native`, `vllm-native-fixed`, `specgate-vllm`, `specgate-vllm-stepk` (per-step draft
  length, `engine.vllm.step_k`): from `benchmarks.vllm.configs`
  (`run_vllm_config`); rows are marked unavailable when vLLM is not installed.

Knows nothing about workloads or timing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class TorchConfig:
    drafter: Literal["model", "ngram", "forced", "none"]
    draft_mask: bool = True
    unmasked_mode: Literal["argmax", "sample"] = "argmax"
    adaptive_k: bool = False
    bf16_reference: bool = False  # runs on a bf16 target whatever the bench's dtype
    prefix_cache: bool = True  # the engine's default automatic prefix cache (engine.torch_engine.prefix_cache)
    llama_draft: bool = False  # the draft model on llama.cpp kernels (its GGUF), the target as the bench's
    history: bool = True  # the engine's default history drafts (masked draft model only: engine.drafters.history)
    whole_prompt: bool = False  # the draft reads the whole prompt, not the bench's window (engine.drafters.window)
    close: bool = False  # requests ask close_within_max_tokens (a constrained answer closed within max_tokens)

    @property
    def speculates(self) -> bool:
        return self.drafter != "none"


TORCH_CONFIGS: dict[str, TorchConfig] = {
    "no-spec": TorchConfig(drafter="none"),
    "spec-unmasked-draft": TorchConfig(drafter="model", draft_mask=False, unmasked_mode="argmax"),
    "spec-raw-q": TorchConfig(drafter="model", draft_mask=False, unmasked_mode="sample"),
    "specgate": TorchConfig(drafter="model", draft_mask=True, adaptive_k=True),
    "specgate-fixed-k": TorchConfig(drafter="model", draft_mask=True),
    "hf-plain": TorchConfig(drafter="none", bf16_reference=True),
    "ngram": TorchConfig(drafter="ngram"),
    "forced-only": TorchConfig(drafter="forced"),
    "no-spec-nopc": TorchConfig(drafter="none", prefix_cache=False),
    "specgate-nopc": TorchConfig(drafter="model", draft_mask=True, adaptive_k=True, prefix_cache=False),
    "specgate-no-history": TorchConfig(drafter="model", draft_mask=True, adaptive_k=True, history=False),
    "specgate-whole-prompt": TorchConfig(drafter="model", draft_mask=True, adaptive_k=True, whole_prompt=True),
    "specgate-close": TorchConfig(drafter="model", draft_mask=True, adaptive_k=True, close=True),
    "specgate-llama-draft": TorchConfig(drafter="model", draft_mask=True, adaptive_k=True, llama_draft=True),
}
HF_CONFIGS = ("hf-assisted",)
VLLM_CONFIGS = ("vllm-no-spec", "vllm-native", "vllm-native-fixed", "specgate-vllm", "specgate-vllm-stepk",
                "specgate-vllm-fixedk")
CONFIGS = (*TORCH_CONFIGS, *HF_CONFIGS, *VLLM_CONFIGS)
BASELINE = "no-spec"
VLLM_BASELINE = "vllm-no-spec"


def check_configs(names: tuple[str, ...] | list[str]) -> None:
    unknown = [name for name in names if name not in CONFIGS]
    if unknown:
        raise ValueError(f"unknown configuration(s) {unknown}; expected names from {', '.join(CONFIGS)}")
