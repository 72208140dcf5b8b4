"""Punctuation texts: the tokens without identifiers, whose SqlScope verdict a few facts of the state decide.

Most tokens a SQL grammar allows beyond words are runs of operators, brackets, quotes and
commas (`="`, `*(`, `),\\n`, `'/'+`). SqlScope (grammars.sql.scope) refuses such a text at
only a few characters; everywhere else it reads them without consulting the schema. This
module names those characters per text (`punctuation_kind`) and says, per state, which kinds
are all accepted and which all refused (`punctuation_verdicts`), so the mask layer
(grammars.sql.mask.matcher) decides every such token of the vocabulary with a few
whole-row operations instead of one reading per shape.

Contract:
- `punctuation_kind(text)` is -1 or `lead * FLAGS + flags` for a text SqlScope would read from
  outside a literal: -1 when the text is empty, whitespace only, holds an identifier
  character outside a '...' literal or a quoted name, a `;` other than alone (with
  whitespace), or a quoted name closed right before a `.` (a qualifier). `lead`: how the text
  starts (`LEAD_DOT0`: with `.`; `LEAD_DOT` / `LEAD_STAR`: whitespace then `.` / `*`;
  `LEAD_SEMI`: a lone `;`; else `LEAD_OTHER`); `flags`: the characters at which a reading
  from a state with no word, qualifier or quoted name pending can refuse: `COMMA` (a `,`
  not inside a bracket the text opened: in FROM it binds the item before it, which may be
  refused, and in a select list or FROM right after a keyword (FROM itself) it is refused
  (there COMMA kinds are not decided: the text before the `,` decides); the first such `,`
  decides, those after it cannot refuse), `RPAREN` (a `)`
  closing a bracket opened before the text: a subquery's ends its FROM), `CLOSER` (a
  quoted name closing: in FROM's name slots its text is read), `CHECKED` (a quoted name
  opening: where SqlScope.quoted_choices checks it, its text is read as it is typed: a
  `[` / `` ` `` one after FROM, a table name where a table holding a bare column already
  bound may not come, a qualified column `Q."col"` (that one after `Q.`, a state whose
  punctuation only `*` settles); a `,` or a `)` also ends a predicate (grammars.sql.repeats),
  which is refused where written MAX_REPEATS times: where a predicate was written
  MAX_REPEATS - 1 times those kinds are not decided; so is none where an operator
  character may continue such a predicate (`Predicates.may_cap`), nor in a FROM past
  MAX_FROM_ITEMS (SqlScope.past_from_cap).
- `punctuation_verdicts(scope)` is (kinds all accepted, kinds all refused) at `scope`: a
  token of an accepted kind is one `SqlScope.feed(text) and viable()` accepts, of a refused
  kind one it refuses; kinds in neither are not decided here (CHECKED ones where names are
  checked: `checked_kinds`). From a state whose word,
  qualifier or pending quoted name the first character settles, the state after that
  character (read once) stands for all. Nothing is decided inside a literal or after `;`.
- `checked_kinds(scope)` is (kinds, names per opener) where the settled state checks quoted
  names: a text of one of those kinds that ends inside its one `[` / `` ` `` name
  (`open_tail(text)`: the opener and the name's text) is accepted iff that text, lower-cased,
  is ASCII and one of `names[opener].prefixes`; other texts of those kinds are not decided.
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

from grammars.sql.scope import IDENT_CHARS, KEYWORDS, QuotedNames, SqlScope

COMMA, RPAREN, CLOSER, CHECKED = 1, 2, 4, 8  # flags: where a reading from a settled state can refuse
FLAGS = 16  # kind = lead * FLAGS + flags
LEAD_OTHER, LEAD_DOT0, LEAD_DOT, LEAD_STAR, LEAD_SEMI = range(5)
KINDS = 5 * FLAGS
_QUOTED = {'"': '"', "`": "`", "[": "]"}  # quoted-name openers -> closers
_FROM_NAME_SLOTS = frozenset(("table", "after_table", "after_as", "after_sub"))  # SqlScope._quoted_closed


def punctuation_kind(text: str) -> int:
    """`lead * FLAGS + flags` of a punctuation text, -1 for any other (see the module docstring)."""
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
        return LEAD_SEMI * FLAGS, []
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
            flags |= CHECKED
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
    return lead * FLAGS + flags, names


def open_tail(text: str) -> tuple[str, str] | None:
    """(opener, text so far) of the `[` / `` ` `` name a punctuation text ends inside, when
    it is the only such name the text opens; None otherwise."""
    kind, _ = punctuation(text)
    if kind < 0 or not kind & CHECKED:
        return None
    mode, opener, start, opened = "", "", 0, 0
    for index, ch in enumerate(text):
        if mode:
            mode = "" if ch == mode else mode
        elif ch == "'" or ch in _QUOTED:
            mode = _QUOTED.get(ch, "'")
            if ch in "[`":
                opener, start, opened = ch, index + 1, opened + 1
    if opened != 1 or mode != _QUOTED.get(opener):
        return None
    return opener, text[start:]


