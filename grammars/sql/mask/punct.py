"""Punctuation texts: the tokens without identifiers, whose SqlScope verdict a few facts of the state decide.

Most tokens a SQL grammar allows beyond words are runs of operators, brackets, quotes and
commas (`="`, `*(`, `),\\n`, `'/'+`). SqlScope (grammars.sql.scope) refuses such a text at
only a few characters; everywhere else it reads them without consulting the schema. This
module names those characters per text (`punctuation_kind`) and says, per state, which kinds
are all accepted and which all refused (`punctuation_verdicts`), so the mask layer
(grammars.sql.mask.matcher) decides every such token of the vocabulary with a few
whole-row operations instead of one reading per shape.

Contract:
- `punctuation_kind(text)` is -1 or `lead * 8 + flags` for a text SqlScope would read from
  outside a literal: -1 when the text is empty, whitespace only, holds an identifier
  character outside a '...' literal or a quoted name, a `;` other than alone (with
  whitespace), or a quoted name closed right before a `.` (a qualifier). `lead`: how the text
  starts (`LEAD_DOT0`: with `.`; `LEAD_DOT` / `LEAD_STAR`: whitespace then `.` / `*`;
  `LEAD_SEMI`: a lone `;`; else `LEAD_OTHER`); `flags`: the characters at which a reading
  from a state with no word, qualifier or quoted name pending can refuse: `COMMA` (a `,`
  not inside a bracket the text opened: in FROM it binds the item before it, which may be
  refused; the first such `,` decides, those after it cannot refuse), `RPAREN` (a `)`
  closing a bracket opened before the text: a subquery's ends its FROM), `CLOSER` (a
  quoted name closing: in FROM's name slots its text is read).
- `punctuation_verdicts(scope)` is (kinds all accepted, kinds all refused) at `scope`: a
  token of an accepted kind is one `SqlScope.feed(text) and viable()` accepts, of a refused
  kind one it refuses; kinds in neither are not decided here. From a state whose word,
  qualifier or pending quoted name the first character settles, the state after that
  character (read once) stands for all. Nothing is decided inside a literal or after `;`.
- `punctuation(text)` is the kind with the quoted names the text closes; `known_names(scope)`
  the names SqlScope can tell apart there. Texts that close one name outside them (a fresh
  name) and are alike but for it read alike: the mask layer reads one of them for all.

Invariant: this mirrors SqlScope._char/_punct (which characters can fail, and when);
tests/grammars/test_sql_punct.py compares every kind's verdict with token-by-token
readings at every position of gold queries and of states built to hit each rule, and the
mask with fresh names against token-by-token readings in FROM's alias slots.
Knows nothing of token ids, masks or grammars.
"""

from __future__ import annotations

from grammars.sql.scope import IDENT_CHARS, KEYWORDS, SqlScope

COMMA, RPAREN, CLOSER = 1, 2, 4  # flags: where a reading from a settled state can refuse
LEAD_OTHER, LEAD_DOT0, LEAD_DOT, LEAD_STAR, LEAD_SEMI = range(5)
KINDS = 5 * 8
_QUOTED = {'"': '"', "`": "`", "[": "]"}  # quoted-name openers -> closers
_FROM_NAME_SLOTS = frozenset(("table", "after_table", "after_as", "after_sub"))  # SqlScope._quoted_closed


def punctuation_kind(text: str) -> int:
    """`lead * 8 + flags` of a punctuation text, -1 for any other (see the module docstring)."""
    return punctuation(text)[0]


def known_names(scope: SqlScope) -> set[str]:
    """The names SqlScope can tell apart at `scope`: keywords, the schema's tables, columns
    and functions, and every name the query has bound, required or aliased so far. A name
    outside them is *fresh*: a punctuation text closing one fresh quoted name reads as the
    same text closing any other (SqlScope compares names only against these)."""
    schema = scope.schema
    names = set(KEYWORDS) | schema.tables | schema.all_columns | schema.functions
    for inner in scope.scopes:
        names |= inner.bound.keys() | inner.refs.keys() | inner.aliases | inner.bare
        if inner.table is not None:
            names.add(inner.table)
    return names


