"""A verified GGUF -> a bf16 safetensors model directory with tokenizer and chat template.

transformers dequantizes the whole GGUF on load (tens of seconds; done once per pull). The
GGUF-loaded model carries a quantizer and `config.quantization_config`, which make
`save_pretrained` raise; both are dropped, since the weights are already plain tensors. The
tokenizer and its chat template come from the GGUF metadata; the template is written as
`chat_template.jinja` after the registry's literal fixes (known upstream typos) and, when the
registry asks for it, must render `tools`. This module
knows nothing about wheels, caches or manifests.
"""

from __future__ import annotations

import pathlib
from typing import Any

from engine.models.errors import PullError

_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "specgate_probe_tool",
        "description": "probe",
        "parameters": {"type": "object", "properties": {}},
    },
}


def fix_chat_template(
    template: str, fixes: tuple[tuple[str, str], ...], *, name: str
) -> str:
    """Apply each (wrong, right) replacement; each `wrong` must occur exactly once."""
    for wrong, right in fixes:
        count = template.count(wrong)
        if count != 1:
            raise PullError(
                f"{name}: chat template fix expected 1 occurrence of {wrong[:60]!r}..., "
                f"found {count} (did the GGUF change?)"
            )
        template = template.replace(wrong, right)
    return template


def check_chat_template(tokenizer: Any, *, needs_tools: bool, name: str) -> None:
    """Raise PullError unless `tokenizer` has a chat template (rendering `tools` if asked)."""
    if not getattr(tokenizer, "chat_template", None):
        raise PullError(f"{name}: the GGUF carries no chat template")
    messages = [{"role": "user", "content": "hi"}]
    try:
        rendered = tokenizer.apply_chat_template(
            messages, tools=[_PROBE_TOOL] if needs_tools else None,
            tokenize=False, add_generation_prompt=True,
        )
    except Exception as exc:  # a template error is a jinja error of any type
        raise PullError(f"{name}: the chat template does not render: {exc}") from exc
    if needs_tools and "specgate_probe_tool" not in rendered:
        raise PullError(f"{name}: the chat template ignores `tools`")


def convert_gguf(
    gguf_path: pathlib.Path,
    out_dir: pathlib.Path,
    *,
    name: str,
    needs_tools: bool = False,
    template_fixes: tuple[tuple[str, str], ...] = (),
) -> None:
    """Write config, bf16 safetensors, tokenizer files and chat_template.jinja to `out_dir`.

    Raises PullError if the GGUF does not load or the saved directory lacks a part.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory, filename = str(gguf_path.parent), gguf_path.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=filename)
        if template_fixes and getattr(tokenizer, "chat_template", None):
            tokenizer.chat_template = fix_chat_template(
                tokenizer.chat_template, template_fixes, name=name
            )
        check_chat_template(tokenizer, needs_tools=needs_tools, name=name)
        model: Any = AutoModelForCausalLM.from_pretrained(
            directory, gguf_file=filename, dtype=torch.bfloat16
        )
    except PullError:
        raise
    except Exception as exc:
        raise PullError(f"{name}: transformers could not load {gguf_path.name}: {exc}") from exc
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model = model.to(torch.bfloat16)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    if not (out_dir / "chat_template.jinja").is_file():
        (out_dir / "chat_template.jinja").write_text(tokenizer.chat_template)
    missing = [
        f for f in ("config.json", "tokenizer.json", "chat_template.jinja")
        if not (out_dir / f).is_file()
    ]
    if missing or not list(out_dir.glob("*.safetensors")):
        raise PullError(f"{name}: conversion wrote no {missing or ['*.safetensors']} in {out_dir}")
