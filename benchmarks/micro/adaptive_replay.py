"""Replays recorded greedy match sequences (`benchmarks.micro.acceptance_trace`) under K policies
with the recorded forward costs: `engine.pacing.adaptive.AdaptiveK` as the engine runs it, and fixed
K = 1..K_max, so a change to the policy is judged on real acceptance patterns in seconds.

Replay rules (mirroring `engine.torch_engine.decoder.SpecDecoder.step` at T=0 with a model draft): the first
token comes from the target's prefill (not timed: decode only); a step at output position s
with K drafts (capped by the tokens left) accepts the run of matches from s, at most K, and
emits accepted + 1 tokens; its cost is (K - grammar-forced drafts) draft forwards + one
(K+1)-token verify, from `ForwardCosts`; the first drafting step also pays the draft's
catch-up prefill (prompt + tokens so far, `ForwardCosts.draft_prefill_cost_s`); a plain step
costs one 1-token forward. Traces replayed in order share one engine's record of output lengths
(`engine.pacing.output_lengths`, keyed by workload), as one engine's requests do. Unrevealed matches (a bonus token after a fully accepted recorded step) count as
accepted. Predicted seconds, not measured ones: it checks the policy, the bench checks the
machine.

    python -m benchmarks.micro.adaptive_replay benchmarks/results/acceptance_trace.json [--k-max 4]
"""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any


def replay(trace: dict[str, Any], costs: Any, *, policy: str, k_max: int, fixed_k: int = 0,
           max_tokens: int | None = None, shared: Any = None, lengths: Any = None) -> dict[str, Any]:
    """Decode seconds, steps and the K chosen per step of one trace under one policy; `shared`:
    the engine-wide acceptance prior (`engine.pacing.acceptance_model.AcceptancePriors`) and `lengths`
    the record of output lengths (`engine.pacing.output_lengths.OutputLengths`) the traces replayed in
    order share, as one engine's requests do."""
    from engine.pacing.adaptive import AdaptiveK

    matches = [1 if m is None else int(m) for m in trace["matches"]]
    forced = list(trace.get("forced", [False] * len(matches)))
    forced += [False] * (len(matches) - len(forced))
    length = len(matches) if max_tokens is None else min(max_tokens, len(matches))
    ctl = None
    if policy == "adaptive":
        ctl = AdaptiveK(k_max=k_max, costs=costs, **({"shared": shared.shared("model")} if shared is not None else {}))
    if ctl is not None:
        ctl.observe(k=0, num_drafts=0, num_accepted=0, draft_s=0.0, target_s=0.0)  # the prefill step
    pos, seconds, draft_started = 1, 0.0, False
    ks: list[int] = []
    while pos < length:
        if ctl is not None:
            catch_up = 0 if draft_started else trace["prompt_tokens"] + pos
            room = length - pos
            expected = (lengths.expected_remaining([trace["workload"]], generated=pos, room=room)
                        if lengths is not None else None)
            k = ctl.choose_k(catch_up_tokens=catch_up, room=room, expected_remaining=expected)
        else:
            k = fixed_k
        k = max(0, min(k, length - pos - 1))
        run = 0
        while run < k and matches[pos + run] == 1:
            run += 1
        forwards = k - sum(forced[pos: pos + k])
        catch_up_s = 0.0
        if k and not draft_started:
            catch_up_s = costs.draft_prefill_cost_s(trace["prompt_tokens"] + pos)
            draft_started = True
        draft_s = forwards * (costs.draft_s or 0.0) + catch_up_s
        target_s = costs.target_s[0] if k == 0 else costs.verify_ratio(k) * costs.plain_s
        if ctl is not None:
            ctl.observe(k=k, num_drafts=k, num_accepted=run, draft_s=draft_s, target_s=target_s)
        seconds += draft_s + target_s
        ks.append(k)
        pos += run + 1
    if lengths is not None and policy == "adaptive":
        lengths.record([trace["workload"]], length=length, truncated=length < len(matches))
    plain = (length - 1) * costs.plain_s
    return {"seconds": seconds, "plain_seconds": plain, "speedup": plain / seconds if seconds else 1.0,
            "steps": len(ks), "ks": ks}


def main(argv: list[str] | None = None) -> None:
    from engine.pacing.cost_model import ForwardCosts

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="JSON written by benchmarks.micro.acceptance_trace")
    parser.add_argument("--k-max", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=None, help="cut each trace to this many tokens")
    parser.add_argument("--fresh", action="store_true",
                        help="no engine-wide acceptance prior or length record: every trace starts cold")
    parser.add_argument("--no-length-record", action="store_true",
                        help="no record of output lengths: the draft prefill always waits for the rental")
    args = parser.parse_args(argv)
    data = json.loads(pathlib.Path(args.trace).read_text())
    shared = None
    if not args.fresh:
        try:
            from engine.pacing.acceptance_model import AcceptancePriors
        except ImportError:  # an engine from before the shared prior
            AcceptancePriors = None  # type: ignore[assignment,misc]  # noqa: N806
        shared = AcceptancePriors(depth=args.k_max) if AcceptancePriors is not None else None
    lengths = None
    if not args.fresh and not args.no_length_record:
        from engine.pacing.output_lengths import OutputLengths

        lengths = OutputLengths()
    costs = ForwardCosts.from_dict(data["costs"])
    print(f"costs: {costs.describe()[1]}; draft {(costs.draft_s or 0) * 1e3:.0f} ms/token, "
          f"prefill {(costs.draft_prefill_s or 0) * 1e3:.1f} ms/token")
    fixed = list(range(1, args.k_max + 1))
    print("| workload | case | tokens | adaptive | " + " | ".join(f"K={k}" for k in fixed) + " | adaptive Ks |")
    print("|---|---|---|---|" + "---|" * len(fixed) + "---|")
    total = {"adaptive": 0.0, **{f"K={k}": 0.0 for k in fixed}}
    for trace in data["traces"]:
        adaptive = replay(trace, costs, policy="adaptive", k_max=args.k_max, max_tokens=args.max_tokens,
                          shared=shared, lengths=lengths)
        row = [replay(trace, costs, policy="fixed", k_max=args.k_max, fixed_k=k, max_tokens=args.max_tokens)
               for k in fixed]
        ks = "".join(str(k) for k in adaptive["ks"])
        tokens = len(trace["matches"]) if args.max_tokens is None else min(args.max_tokens, len(trace["matches"]))
        total["adaptive"] += adaptive["speedup"]
        for k, r in zip(fixed, row, strict=True):
            total[f"K={k}"] += r["speedup"]
        print(f"| {trace['workload']} | {trace['case_id'][:28]} | {tokens} | {adaptive['speedup']:.2f} | "
              + " | ".join(f"{r['speedup']:.2f}" for r in row) + f" | {ks} |")
    n = len(data["traces"])
    print("| mean | | | " + " | ".join(f"{v / n:.3f}" for v in total.values()) + " | |")


if __name__ == "__main__":
    main()
