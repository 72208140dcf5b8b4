"""Closing: a short way, in tokens, from a matcher's state to the end of its grammar.

`closing_tokens(matcher, budget=)` searches sequences of *moves* (short texts the matcher
proposes at each state, `Matcher.closing_moves()`: closers, fillers, the names that may
come there), each move encoded alone, for a text after which the grammar may stop; it
returns that text's tokens (spelled whole by the tokenizer where the grammar takes that
spelling and it is shorter: `"]}` one token rather than three) with the stop token last, at
most `budget` tokens in all, or None where it found none within `max_states` expanded states.
A path's moves may take up to SPELLING_SLACK times the budget before they are spelled whole.
The matcher's state is unchanged afterwards.

The search is best first, on the tokens written plus `WEIGHT` times the matcher's estimate of
what is still owed (`Matcher.closing_debt()`: open brackets, clauses, names). Where the
matcher makes no estimate it is depth first, with its moves in their order (closers first),
and then fewest tokens first, within one token less than what depth first found and a fifth
of the states (depth first may open a string element where the array could close). A text
reached again by another path is not expanded again.
It is a bounded search over a small alphabet, not a proof: None does not mean no closing
exists, and the sequence found is short, not always the shortest.

Knows nothing of sampling, models or engines.
"""

from __future__ import annotations

import heapq

from grammars.matcher import Matcher

WEIGHT = 2  # tokens one unit of debt is worth in the search's order
MAX_STATES = 1500  # states expanded before the search gives up (~0.5 s on a SQL grammar)
SPELLING_SLACK = 2  # a path's moves (each encoded alone) may take this many times the budget: spelled whole, fewer
SHORTER_SHARE = 5  # the search for a shorter closing than depth first's expands MAX_STATES / this
_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def closing_tokens(matcher: Matcher, *, budget: int, max_states: int = MAX_STATES) -> list[int] | None:
    if matcher.is_terminated():
        return []
    if not matcher.stop_token_ids or budget < 1:
        return None
    if type(matcher).closing_debt is not Matcher.closing_debt:
        return _search(matcher, budget=budget, max_states=max_states, order="debt")
    found = _search(matcher, budget=budget, max_states=max_states, order="depth")
    if found is None or len(found) <= 2:
        return found
    shorter = _search(matcher, budget=len(found) - 1, max_states=max_states // SHORTER_SHARE, order="tokens")
    return found if shorter is None else shorter


def _search(matcher: Matcher, *, budget: int, max_states: int, order: str) -> list[int] | None:
    """One bounded search; `order`: "debt" (tokens + WEIGHT x closing_debt), "depth"
    (deepest first, moves in order) or "tokens" (fewest tokens first)."""
    stop = matcher.stop_token_ids[0]
    encoded: dict[str, list[int]] = {}
    space = matcher.encode(" ")
    frontier: list[tuple[int, int, int, str, tuple[int, ...]]] = [(0, 0, 0, "", ())]  # (rank, tokens, serial, text, ids)
    seen: set[str] = set()  # texts expanded: a text reached again (another path) is not expanded twice
    serial = 0
    for _ in range(max_states):
        if not frontier:
            return None
        _, written, _, text, ids = heapq.heappop(frontier)
        if text in seen:
            continue
        seen.add(text)
        advanced = 0
        try:
            for token in ids:  # replay the path (every token was accepted on the way here)
                if not matcher.accept_token(token):
                    break
                advanced += 1
            if advanced < len(ids):
                continue
            if matcher.can_stop() and matcher.closing_valid():
                matcher.rollback(advanced)
                advanced = 0
                spelled = _spelled(matcher, text, ids)
                if len(spelled) + 1 <= budget:
                    return [*spelled, stop]
                continue
            for move in reversed(matcher.closing_moves()):  # the first pushed last: popped first
                tokens = encoded.get(move)
                if tokens is None:
                    tokens = encoded[move] = matcher.encode(move)
                child = text + move
                if not tokens or written + len(tokens) + 1 > budget * SPELLING_SLACK:
                    continue
                taken = 0
                for token in tokens:
                    if not matcher.accept_token(token) or matcher.is_terminated():
                        break
                    taken += 1
                # a move ending in a word must end it there (a space may follow, or the end): a
                # keyword or name is not left as the prefix of another word
                if taken == len(tokens) and (move[-1] not in _WORD or matcher.can_stop()
                                             or matcher.validate(space) == len(space)):
                    serial -= 1  # among equals, the newest first: depth first on a plateau of debt
                    cost = written + len(tokens)
                    rank = (cost + WEIGHT * matcher.closing_debt() if order == "debt"
                            else -cost if order == "depth" else cost)
                    heapq.heappush(frontier, (rank, cost, serial, child, (*ids, *tokens)))
                matcher.rollback(taken)
        finally:
            matcher.rollback(advanced)
    return None


def _spelled(matcher: Matcher, text: str, ids: tuple[int, ...]) -> list[int]:
    """The closing's text as the tokenizer spells it whole, where the grammar takes that
    spelling and it is shorter than the moves' tokens (`' ]}'` one token, not three); else
    the moves' tokens. The matcher is at the closing's start, and is left there."""
    whole = matcher.encode(text)
    if len(whole) >= len(ids):
        return list(ids)
    taken = 0
    for token in whole:
        if not matcher.accept_token(token):
            break
        taken += 1
    fits = taken == len(whole) and matcher.can_stop() and matcher.closing_valid()
    matcher.rollback(taken)
    return whole if fits else list(ids)
