"""Which kernels run the torch engine's models on this machine: transformers (torch) or
llama.cpp (`engine.torch_engine.llama_cpp_model`).

`choose_kernels(requested, *, device, models, info=None)` resolves "auto" and returns the
reason with it, so the gateway can log it. The rule, measured (docs/speculation.md "Kernels",
`python -m benchmarks.micro.forward_cost --options llama-cpp,bf16,bf16-avx2,fp32-avx2`): llama.cpp
on the registered models' Q4_K_M GGUFs decodes several times faster than torch in any dtype
(one token, one thread, loaded machine: 79-133 ms against 607 ms bf16), but its multi-token
forwards cost about one decode per token (a 9-token forward: 10.7-12.9 decodes; its quantized
dot products are compute-bound on a CPU), so prefill and speculative verify gain nothing from
batching. Torch's bf16 multi-token forwards are cheap only where the CPU multiplies bf16
natively (`engine.pacing.hardware`): there a 9-token verify costs ~1.1-1.3 decodes and a 256-token
prefill a fraction of llama.cpp's, which is what makes speculation pay. So "auto" picks llama-cpp where the CPU has no native bf16 (torch
would run bf16 at n decodes per n tokens, or float32 at twice the bytes) and torch where it
has (cheap prefill and verify, the speculative path), provided llama.cpp can run at all: CPU
device, llama-cpp-python built, the CPU has what the build needs, and every model has a GGUF
(registered names always do; a local directory needs one `*.gguf`). An explicit choice always
wins (and fails with a clear error where it cannot run). Loads nothing.

`choose_draft_kernels(requested, *, device, draft)`: the draft model's kernels. "auto" picks
llama.cpp wherever it can run the draft, whatever the target runs on: a draft forward is a
one-token decode, exactly what llama.cpp does fastest (0.5B: 38 ms against torch bf16's 133
ms here, measured in one bench run), its distribution q may be any distribution without
changing the output law, and the draft's catch-up prefill (slower on llama.cpp: 12.8 against
3.8 ms per token) is priced by the cost model and paid off the time-to-first-token path. With
a torch target on this native-bf16 CPU that raised decode speed-up over no speculation from
1.55/1.69/1.88 to 1.88/1.80/2.00 on json/tools/chat (docs/speculation.md "Kernels").
"""

from __future__ import annotations

import pathlib

from engine.pacing.hardware import CpuInfo


def has_gguf(name_or_path: str) -> bool:
    """Whether the model has a GGUF for llama.cpp (a registered name, or a directory with one)."""
    from engine.models import REGISTRY

    if name_or_path in REGISTRY:
        return True
    directory = pathlib.Path(name_or_path).expanduser()
    return directory.is_dir() and len(list(directory.glob("*.gguf"))) == 1


def why_not_llama_cpp(*, device: str, models: list[str]) -> str:
    """Empty where llama.cpp kernels can run these models on `device`, else the reason."""
    from engine.torch_engine.llama_cpp_model import available

    if not device.startswith("cpu"):
        return f"device {device} is not a CPU"
    can_run, why_not = available()
    if not can_run:
        return why_not
    missing = [m for m in models if not has_gguf(m)]
    return f"no GGUF for {', '.join(missing)}" if missing else ""


def _resolve(requested: str, *, device: str, models: list[str], what: str) -> tuple[str, str] | None:
    """The choice where `requested` settles it (explicit, or llama.cpp cannot run); None: auto's rule decides."""
    if requested == "torch":
        return "torch", "set explicitly"
    why_not = why_not_llama_cpp(device=device, models=models)
    if requested == "llama-cpp":
        if why_not:
            raise ValueError(f"{what} 'llama-cpp' cannot run here: {why_not}")
        return "llama-cpp", "set explicitly"
    if why_not:
        return "torch", f"llama.cpp not usable: {why_not}"
    return None


def choose_kernels(requested: str, *, device: str, models: list[str],
                   info: CpuInfo | None = None) -> tuple[str, str]:
    """("torch" | "llama-cpp", why) for `requested` ("auto", "torch" or "llama-cpp")."""
    from engine.pacing.hardware import cpu_info

    settled = _resolve(requested, device=device, models=models, what="kernels")
    if settled is not None:
        return settled
    info = info if info is not None else cpu_info()
    if info.native_bf16:
        return "torch", ("CPU has native bf16: torch's bf16 prefill and verify are cheap, so speculation pays "
                         "(llama.cpp would decode faster but prefill and verify at one decode per token)")
    return "llama-cpp", ("CPU has no native bf16: llama.cpp's kernels on the Q4_K_M GGUFs decode several times "
                         "faster than torch in float32 or bf16")


def choose_draft_kernels(requested: str, *, device: str, draft: str) -> tuple[str, str]:
    """("torch" | "llama-cpp", why) for the draft model (`requested`: "auto", "torch" or "llama-cpp")."""
    settled = _resolve(requested, device=device, models=[draft], what="draft kernels")
    if settled is not None:
        return settled
    return "llama-cpp", "one-token draft forwards are fastest on llama.cpp; the output law does not depend on q"
