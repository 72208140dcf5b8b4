"""One measured request: the flat record every runner (torch, HF, vLLM) produces.

Times are seconds. `decode_*` exclude the first step (which carries the prompt prefill of
the target and, for a draft model, of the draft), so per-step costs and decode tokens/s
compare speculation itself; `latency_s` is the whole request, prefill included. A runner
that cannot split prefill off (vLLM) sets `timing="e2e"`.
`strays_early` counts strays at steps that began within the first EARLY_TOKENS output
tokens. Fields a runner cannot measure stay None (never a made-up number).
"""

from __future__ import annotations

import pathlib
from dataclasses import asdict, dataclass
from typing import Any

EARLY_TOKENS = 4


@dataclass
class RequestRecord:
    workload: str
    config: str
    case_id: str
    k: int
    temperature: float
    completion_tokens: int = 0
    steps: int = 0
    draft_tokens: int | None = None
    accepted_tokens: int | None = None
    forced_draft_tokens: int | None = None
    forced_accepted_tokens: int | None = None
    region_drafts: dict[str, int] | None = None    # verified drafts per output region (grammars.regions)
    region_accepted: dict[str, int] | None = None  # of those, accepted
    draft_forwards: int | None = None
    draft_strays: int | None = None
    strays_early: int | None = None
    time_draft_s: float | None = None
    time_target_s: float | None = None
    time_mask_s: float | None = None
    time_sampler_s: float | None = None
    decode_tokens: int = 0
    decode_steps: int = 0
    decode_time_s: float = 0.0
    decode_draft_s: float | None = None
    decode_verify_s: float | None = None
    latency_s: float = 0.0
    valid: bool | None = None
    finish_reason: str | None = None
    text: str = ""
    error: str | None = None
    timing: str = "decode"  # "decode": prefill step excluded; "e2e": decode_* include the prefill
    ttft_s: float | None = None  # request start (prompt, grammar) to the first committed token
    cached_tokens: int | None = None  # prompt positions the target restored from the prefix cache
    decode_predicted_s: float | None = None  # engine.pacing.cost_model's time for the decode steps that ran
    decode_plain_predicted_s: float | None = None  # ... and for as many plain steps as decode tokens
    plugin_s: float | None = None  # vLLM: the specgate plugin's own host time in the worker
    worker_step_s: float | None = None  # vLLM: the worker's step time (execute_model + sample_tokens)
    repeat: int = 0  # pass over the cases (vLLM rows run the cases `vllm_repeats` times in one engine)
    first_draft_step: int | None = None  # torch: the step that first verified drafts (1 = the prefill step; 0 none)
    closing_tokens: int | None = None  # torch: tokens a closing wrote (close_within_max_tokens; grammars.closing)
    pacing_record: str | None = None  # torch: the output-length record that paced the draft prefill ("": none)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def describe_error(exc: BaseException) -> str:
    """`Type: message (at file:line of the innermost frame)`, at most 500 characters."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {pathlib.Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"[:500]
