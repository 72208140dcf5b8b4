"""`POST /v1/completions` request model: a prompt string or one list of token ids (batches
of prompts are refused: one request, one prompt), plus the shared sampling fields."""

from __future__ import annotations

from gateway.protocol.sampling_fields import SamplingFields


class CompletionRequest(SamplingFields):
    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool = False
    suffix: str | None = None

    def unsupported_fields(self) -> list[tuple[str, str]]:
        out = super().unsupported_fields()
        if isinstance(self.prompt, list) and self.prompt and not isinstance(self.prompt[0], int):
            if len(self.prompt) != 1:
                out.append(("prompt", "batched prompts are not supported; send one prompt per request"))
        if isinstance(self.prompt, list) and not self.prompt:
            out.append(("prompt", "prompt must not be empty"))
        if self.echo:
            out.append(("echo", "echo is not supported"))
        if self.suffix:
            out.append(("suffix", "suffix is not supported"))
        return out

    def single_prompt(self) -> str | list[int]:
        """The one prompt (a string or token ids); call after `unsupported_fields()` is empty."""
        prompt = self.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            return prompt[0]  # type: ignore[return-value]
        return prompt  # type: ignore[return-value]
