"""Closing: a short way, in tokens, from a matcher's state to the end of its grammar.

`closing_tokens(matcher, budget=)` searches sequences of *moves* (short texts the matcher
proposes at each state, `Matcher.closing_moves()`: closers, fillers, the names that may
come there), each move encoded alone, for a token sequence after which the grammar may stop,
of at most `budget` tokens with the stop token that ends it; it returns that sequence (the
stop token last), or None where it found none within `max_states` states. The matcher's state
is unchanged afterwards.

The search is best first, on the tokens written plus `WEIGHT` times the matcher's estimate of
what is still owed (`Matcher.closing_debt()`: open brackets, clauses, names); where the matcher
makes no estimate, depth first with its moves in their order (closers first), then fewest
tokens first within one token less than what that found (a fifth of the states) (a shorter one where the states
allow: depth first may open a string to close an array); two paths writing the same text
are one state.
It is a bounded search over a small alphabet, not a proof: None does not mean no closing
exists, and the sequence found is short, not always the shortest.

Knows nothing of sampling, models or engines.
"""

from __future__ import annotations

import heapq

from grammars.matcher import Matcher

WEIGHT = 2  # tokens one unit of debt is worth in the search's order
MAX_STATES = 1500  # states expanded before the search gives up (~0.5 s on a SQL grammar)
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
    seen = {""}
    serial = 0
    for _ in range(max_states):
        if not frontier:
            return None
        _, written, _, text, ids = heapq.heappop(frontier)
        advanced = 0
        try:
            for token in ids:  # replay the path (every token was accepted on the way here)
                if not matcher.accept_token(token):
                    break
                advanced += 1
            if advanced < len(ids):
                continue
            if matcher.can_stop() and matcher.closing_valid():
                return [*ids, stop]
            for move in reversed(matcher.closing_moves()):  # the first pushed last: popped first
                tokens = encoded.get(move)
                if tokens is None:
                    tokens = encoded[move] = matcher.encode(move)
                child = text + move
                if not tokens or written + len(tokens) + 1 > budget or child in seen:
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
                    seen.add(child)
                    serial -= 1  # among equals, the newest first: depth first on a plateau of debt
                    cost = written + len(tokens)
                    rank = (cost + WEIGHT * matcher.closing_debt() if order == "debt"
                            else -cost if order == "depth" else cost)
                    heapq.heappush(frontier, (rank, cost, serial, child, (*ids, *tokens)))
                matcher.rollback(taken)
        finally:
            matcher.rollback(advanced)
    return None
