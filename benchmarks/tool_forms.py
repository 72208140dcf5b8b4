"""How the models we ship write a tool call when nothing constrains them.

For each model, a seeded sample of BFCL questions per category is rendered with the model's
own chat template (tools included, as the gateway renders them: `engine.prompts`), decoded
greedily with no grammar on llama.cpp's kernels (the model's Q4_K_M GGUF, the weights the
engine runs), and each answer is classified by `classify`: the form of the call
(tagged `<tool_call>`, bare JSON, bare in a ```json fence, a list of calls, fenced or not) and
whether its opening is one the `auto` grammar switches on at (`grammars.tool_calls`), so
that the admitted forms are decided by what the models write, not by guessing. Prints a
table per model and writes `benchmarks/results/tool_forms.{json,md}`.

    python -m benchmarks.tool_forms --models qwen2.5-coder-1.5b qwen2.5-coder-0.5b --per-category 4

Knows nothing of servers, speculation or the BFCL answers (that is benchmarks.bfcl_eval).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import pathlib
import re
import time
from typing import Any

from benchmarks.suite.bfcl_data import CATEGORIES, load_questions
from engine.pacing.hardware import cpu_info
from engine.prompts import encode_text, render_chat
from grammars.tool_calls import BARE_OPENINGS, CALL_BEGIN, parse_tool_calls

RESULTS = pathlib.Path(__file__).parent / "results"
_OBJECT_OPENING = re.compile(r'\{\s*"(?:name|function)"\s*:\s*"')


def classify(text: str, names: list[str]) -> dict[str, Any]:
    """The form of one unconstrained answer: `form` (tagged, bare, fenced, list, fenced-list,
    text), `opening` (the text from the object's `{` to its name's quote, as written) and
    `parsed` (the calls the gateway's scanner reads: the opening is an admitted one)."""
    _content, calls = parse_tool_calls(text, names)
    match = _OBJECT_OPENING.search(text)
    opening = match.group(0) if match else None
    stripped = text.strip()
    if CALL_BEGIN in text:
        form = "tagged"
    elif match is None:
        form = "text"
    else:
        fenced = "```" in stripped[: match.start()]
        listed = "[" in stripped[: match.start()].replace("```json", "")
        form = ("fenced-" if fenced else "") + ("list" if listed else "bare")
    return {"form": form, "opening": opening, "parsed": len(calls),
            "admitted_opening": opening in BARE_OPENINGS if opening else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"])
    parser.add_argument("--per-category", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parents[2] / "shared" / "data")
    args = parser.parse_args()

    from llama_cpp import Llama
    from transformers import AutoTokenizer

    from engine.models import gguf_for, resolve_model

    questions = []
    for category in CATEGORIES:
        sample, _ = load_questions(category, data_dir=args.data_dir, per_category=args.per_category,
                                   seed=args.seed, max_prompt_chars=6000)
        questions += sample
    document: dict[str, Any] = {"cpu": cpu_info().describe(), "date": datetime.date.today().isoformat(),
                                "max_tokens": args.max_tokens, "models": {}}
    for name in args.models:
        tokenizer = AutoTokenizer.from_pretrained(str(resolve_model(name)))
        model = Llama(model_path=str(gguf_for(name)), n_ctx=4096, n_threads=cpu_info().cores,
                      seed=args.seed, verbose=False)
        rows = []
        for question in questions:
            prompt_ids = encode_text(tokenizer, render_chat(tokenizer, question.messages, question.tools))
            started = time.perf_counter()
            out = model.create_completion(prompt_ids, max_tokens=args.max_tokens, temperature=0.0)
            text = str(out["choices"][0]["text"])  # type: ignore[index]
            names = [tool["function"]["name"] for tool in question.tools]
            row = {"id": question.id, "category": question.category, "text": text,
                   "seconds": round(time.perf_counter() - started, 1), **classify(text, names)}
            rows.append(row)
            print(name, row["id"], row["form"], repr(row["opening"]), row["parsed"], flush=True)
            document["models"][name] = rows
            _write(document)  # after every answer: a stopped run keeps what it measured
    print(report(document))


def _write(document: dict[str, Any]) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tool_forms.json").write_text(json.dumps(document, indent=1) + "\n")
    (RESULTS / "tool_forms.md").write_text(report(document))


def report(document: dict[str, Any]) -> str:
    lines = ["# Tool-call forms written unconstrained (greedy)", "",
             f"Machine: {document['cpu']}. Measured: {document['date']}. "
             f"`python -m benchmarks.tool_forms`, max_tokens {document['max_tokens']}.", ""]
    for name, rows in document["models"].items():
        forms = collections.Counter(row["form"] for row in rows)
        openings = collections.Counter(row["opening"] for row in rows if row["opening"])
        parsed = sum(1 for row in rows if row["parsed"])
        with_call = sum(1 for row in rows if row["form"] != "text")
        lines += [f"## {name}", "", "| form | answers |", "|---|---|"]
        lines += [f"| {form} | {count} |" for form, count in forms.most_common()]
        lines += ["", "| opening as written | answers | admitted |", "|---|---|---|"]
        lines += [f"| `{json.dumps(opening)}` | {count} | {opening in BARE_OPENINGS} |"
                  for opening, count in openings.most_common()]
        lines += ["", f"Answers that write a call: {with_call} of {len(rows)}; read as calls by the "
                  f"gateway's scanner: {parsed}.", ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