def _settled(scope: SqlScope) -> tuple[SqlScope | None, tuple[int, ...], set[int]]:
    """(the state standing for all texts after their first character, None where every text
    of the leads is refused; the leads it decides; kinds refused outright)."""
    refused: set[int] = set()
    if scope.word:  # the first character ends the word: as a qualifier when it is "."
        settled = scope.copy()
        leads = (LEAD_OTHER, LEAD_DOT, LEAD_STAR, LEAD_SEMI)
        if not settled.feed(" "):
            refused.update(lead * FLAGS + f for lead in leads for f in range(FLAGS))
            return None, leads, refused
        return settled, leads, refused
    if scope.qual is not None:  # after `Q.`: `*` or a quoted column (read: LEAD_OTHER)
        settled = scope.copy()
        refused.update(LEAD_SEMI * FLAGS + f for f in range(FLAGS))
        if not settled.feed("*"):
            refused.update(LEAD_STAR * FLAGS + f for f in range(FLAGS))
            return None, (LEAD_STAR,), refused
        return settled, (LEAD_STAR,), refused
    if scope.pending is not None:  # a quoted name closed: a qualifier when "." follows
        settled = scope.copy()
        settled.feed(" ")
        return settled, (LEAD_OTHER, LEAD_DOT, LEAD_STAR, LEAD_SEMI), refused
    return scope, (LEAD_OTHER, LEAD_DOT0, LEAD_DOT, LEAD_STAR, LEAD_SEMI), refused


def punctuation_verdicts(scope: SqlScope) -> tuple[frozenset[int], frozenset[int]]:
    """(kinds whose every text `scope` accepts, kinds whose every text it refuses)."""
    if scope.mode or scope.ended:
        return frozenset(), frozenset()
    settled, leads, refused = _settled(scope)
    if settled is None:
        return frozenset(), frozenset(refused)
    accepted: set[int] = set()
    flag_verdicts = _flag_verdicts(settled)
    for lead in leads:
        if lead == LEAD_SEMI:
            (accepted if settled.copy().feed(";") else refused).add(LEAD_SEMI * FLAGS)
            continue
        for flags, verdict in flag_verdicts.items():
            (accepted if verdict else refused).add(lead * FLAGS + flags)
    return frozenset(accepted), frozenset(refused)


def checked_kinds(scope: SqlScope) -> tuple[frozenset[int], dict[str, QuotedNames]]:
    """(CHECKED kinds whose texts ending inside their `[` / `` ` `` name are accepted iff
    that name's text is a prefix of one of the names; those names per opener): empty where
    the state does not check quoted names (see the module docstring)."""
    if scope.mode or scope.ended:
        return frozenset(), {}
    settled, leads, _ = _settled(scope)
    if settled is None:
        return frozenset(), {}
    names = {opener: settled.quoted_choices(opener) for opener in "[`"}
    if names["["] is None:
        return frozenset(), {}
    on = settled.scopes[-1].clause == "on"
    verdicts = _flag_verdicts(settled, checking=False)
    kinds = frozenset(lead * FLAGS + flags for lead in leads if lead != LEAD_SEMI for flags in range(FLAGS)
                      if flags & CHECKED and not flags & CLOSER and verdicts.get(flags & ~CHECKED)
                      and not (flags & COMMA and on))  # a `,` in ON goes back to FROM's names
    return kinds, {opener: choices for opener, choices in names.items() if choices is not None}


def _flag_verdicts(settled: SqlScope, *, checking: bool = True) -> dict[int, bool]:
    """flags -> the verdict on every text with those flags read from `settled` (no word,
    qualifier or quoted name pending, outside a literal); flags missing: undecided. Where
    `settled` checks quoted names (and `checking`), CHECKED flags are undecided."""
    inner = settled.scopes[-1] if settled.scopes else None
    in_from = inner is not None and inner.clause in ("from", "on")
    name_slot = in_from and inner is not None and inner.slot in _FROM_NAME_SLOTS
    subquery = True in settled.parens
    comma = settled.copy().feed(",")  # where FROM's `,` binds the item before it, it may refuse
    checks = checking and any(settled.quoted_choices(opener) is not None for opener in _QUOTED)
    repeated = bool(settled.predicates.near)  # a `,` or `)` may end a predicate written too often
    if settled.past_from_cap():
        return {}  # every quoted name is checked as typed there, and FROM's `,` may refuse: read
    if settled.predicates.may_cap():
        return {}  # an operator character may run a predicate written too often on (grammars.sql.repeats)
    # right after a keyword in a select list a `,` is refused (`a AND,`), after anything else not
    keyword_comma = inner is not None and inner.clause in ("select", "from") and settled.last in ("k", "n")
    verdicts = {}
    for flags in range(FLAGS):
        if flags & RPAREN and (subquery or (flags & COMMA and in_from)):
            continue  # a subquery's `)` ends its FROM; a `,` past a `)` meets FROM at another depth
        if flags & CLOSER and (name_slot or (flags & COMMA and in_from)):
            continue  # a quoted name in FROM is read (after FROM's `,` too: a table slot)
        if flags & COMMA and keyword_comma:
            continue  # refused only where the `,` comes first
        if flags & CHECKED and (checks or (flags & COMMA and in_from)):
            continue  # the name's text is read as it is typed (checked_kinds; after FROM's `,`, a table slot)
        if flags & (COMMA | RPAREN) and repeated:
            continue  # the text before it is the predicate's (grammars.sql.repeats)
        verdicts[flags] = comma if flags & COMMA else True
    return verdicts
