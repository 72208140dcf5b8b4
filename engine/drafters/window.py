"""The prompt as the draft model reads it: the first `SINK` tokens and the last `window`.

The draft model's q decides only which drafts are proposed and how many the target accepts,
never the output law (the rejection sampler's invariant: any q gives exactly the target's
masked law), so the draft may read less of the prompt than the target does. Its prompt
prefill is paid once per request on the draft's kernels, and on short structured outputs it
is a large part of all draft time (a 200-token JSON prompt on a 1-thread llama.cpp draft:
~2.3 s against ~1.4 s for all of the request's draft forwards). A window bounds that prefill
to `SINK + window` tokens whatever the prompt's length. The first `SINK` tokens are kept as
StreamingLLM's attention sinks (models put much attention on the first positions; dropping
them hurts every later one); the draft's positions are renumbered contiguously.

`draft_prompt(prompt, window=)` returns the draft's prompt, or None where it reads the whole
prompt (window 0, or a prompt that fits). Knows nothing of caches, models or grammars; what
a window costs in acceptance is measured by `specgate bench` (`specgate-whole-prompt`: none).
"""

from __future__ import annotations

from collections.abc import Sequence

SINK = 4  # first prompt tokens the draft always reads


def draft_prompt(prompt: Sequence[int], *, window: int) -> list[int] | None:
    """The draft's view of `prompt`: its first SINK and last `window` tokens (None: all of it)."""
    if window <= 0 or len(prompt) <= SINK + window:
        return None
    return [*prompt[:SINK], *prompt[len(prompt) - window:]]