def punctuation(text: str) -> tuple[int, list[str]]:
    """(`punctuation_kind(text)`, the quoted names the text closes, lower-cased; [] when the
    kind is -1)."""
    stripped = text.lstrip()
    if not stripped:
        return -1, []
    if stripped.rstrip() == ";":
        return LEAD_SEMI * 8, []
    flags = 0
    mode = ""  # "'" | a quoted name's closer | ""
    depth = 0  # brackets the text opened and has not closed
    closed = False  # a quoted name closed at the previous character
    names: list[str] = []
    name: list[str] = []
    for ch in text:
        if closed and ch == ".":
            return -1, []
        closed = False
        if mode == "'":
            mode = "" if ch == "'" else mode
            continue
        if mode:
            if ch == mode:
                mode, closed = "", True
                flags |= CLOSER
                names.append("".join(name).lower())
            else:
                name.append(ch)
            continue
        if ch in IDENT_CHARS or ch == ";":
            return -1, []
        if ch == "'":
            mode = "'"
        elif ch in _QUOTED:
            mode, name = _QUOTED[ch], []
        elif ch == "(":
            depth += 1
        elif ch == ")":
            if depth:
                depth -= 1
            else:
                flags |= RPAREN
        elif ch == "," and depth == 0:
            flags |= COMMA
    lead = (LEAD_DOT0 if text[0] == "." else LEAD_DOT if stripped[0] == "." else
            LEAD_STAR if stripped[0] == "*" else LEAD_OTHER)
    return lead * 8 + flags, names


def punctuation_verdicts(scope: SqlScope) -> tuple[frozenset[int], frozenset[int]]:
    """(kinds whose every text `scope` accepts, kinds whose every text it refuses)."""
    if scope.mode or scope.ended:
        return frozenset(), frozenset()
    accepted: set[int] = set()
    refused: set[int] = set()
    leads: tuple[int, ...]
    if scope.word:  # the first character ends the word: as a qualifier when it is "."
        settled = scope.copy()
        leads = (LEAD_OTHER, LEAD_DOT, LEAD_STAR, LEAD_SEMI)
        if not settled.feed(" "):
            return frozenset(), frozenset(lead * 8 + f for lead in leads for f in range(8))
    elif scope.qual is not None:  # after `Q.`: `*` or a quoted column (read: LEAD_OTHER)
        settled = scope.copy()
        leads = (LEAD_STAR,)
        refused.update(LEAD_SEMI * 8 + f for f in range(8))
        if not settled.feed("*"):
            return frozenset(), frozenset(refused | {LEAD_STAR * 8 + f for f in range(8)})
    elif scope.pending is not None:  # a quoted name closed: a qualifier when "." follows
        settled = scope.copy()
        settled.feed(" ")
        leads = (LEAD_OTHER, LEAD_DOT, LEAD_STAR, LEAD_SEMI)
    else:
        settled = scope
        leads = (LEAD_OTHER, LEAD_DOT0, LEAD_DOT, LEAD_STAR, LEAD_SEMI)
    flag_verdicts = _flag_verdicts(settled)
    for lead in leads:
        if lead == LEAD_SEMI:
            (accepted if settled.copy().feed(";") else refused).add(LEAD_SEMI * 8)
            continue
        for flags, verdict in flag_verdicts.items():
            (accepted if verdict else refused).add(lead * 8 + flags)
    return frozenset(accepted), frozenset(refused)


def _flag_verdicts(settled: SqlScope) -> dict[int, bool]:
    """flags -> the verdict on every text with those flags read from `settled` (no word,
    qualifier or quoted name pending, outside a literal); flags missing: undecided."""
    inner = settled.scopes[-1] if settled.scopes else None
    in_from = inner is not None and inner.clause in ("from", "on")
    name_slot = in_from and inner is not None and inner.slot in _FROM_NAME_SLOTS
    subquery = True in settled.parens
    comma = settled.copy().feed(",")  # where FROM's `,` binds the item before it, it may refuse
    verdicts = {}
    for flags in range(8):
        if flags & RPAREN and (subquery or (flags & COMMA and in_from)):
            continue  # a subquery's `)` ends its FROM; a `,` past a `)` meets FROM at another depth
        if flags & CLOSER and (name_slot or (flags & COMMA and in_from)):
            continue  # a quoted name in FROM is read (after FROM's `,` too: a table slot)
        verdicts[flags] = comma if flags & COMMA else True
    return verdicts
