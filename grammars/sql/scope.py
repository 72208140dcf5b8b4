"""SqlScope: the identifier scopes of a sqlite SELECT, read left to right, one character at a time.

A left-to-right grammar cannot see that `T2.name` names a column of the table T2 is bound to
(the select list comes before FROM). `SqlScope` reads the text of a query as it is generated
and says, character by character, whether it is still on course to resolve in sqlite:

- one `_Scope` per SELECT core (subqueries nest: `(` + SELECT opens one, its `)` closes it;
  UNION / INTERSECT / EXCEPT start a fresh core at the same depth);
- in a select list, a word after a whole operand is an alias without AS (`COUNT(*) n`), and a
  keyword there only a keyword in a keyword's place (after an operand FROM, AS, an operator
  keyword, WHEN / THEN / ELSE / END inside a CASE at that depth (anywhere); after a binary NOT only IN /
  LIKE / GLOB / BETWEEN; never `,` or FROM right after a keyword, FROM's own included):
  the grammar also reads any keyword there as that alias (`a WHERE`, `a AND, b`), which
  sqlite refuses;
- before FROM, every `Q.col` adds col to the columns Q requires; `Q.col` is refused unless some
  table has all of Q's required columns and col (or Q is bound in an enclosing scope to a
  table that has col); a bare column is recorded;
- in FROM, a table may not be bound where a table bound before it in that FROM holds a bare
  column of the select list or of an ON that it holds too (ambiguous; not after a NATURAL
  join): refused as typed (`word_set`, quoted: `quoted_choices`); where every table would be
  and FROM may end, a join (but NATURAL) or `,` is refused (`_join_closed`);
- in FROM, an alias (`t AS a` / `t a`) is refused when its table lacks a column the alias is
  required to have, or when it is already bound, or when it runs on from such a qualifier
  or from a name of the query into a keyword, or starts (without AS) with such a keyword and
  goes on (`T1x`, `T1JOINsong`, `cards WHERElanguage`: the glued-alias rule of
  grammars.sql.glue, which says exactly what it refuses, and from which character); a plain
  table name binds itself; the FROM
  clause cannot end (WHERE / GROUP / ORDER / LIMIT / HAVING / set op / `)` / `;` / end of text)
  while a qualifier used before FROM is unbound or a bare column is in none of its tables;
- after FROM (ON, WHERE, GROUP BY, HAVING, ORDER BY), a qualifier must be bound (in this scope
  or an enclosing one), its column must belong to its table, and a bare column must resolve
  as in sqlite (`_bare_columns`): scope by scope outward, in exactly one table of the first
  scope holding it (two: ambiguous, unless a NATURAL join came), or be a select-list alias
  that is also a column of the schema (the grammar reads another bare word only as a
  qualifier, which an alias is not; an ambiguous one only in ORDER BY); a subquery in FROM
  is bound to its result's names where they are known (`_result_names`, a superset: the
  columns and aliases its select list or ON named, the columns its `*` / `Q.*` spans; a name
  bound to a result with no column of the schema never qualifies), and where they are not (a
  compound SELECT, a `*` over an unknown result, past MAX_FROM_ITEMS) lets any column not
  decided nearer resolve; GROUP BY and
  ORDER BY never reach an enclosing query (`_reach`: sqlite resolves them alone); an operand right
  after "(" may start with SELECT only where the bracket is not a call's, and with DISTINCT
  only in an aggregate's (count, sum, avg, total, group_concat), as in the grammar;
- a keyword is never an alias or a qualifier; a quoted identifier (`"x"`, `` `x` ``, `[x]`)
  is a name in FROM and before `.`, elsewhere an opaque literal (Spider writes strings in
  double quotes); `Q."col"` (or `` Q.`col` ``) is read as typed like `Q.col`
  (`_qualified_choices`: a prefix of a column Q may have, ASCII, closing on one; before
  FROM the column joins Q's required ones);
- after FROM (ON, WHERE, ...) a bracketed or backticked name outside `Q.` is read while it
  is typed (`quoted_choices`): the grammar reads `[x]` only as a qualifier and `` `x` `` as
  a qualifier or a column of the schema, so its text must stay a prefix of a name in scope
  (or, backticked, of a column), ASCII only (sqlite folds ASCII case only), and close on one;
  elsewhere the text could close on a name nothing lets qualify (a dead end).

`feed(text)` returns False at the first character that breaks a rule (state then undefined:
feed a `copy()`); it sets `touched` when it consults the text of a quoted name (a closed
name in FROM, or one before `.`; a checked name's, above, as it is typed): where it does not, the text is an opaque operand,
forgotten at the next character, so texts differing only there read alike. `viable()` says
whether the word being typed can still end well;
`can_end()` whether the text may stop here. `word_set()` is the finite set of words the word
now being typed must be a prefix of (None: any identifier may follow), for the mask layer;
where it is None, `word_block()` is the co-finite restriction (blocked prefixes, exceptions)
of grammars.sql.glue (None: none): a word with a blocked prefix must be a prefix of an
exception. While FROM may not end, the words after an operand of ON (and after a FROM item)
are a finite set without the FROM-ending keywords, chosen so that no beginning the grammar
allows is stranded (`ON a = b ORD` is refused at the `D`, not at the end of ORDER).
Never a dead end with the grammar: every word of a finite `word_set()` is one the grammar
accepts whole at that point, or one the reader lets qualify (a bound name), so the word
being typed can always end (tests/grammars/test_sql_dead_ends.py walks the two together).
A word not starting with a digit is at most `schema.max_word` characters (max(MAX_WORD, the
schema's longest name)): every word a finite `word_set()` holds fits, any other (an alias) may
end anywhere, so the cap strands nothing. A word starting with a digit (a number's digits,
with an unsigned exponent) is at most MAX_NUMBER characters: it may end anywhere but right
after its `e`, where a sign may always come (`1e+`, the exponent's digits then a word of
their own).
At most MAX_FROM_ITEMS FROM items per SELECT core while FROM may end (then the words after
an item's alias and after an ON operand are finite lists without the join words); past it an
item may start only while FROM may not end yet and must bind what FROM lacks (a missing
qualifier, or a table for a bare column no bound table has): `word_set()` and
`quoted_choices()` name the tables and aliases that can, `past_from_cap()` says the mask
layer is there. How often each predicate is written is followed by grammars.sql.repeats
(`predicates`; at most MAX_REPEATS writings, the words after a predicate that may not end
from `word_set()`).
`signature()` is a hashable summary: equal signatures behave equally on every text (each
scope's part is kept, with its hash, until the scope changes: most characters change none).

Assumes the text is grammar-valid SQL (grammars.sql.grammar): it does not check syntax, only names.
Knows nothing of tokens, masks or backends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grammars.sql import glue as sql_glue
from grammars.sql.repeats import Predicates

IDENT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$")
KEYWORDS = frozenset((
    "select distinct all from where group by having order asc desc limit offset union "
    "intersect except join inner left right full outer cross natural on as and or not in "
    "like glob between is null exists case when then else end cast").split())
_JOIN_WORDS = frozenset("natural inner cross left right full outer join".split())
_FROM_END = frozenset("where group having order limit union intersect except".split())
_SET_OPS = frozenset("union intersect except".split())
_OPERAND_WORDS = frozenset("not null case cast exists".split())
# after these keywords an operand (not an operator) comes next
_STRICT_AFTER = frozenset("where on by having and or when then else between is distinct like glob".split())
# the calls whose bracket may open with DISTINCT (grammars.sql.grammar's aggregates)
_DISTINCT_CALLS = frozenset("count sum avg total group_concat".split())
# `last` after "(": a call's bracket ("(f"; "(a": one that takes DISTINCT) or another ("(");
# the keywords an operand may start with there besides _OPERAND_WORDS
_PAREN_WORDS = {"(": frozenset(("select",)), "(a": frozenset(("distinct",)), "(f": frozenset()}
_QUOTES = {'"': '"', "`": "`", "[": "]"}
_ALIAS_SLOTS = frozenset(("after_table", "after_as", "after_sub"))
# after an operand of ON while FROM may not end yet: the words the grammar allows there after
# any operand, less those that end FROM (no two share a beginning the grammar cannot finish)
_ON_GOES_ON = frozenset("and or not is in like glob between natural inner cross left right full join".split())
# the same where FROM may end but no table may follow: no join word, FROM's end words
_ON_CLOSED = (_ON_GOES_ON - _JOIN_WORDS) | _FROM_END
_CLOSED_JOINS = _JOIN_WORDS - {"natural"}  # refused by `_join_closed` (NATURAL makes no ambiguity)
_ON_ENDS = _ON_CLOSED | {"natural"}  # after an ON operand where `_join_closed`
_OPERAND_ENDS = frozenset(("null", "end"))
# the keywords that may follow a complete operand in a select list (any other word there is
# an alias without AS, which the grammar also reads a keyword as: sqlite refuses it), and
# those after a binary NOT
_AFTER_OPERAND = frozenset("from as and or not in like glob between is when then else end".split())
_AFTER_NOT = frozenset("in like glob between".split())
_CASE_WORDS = frozenset("when then else end".split())  # only inside a CASE at its own depth
# the keywords that may follow a FROM item, per slot (none after AS: an alias comes)
_AFTER_ITEM = {slot: _JOIN_WORDS | _FROM_END | {"on"} | ({"as"} if slot != "after_alias" else set())
               for slot in ("after_table", "after_sub", "after_alias")} | {"after_as": frozenset()}
# FROM items per SELECT core (1 + JOINs + commas); gold Spider dev / BIRD mini-dev: 4. Past it
# an item may start only while FROM may not end yet, and must then bind what FROM lacks
MAX_FROM_ITEMS = 8
# after an operand of ON at the cap: no other item, not even a NATURAL join
_ON_AT_CAP = _ON_CLOSED
# calls (functions, CAST) open at once; gold Spider dev / BIRD mini-dev: 4, and a column spelled
# like a function (`Date`) counts as a call's start there (`CAST(SUM(IIF(SUBSTRING(Date`)
MAX_CALL_DEPTH = 5
# the longest identifier or keyword word (not a number): max(MAX_WORD, the schema's longest
# table / column / function name); gold Spider dev / BIRD mini-dev words: docs/sql.md
MAX_WORD = 64
# the longest word starting with a digit: a number's digits before its point, or after it,
# each with an exponent written without a sign (`1e5`), or a signed exponent's digits (`1e+5`);
# gold Spider dev / BIRD mini-dev: 6 (`201301`), 2 after a point, no exponent
MAX_NUMBER = 20
_BLOCKS = 4096  # SqlSchema.blocks / .operands entries; each cleared when it grows past this
# the first character of a `SqlSchema.derived` key (a subquery in FROM whose result is known);
# no table name holds it
DERIVED = "\x00"
_CHECKED = frozenset("`[")  # quoted-name openers whose text is checked after FROM (quoted_choices)
_LOCAL_TAILS = frozenset(("group", "order"))  # clauses whose names never reach an enclosing query
_TAILS = {"where": "", "group": "group", "having": "having", "order": "order"}  # keyword -> _Scope.tail


@dataclass(frozen=True)
class QuotedNames:
    """The names (lower case, ASCII) a checked quoted name may spell, and all their prefixes."""

    names: frozenset[str]
    prefixes: frozenset[str]


def _is_word(name: str) -> bool:
    """Whether a bare word can spell `name` (lower case): an identifier."""
    return bool(name) and name[0] not in "0123456789$" and all(ch in IDENT_CHARS for ch in name)


class Hashed:
    """A hashable value (nested tuples) with its hash computed once: a signature, or a
    scope's key inside one (CPython recomputes a tuple's hash, all the way down, each time)."""

    __slots__ = ("value", "_hash")

    def __init__(self, value: tuple[object, ...]) -> None:
        self.value = value
        self._hash = hash(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, Hashed) and self._hash == other._hash
                                 and self.value == other.value)


@dataclass
class _Scope:
    depth: int  # paren depth of this SELECT core
    clause: str = "select"  # select | from | on | after
    refs: dict[str, frozenset[str]] = field(default_factory=dict)  # qualifier -> required cols
    bare: set[str] = field(default_factory=set)  # bare columns used before FROM
    bound: dict[str, str | None] = field(default_factory=dict)  # name -> table, derived key (None: unknown)
    aliases: set[str] = field(default_factory=set)  # select-list aliases (`AS x`)
    slot: str = ""  # FROM slot: table | after_table | after_as | after_alias | after_sub | join_kw
    table: str | None = None  # table of the current FROM item
    joined: bool = False  # current FROM item came after JOIN (ON may follow)
    compound: bool = False  # a set operation came before: ORDER BY names result columns
    core_pending: bool = False  # after UNION/INTERSECT/EXCEPT, before its SELECT
    tail: str = ""  # after FROM: the clause being read ("group" / "having" / "order"; "": another)
    natural: bool = False  # a NATURAL join came: its shared columns are one (ambiguity not judged)
    items: int = 0  # FROM items named (a table or a subquery; up to MAX_FROM_ITEMS + 1: past it, all alike)
    stars: frozenset[str] = frozenset()  # the select list's `*` ("") and `Q.*` (Q): its result's names
    # key() once per state of the scope: SqlScope._mut (the only way to change a scope) drops it
    cached_key: Hashed | None = field(default=None, repr=False, compare=False)

    def copy(self) -> _Scope:
        return _Scope(self.depth, self.clause, dict(self.refs), set(self.bare), dict(self.bound),
                      set(self.aliases), self.slot, self.table, self.joined, self.compound,
                      self.core_pending, self.tail, self.natural, self.items, self.stars)

    def key(self) -> Hashed:
        key = self.cached_key
        if key is None:
            key = self.cached_key = Hashed((
                self.depth, self.clause, tuple(sorted(self.refs.items())), tuple(sorted(self.bare)),
                tuple(sorted(self.bound.items(), key=lambda kv: kv[0])), tuple(sorted(self.aliases)),
                self.slot, self.table, self.joined, self.compound, self.core_pending, self.tail,
                self.natural, self.items, self.stars))
        return key


class SqlSchema:
    """Lower-cased view of `{table: [columns]}` with the lookups SqlScope needs."""

    def __init__(self, tables: dict[str, list[str]], functions: frozenset[str]) -> None:
        self.columns = {t.lower(): frozenset(c.lower() for c in cols) for t, cols in tables.items()}
        self.tables = frozenset(self.columns)
        self.all_columns = frozenset(c for cols in self.columns.values() for c in cols)
        # the columns a bare word can spell (identifiers: the grammar quotes any other name),
        # per table and all: a word set holding `low grade` would let `low` be typed, then
        # strand it (the grammar goes on only with a space, the reader refuses the word `low`)
        self.words = {t: frozenset(filter(_is_word, cols)) for t, cols in self.columns.items()}
        self.all_words = frozenset(filter(_is_word, self.all_columns))
        # the tables a bare word can spell in a FROM table slot (the grammar's, less keywords:
        # the reader reads `FROM order` as ORDER, which sqlite refuses too; such a table is quoted)
        self.table_words = frozenset(filter(_is_word, self.tables)) - KEYWORDS
        self.functions = functions
        # SqlScope refuses a word (not a number) longer than this: no endless identifier
        self.max_word = max([MAX_WORD, *map(len, self.tables), *map(len, self.all_columns), *map(len, functions)])
        self._fits: dict[tuple[frozenset[str], bool], frozenset[str]] = {}
        self._derived: dict[str, frozenset[str]] = {}  # columns_of's, per `derived` key
        self.memo: dict[object, Any] = {}  # for the mask layer (its signature tables): shared by its matchers
        self.blocks: dict[tuple[object, ...], sql_glue.Block | None] = {}  # SqlScope.word_block's
        # SqlScope.word_set's at an operand: one frozenset per (bindings, aliases, after "(")
        self.operands: dict[tuple[object, ...], frozenset[str]] = {}
        self.quoted: dict[tuple[object, ...], QuotedNames] = {}  # SqlScope.quoted_choices's

    @staticmethod
    def derived(names: frozenset[str]) -> str:
        """The key a subquery in FROM is bound to where its result's names are known (its
        columns and aliases: `columns_of` reads them back)."""
        return DERIVED + DERIVED.join(sorted(names))

    def columns_of(self, table: str | None) -> frozenset[str]:
        """The columns of a table, or of a `derived` key; none for None or an unknown name."""
        if table is None:
            return frozenset()
        hit = self.columns.get(table)
        if hit is None:
            hit = self._derived.get(table)
            if hit is None:
                hit = frozenset(filter(None, table[1:].split(DERIVED))) if table.startswith(DERIVED) else frozenset()
                if len(self._derived) > _BLOCKS:
                    self._derived.clear()
                self._derived[table] = hit
        return hit

    def words_of(self, table: str | None) -> frozenset[str]:
        """`columns_of(table)` that a bare word can spell."""
        hit = self.words.get(table) if table is not None else frozenset()
        return hit if hit is not None else frozenset(filter(_is_word, self.columns_of(table)))

    def fitting_columns(self, required: frozenset[str], *, names: bool = False) -> frozenset[str]:
        """Columns col (identifiers; with `names`, any) such that some table has all of
        `required` and col."""
        key = (required, names)
        hit = self._fits.get(key)
        if hit is None:
            pick = self.columns if names else self.words
            hit = frozenset().union(*(pick[t] for t, cols in self.columns.items() if required <= cols))
            self._fits[key] = hit
        return hit


class SqlScope:
    """Name-resolution state of one query being generated (see the module docstring)."""

    __slots__ = ("schema", "scopes", "parens", "calls", "callee", "mode", "word", "word_set_at_start", "word_block_at_start",
                 "quoted", "checked", "pending", "cases", "qual", "operand", "last", "ended", "as_pending", "touched", "_owned",
                 "predicates")

    def __init__(self, schema: SqlSchema) -> None:
        self.schema = schema
        self.scopes: list[_Scope] = []
        self.parens: list[bool] = []  # one per open "(": True when it holds a subquery
        self.calls: list[str] = []  # one per open "(": the function it calls ("": none)
        self.callee = ""  # the function name read last (its call's "(" may come next)
        self.mode = ""  # "" | "'" | '"' | "`" | "[" (inside a literal / quoted name)
        self.word = ""  # the identifier or number being typed (original case)
        self.word_set_at_start: frozenset[str] | None = None
        self.word_block_at_start: sql_glue.Block | None = None
        self.quoted = ""  # content of the quoted name being typed
        self.checked: QuotedNames | None = None  # what that name may spell (None: not checked)
        self.cases: tuple[int, ...] = ()  # the bracket depth of each open CASE (END closes one there)
        self.pending: str | None = None  # a closed quoted name waiting for its next character
        self.qual: str | None = None  # after `Q.`: the qualifier whose column comes next
        self.operand = True  # an operand (not an operator) is expected next
        # last non-space character outside words; "w" / "k" after a name / keyword, "a" / "f"
        # after a function name (an aggregate taking DISTINCT / another), "(a" / "(f" after
        # such a call's "("
        self.last = ""
        self.ended = False  # `;` seen
        self.as_pending = False  # `AS` seen outside FROM: the next word is an alias or a type
        self.touched = False  # a closed quoted name's text was consulted (see `feed`)
        self._owned = True  # scopes[-1] is this reader's own (copies share it until one mutates it)
        self.predicates = Predicates()  # how often each predicate was written (grammars.sql.repeats)

    def copy(self) -> SqlScope:
        """An independent reader in the same state: both share the scopes until one of them
        changes the innermost (copy on write, `_mut`); feeding one never changes the other."""
        new = SqlScope.__new__(SqlScope)
        new.schema = self.schema
        new.scopes = list(self.scopes)  # shared: the top is copied on its first mutation (_mut)
        new._owned = self._owned = False
        new.parens = list(self.parens)
        new.calls, new.callee = list(self.calls), self.callee
        new.mode, new.word, new.word_set_at_start = self.mode, self.word, self.word_set_at_start
        new.word_block_at_start = self.word_block_at_start
        new.quoted, new.checked, new.pending, new.qual = self.quoted, self.checked, self.pending, self.qual
        new.cases = self.cases
        new.operand, new.last, new.ended = self.operand, self.last, self.ended
        new.as_pending, new.touched = self.as_pending, self.touched
        new.predicates = self.predicates.copy()
        return new

    def signature(self) -> tuple[object, ...]:
        return (tuple(s.key() for s in self.scopes), tuple(self.parens), tuple(self.calls), self.callee,
                self.mode, self.word.lower(),
                self.quoted.lower(), self.pending, self.qual, self.operand, self.last, self.ended, self.as_pending,
                self.cases, self.predicates.signature())

    # -- text ---------------------------------------------------------------------------
    def feed(self, text: str) -> bool:
        for ch in text:
            if not self._char(ch):
                return False
        return True

    def viable(self) -> bool:
        """Whether the word being typed is a prefix of a word that may come here."""
        if not self.word or self.word[0].isdigit():
            return True
        words = self.word_set_at_start
        if words is None:
            block = self.word_block_at_start
            return block is None or sql_glue.viable(self.word.lower(), block)
        low = self.word.lower()
        return any(w.startswith(low) for w in words)

    def can_end(self) -> bool:
        """Whether the text may end here (as far as names go; the grammar decides syntax)."""
        probe = self.copy()
        return probe._char(" ") and probe._end_from() and not probe.parens and probe.predicates.end()

    # -- the word that may start here ---------------------------------------------------
    def quoted_choices(self, opener: str) -> QuotedNames | None:
        """What a quoted name opened here with `opener` may spell, None where it is not
        checked: outside FROM's name slots, after FROM, a `[x]` (only a qualifier to the
        grammar) must name a table or alias in scope, a `` `x` `` also a column of the schema
        (the grammar's); `"x"` is never checked there (it also spells a string). In a FROM
        table slot where a table holding a bare column already bound may not come
        (`_taken`), a `"x"` or `` `x` `` must spell one of the other tables (`_table_choices`).
        After `Q.` see `_qualified_choices`. In a FROM item past MAX_FROM_ITEMS every quoted
        name is checked (`_capped_item_quoted`)."""
        capped = self._capped_item_quoted(opener)
        if capped is not None:
            return capped
        scope = self.scopes[-1] if self.scopes else None
        if (scope is not None and scope.clause == "from" and scope.slot == "table" and opener in '"`'
                and len(self.parens) == scope.depth):
            return self._table_choices(scope, opener)
        if opener not in _CHECKED or scope is None or scope.clause not in ("on", "after"):
            return None
        visible = tuple(sorted(name for name, table in self._visible().items()
                               if not name.startswith("(") and self._qualifiable(table)))
        names = set(visible) | (self.schema.all_columns if opener == "`" else set())
        return self._quoted_names((opener, visible), opener, names)

    def _quoted_names(self, key: tuple[object, ...], opener: str, names: Any) -> QuotedNames:
        """`names` a quoted name opened with `opener` can spell (ASCII, without its closer or
        a newline), with their prefixes; kept per `key`."""
        hit = self.schema.quoted.get(key)
        if hit is None:
            closer = _QUOTES[opener]
            kept = frozenset(name for name in names
                             if name and name.isascii() and closer not in name and "\n" not in name)
            hit = QuotedNames(kept, frozenset(name[:end] for name in kept for end in range(len(name) + 1)))
            if len(self.schema.quoted) > _BLOCKS:
                self.schema.quoted.clear()
            self.schema.quoted[key] = hit
        return hit

    def _table_choices(self, scope: _Scope, opener: str) -> QuotedNames | None:
        """The tables a quoted name may spell in `scope`'s FROM table slot: None (any: the
        grammar's) unless a bare column is taken (`_taken`), then those not holding one."""
        taken = self._taken(scope)
        if not taken:
            return None
        tables = frozenset(t for t, cols in self.schema.columns.items() if not taken & cols)
        return self._quoted_names(("table", opener, tables), opener, tables)

    def _qualified_choices(self, qual: str, opener: str) -> QuotedNames | None:
        """The columns a quoted column after `qual.` may spell (`Q."col"`, `` Q.`col` ``), as
        for a bare one (`_column_choices`) but any name of them; None: not checked (`qual` is
        bound to a subquery whose result is unknown)."""
        columns = self._column_choices(qual, names=True)
        if columns is None:
            return None
        return self._quoted_names(("column", opener, columns), opener, columns)

    def word_set(self) -> frozenset[str] | None:
        """Words (lower case) a word starting at this point must be a prefix of; None: any."""
        if self.mode or self.pending is not None or self.as_pending:
            return None
        if self.qual is not None:
            return self._column_choices(self.qual)
        repeated = self.predicates.capped(depth=len(self.parens))
        if repeated is not None:
            return repeated  # the predicate open here may not end (grammars.sql.repeats)
        scope = self.scopes[-1] if self.scopes else None
        if scope is None or scope.core_pending:
            return None
        if self.last == "n" and scope.clause == "select" and len(self.parens) == scope.depth:
            return _AFTER_NOT  # `x NOT FROM`: the grammar's alias NOT; the reader takes NOT as binary
        if scope.clause == "on" and not self.operand and self.last != "k" and len(self.parens) == scope.depth:
            if not self._resolved(scope):
                return _ON_GOES_ON  # `... ON a = b ORDER` would be a dead end: ORDER is refused once typed
            if scope.items >= MAX_FROM_ITEMS:
                return _ON_AT_CAP  # no other item: `ON a = b JOIN` would be refused once typed
            if self._join_closed():
                return _ON_ENDS  # `... ON a = b JOIN` would be: no table may follow
        capped = self._capped_item_words(scope)
        if capped is not None:
            return capped
        if scope.clause == "from" and scope.slot == "table" and len(self.parens) == scope.depth:
            taken = self._taken(scope)
            return self.schema.table_words if not taken else frozenset(
                table for table in self.schema.table_words if not taken & self.schema.columns[table])
        if scope.clause == "from" and scope.slot == "after_alias":
            on = {"on"} if scope.joined else set()
            if not self._resolved(scope):
                return frozenset((_JOIN_WORDS - {"outer"}) | on)  # OUTER: after LEFT
            if scope.items >= MAX_FROM_ITEMS:
                return frozenset(_FROM_END | on)  # FROM may end, not go on (MAX_FROM_ITEMS)
            if self._join_closed():
                return frozenset(_FROM_END | {"natural"} | on)
            return None
        if scope.clause in ("on", "after") and self.operand and not scope.compound:
            reach = self._reach()
            key = (tuple((tuple(s.bound.items()), s.natural) for s in reach),
                   frozenset(scope.aliases) if scope.aliases else None, scope.tail == "order",
                   self.last if self.last in _PAREN_WORDS else "", sum(1 for call in self.calls if call),
                   self.calls[-1] if self.calls and self.last in ("(a", "(f") else "")
            memo = self.schema.operands
            hit = memo.get(key)
            if hit is not None:
                return hit
            if len(memo) > _BLOCKS:
                memo.clear()
            memo[key] = words = self._operand_words(scope, reach)
            return words
        return None

    # -- FROM items past the cap (MAX_FROM_ITEMS) ------------------------------------------
    def _missing(self, scope: _Scope) -> set[str]:
        """The qualifiers used before FROM that no table of this FROM (or an enclosing scope
        with their columns) binds yet."""
        missing = set()
        for qual, cols in scope.refs.items():
            if qual not in scope.bound:
                outer, table = self._outer_binding(qual)
                if not outer or (table is not None and not cols <= self.schema.columns_of(table)):
                    missing.add(qual)
        return missing

    def _uncovered(self, scope: _Scope) -> frozenset[str]:
        """The bare columns of the select list in none of the tables bound so far (as in
        `_resolved`: none where a subquery is in scope)."""
        if not scope.bare:
            return frozenset()
        tables = list(scope.bound.values())
        for outer in self.scopes[:-1]:
            if outer.clause != "select":
                tables.extend(outer.bound.values())
        if None in tables:
            return frozenset()
        have = frozenset().union(*(self.schema.columns_of(t) for t in tables))
        return frozenset(scope.bare - have)

    def _fits(self, scope: _Scope, name: str, table: str | None) -> bool:
        return table is None or scope.refs.get(name, frozenset()) <= self.schema.columns_of(table)

    def _useful(self, scope: _Scope, name: str, table: str | None) -> bool:
        """Whether binding `name` to `table` (None: a subquery) binds what FROM lacks: a
        missing qualifier, or a table holding a bare column no bound table has."""
        if name in self._missing(scope) and self._fits(scope, name, table):
            return True
        uncovered = self._uncovered(scope)
        return bool(uncovered) and (table is None or bool(uncovered & self.schema.columns_of(table)))

    def _useful_table(self, scope: _Scope, table: str) -> bool:
        """Whether an item of `table` can bind what FROM lacks (itself, or under an alias)
        without making a bare column ambiguous (`_taken`)."""
        if self._taken(scope) & self.schema.columns_of(table):
            return False
        return self._useful(scope, table, table) or any(
            self._fits(scope, name, table) and name not in KEYWORDS for name in self._missing(scope))

    def _capped_item_words(self, scope: _Scope) -> frozenset[str] | None:
        """word_set in a FROM item past MAX_FROM_ITEMS, which must bind what FROM lacks: in
        its table slot the tables that can; in its alias slots (unless its table holds a bare
        column no bound table has: then any alias does) AS and the missing qualifiers it fits,
        after a table that is one of them also the keywords that may follow it bound plain;
        None elsewhere."""
        if scope.clause != "from" or not self._past_cap(scope) or len(self.parens) != scope.depth:
            return None
        slot = scope.slot
        if slot == "table":
            return frozenset(t for t in self.schema.table_words if self._useful_table(scope, t))
        if slot not in _ALIAS_SLOTS:
            return None
        table = scope.table
        if slot != "after_sub" and table is None:
            return None
        uncovered = self._uncovered(scope)
        if uncovered and (table is None or uncovered & self.schema.columns_of(table)):
            return None  # any alias binds a table holding a bare column none has
        words = {name for name in self._missing(scope)
                 if _is_word(name) and name not in KEYWORDS and self._fits(scope, name, table)}
        if slot == "after_as":
            return frozenset(words)
        words.add("as")
        if table is not None and self._useful(scope, table, table):  # the table may bind itself
            probe = self.copy()
            probe._bind_plain_table()
            resolved = probe._resolved(probe.scopes[-1])
            words |= (_FROM_END if resolved else _JOIN_WORDS - {"outer"}) | ({"on"} if scope.joined else set())
        return frozenset(words)

    def _capped_item_quoted(self, opener: str) -> QuotedNames | None:
        """quoted_choices in a FROM item past MAX_FROM_ITEMS: the names `_capped_item_words`
        allows, quoted (any text: a table's own name, or an alias; ASCII, without the
        closer); None where any name may come."""
        scope = self.scopes[-1] if self.scopes else None
        if (scope is None or scope.clause != "from" or not self._past_cap(scope)
                or len(self.parens) != scope.depth):
            return None
        if scope.slot == "table":
            names = {t for t in self.schema.tables if self._useful_table(scope, t)}
        elif scope.slot in _ALIAS_SLOTS and self._capped_item_words(scope) is not None:
            table = scope.table
            names = {n for n in self._missing(scope) if n not in KEYWORDS and self._fits(scope, n, table)}
        else:
            return None
        closer = _QUOTES[opener]
        kept = frozenset(n for n in names if n and n.isascii() and closer not in n and "\n" not in n)
        return QuotedNames(kept, frozenset(n[:end] for n in kept for end in range(len(n) + 1)))

    def past_from_cap(self) -> bool:
        """Whether the innermost FROM is past MAX_FROM_ITEMS (an item there must bind what
        FROM lacks; the mask layer then reads tokens one by one)."""
        scope = self.scopes[-1] if self.scopes else None
        return scope is not None and scope.clause in ("from", "on") and self._past_cap(scope)

    @staticmethod
    def _past_cap(scope: _Scope) -> bool:
        """The current FROM item is past MAX_FROM_ITEMS (in its table slot: it will be)."""
        return scope.items > MAX_FROM_ITEMS or (scope.slot == "table" and scope.items >= MAX_FROM_ITEMS)

    def _may_start_item(self, scope: _Scope) -> bool:
        """Whether another FROM item may start (the one before it bound): below the cap, or
        while FROM may not end yet (the next one must then bind what it lacks)."""
        return scope.items < MAX_FROM_ITEMS or not self._resolved(scope)

    def _operand_words(self, scope: _Scope, reach: list[_Scope]) -> frozenset[str]:
        """word_set at an operand after FROM: the names in scope, the bare columns that
        resolve (`_bare_columns`), functions, the words that start an operand, and SELECT
        after a bracket that is not a call's, DISTINCT after an aggregate's. Only words the
        grammar accepts here whole: a word it reads only as a qualifier (`cnt.x`) that the
        reader refuses to qualify (`cnt` not bound) would be a dead end."""
        visible: dict[str, str | None] = {}
        for inner in reversed(reach):
            visible.update(inner.bound)
        # a quoted table's own name may hold a space; a subquery's result may name no column
        names = {name for name, table in visible.items() if _is_word(name) and self._qualifiable(table)}
        names |= self._bare_columns(scope, reach) | (_OPERAND_WORDS - {"cast"})
        names |= {f for f in self.schema.functions | {"cast"} if self._may_call(f, self.last)}
        names |= _PAREN_WORDS.get(self.last, frozenset())
        return frozenset(names)

    def _bare_columns(self, scope: _Scope, reach: list[_Scope]) -> set[str]:
        """The bare columns (identifiers) that resolve at an operand of `scope` after FROM,
        as sqlite resolves them: scope by scope outward (`reach`), a column held by exactly
        one table bound in the first scope that holds it (two: ambiguous, unless a NATURAL
        join came there), or a select-list alias that is a column of the schema (in ORDER
        BY even where the column is ambiguous); every column not decided nearer where a
        subquery whose result is unknown is bound."""
        allowed: set[str] = set()
        decided: set[str] = set()
        for inner in reach:
            tables = list(inner.bound.values())
            counts: dict[str, int] = {}
            for table in tables:
                for column in self.schema.words_of(table):
                    counts[column] = counts.get(column, 0) + 1
            ambiguous = set() if inner.natural else {c for c, n in counts.items() if n > 1}
            if inner is scope:
                aliases = scope.aliases & self.schema.all_words
                allowed |= aliases if scope.tail == "order" else aliases - ambiguous
                decided |= aliases
            if None in tables:  # a subquery's unknown result: any column not decided may resolve here
                allowed |= self.schema.all_words - decided - ambiguous
                break
            allowed |= counts.keys() - decided - ambiguous
            decided |= counts.keys()
        return allowed

    def _join_closed(self) -> bool:
        """Whether the innermost FROM may end here but no table may follow its current item
        (every table holds a bare column that a table bound there holds: `_taken`): then a
        join (but NATURAL) or `,` is refused, where it would lead only to a subquery."""
        scope = self.scopes[-1] if self.scopes else None
        if scope is None or not scope.bare or scope.natural or scope.clause not in ("from", "on"):
            return False
        return self._item_end()[2]

    def _item_end(self) -> tuple[bool, bool, bool]:
        """(whether the current item of the innermost FROM may end here, whether FROM may end
        after it, `_join_closed`)."""
        probe = self.copy()
        if not probe._bind_plain_table():
            return False, False, False
        inner = probe.scopes[-1]
        if not probe._resolved(inner):
            return True, False, False
        taken = probe._taken(inner)
        return True, True, bool(taken) and all(taken & cols for cols in self.schema.columns.values())

    def _taken(self, scope: _Scope) -> frozenset[str]:
        """The bare columns of `scope` (select list, ON) that a table bound in it already
        holds: a table holding one of them may not be bound too (ambiguous), unless a
        NATURAL join came."""
        if not scope.bare or scope.natural:
            return frozenset()
        held = [self.schema.columns_of(table) for table in scope.bound.values() if table is not None]
        return frozenset(column for column in scope.bare if any(column in cols for cols in held))

    def word_block(self) -> sql_glue.Block | None:
        """(blocked prefixes, exceptions) for a word starting here in a FROM alias slot (see
        grammars.sql.glue); None where the rule does not apply or no name can be blocked."""
        if self.mode or self.pending is not None or self.as_pending or self.qual is not None:
            return None
        scope = self.scopes[-1] if self.scopes else None
        if scope is None or scope.clause != "from" or scope.slot not in _ALIAS_SLOTS:
            return None
        ends = self._item_end() if scope.slot != "after_as" else (True, True, False)
        key = (scope.slot, scope.table, tuple(scope.refs.items()), tuple(scope.bound), ends)
        memo = self.schema.blocks
        try:
            return memo[key]
        except KeyError:
            pass
        if len(memo) > _BLOCKS:
            memo.clear()
        block: sql_glue.Block | None = None
        used = [*scope.refs, *scope.bound]
        misfits = {q for q in scope.refs if q not in scope.bound and not self._alias_fits(scope, q)}
        prefixes = sql_glue.glue_prefixes(used) | misfits
        if scope.slot != "after_as":  # `cards WHERElanguage`: a keyword run on into a name
            prefixes |= sql_glue.KEYWORD_PREFIXES
        if prefixes:
            names = (scope.refs.keys() | self.schema.tables) - KEYWORDS
            exceptions = {n for n in names if (sql_glue.near(n, used) or sql_glue.glued(n, prefixes))
                          and self._alias_fits(scope, n)}
            exceptions |= {k for k in KEYWORDS if sql_glue.glued(k, prefixes)}
            # a keyword refused here (`_keyword`) is no exception: refused as typed, never stranded
            binds, may_end, closed = ends
            if not binds:  # the item cannot end here (its table is bound already): an alias comes
                exceptions -= sql_glue.GLUE_KEYWORDS
            elif not may_end:  # FROM may not end after this item
                exceptions -= _FROM_END
            if closed:  # no table may follow (`_join_closed`)
                exceptions -= _CLOSED_JOINS
            block = prefixes, frozenset(exceptions)
        memo[key] = block
        return block

    # -- internals ----------------------------------------------------------------------
    def _mut(self) -> _Scope:
        """The innermost scope, made this reader's own first (copy on write): the only way
        to a scope that is then changed. Scopes below it are never changed."""
        if not self._owned:
            self.scopes[-1] = self.scopes[-1].copy()
            self._owned = True
        scope = self.scopes[-1]
        scope.cached_key = None  # about to change
        return scope

    def _alias_fits(self, scope: _Scope, low: str) -> bool:
        """`low` (not a keyword) may be the alias of the current FROM item, glue aside."""
        if low in scope.bound:
            return False
        table = scope.table
        return table is None or scope.refs.get(low, frozenset()) <= self.schema.columns_of(table)

    def _reach(self) -> list[_Scope]:
        """The scopes a name read now may resolve in, innermost first: those past their
        SELECT list, up to and including the first one reading its GROUP BY or ORDER BY
        (sqlite resolves those clauses without the enclosing queries)."""
        out = []
        for scope in reversed(self.scopes):
            if scope.clause != "select":
                out.append(scope)
            if scope.tail in _LOCAL_TAILS:
                break
        return out

    def _visible(self) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for scope in reversed(self._reach()):
            out.update(scope.bound)
        return out

    def _outer_binding(self, name: str) -> tuple[bool, str | None]:
        inner = self.scopes[-1] if self.scopes else None
        for scope in self._reach():
            if scope is not inner and name in scope.bound:
                return True, scope.bound[name]
        return False, None

    def _column_choices(self, qual: str, *, names: bool = False) -> frozenset[str] | None:
        """The columns `qual.col` may name here (those a bare word can spell; with `names`,
        every name, for a quoted column); None: any (a subquery's unknown result)."""
        scope = self.scopes[-1] if self.scopes else None
        if scope is None:
            return None
        words = self.schema.columns_of if names else self.schema.words_of
        if scope.clause != "select" and qual in scope.bound:
            table = scope.bound[qual]
            return None if table is None else words(table)
        outer, table = self._outer_binding(qual)
        if scope.clause != "select":  # after FROM: the qualifier is bound in an outer scope
            if not outer or table is None:
                return None
            return words(table)
        choices = self.schema.fitting_columns(scope.refs.get(qual, frozenset()), names=names)
        if outer:
            if table is None:
                return None
            if scope.refs.get(qual, frozenset()) <= self.schema.columns_of(table):
                choices = choices | words(table)
        return choices

    def _resolved(self, scope: _Scope) -> bool:
        """Every qualifier and bare column used before FROM resolves in the tables bound so far."""
        for qual, cols in scope.refs.items():
            if qual in scope.bound:
                continue  # its columns were checked when it was bound
            outer, table = self._outer_binding(qual)
            if not outer or (table is not None and not cols <= self.schema.columns_of(table)):
                return False
        if scope.bare:
            tables = list(scope.bound.values())
            for s in self._reach():
                if s is not scope:
                    tables.extend(s.bound.values())
            if None in tables:
                return True
            have = frozenset().union(*(self.schema.columns_of(t) for t in tables))
            if not scope.bare <= have:
                return False
        return True

    def _bind_plain_table(self) -> bool:
        """The innermost FROM item's table was not aliased: it binds its own name."""
        scope = self.scopes[-1]
        if scope.slot == "after_table" and scope.table is not None:
            table = scope.table
            if table in scope.bound:
                return False
            if not scope.refs.get(table, frozenset()) <= self.schema.columns_of(table):
                return False
            if scope.items > MAX_FROM_ITEMS and not self._useful(scope, table, table):
                return False  # past the cap, an item binds what FROM lacks
            scope = self._mut()
            scope.bound[table] = table
            scope.slot = "after_alias"
        return True

    def _end_from(self) -> bool:
        """The FROM clause of the innermost scope ends here (if it is open)."""
        if not self.scopes:
            return True
        if self.scopes[-1].clause in ("from", "on"):
            if not self._bind_plain_table() or not self._resolved(self.scopes[-1]):
                return False
            self._mut().clause = "after"
        return True

    def _char(self, ch: str) -> bool:
        if not self.predicates.char(ch, word=self.word, mode=self.mode, depth=len(self.parens)):
            return False
        if self.ended:
            return ch.isspace()
        mode = self.mode
        if mode == "'":
            if ch == "'":
                self.mode = ""
                self.operand = False
            return True
        if mode:
            if self.last == "q":  # a qualified column, quoted
                return self._qualified_char(ch)
            checked = self.checked
            if ch == _QUOTES[mode]:
                self.mode = ""
                if checked is not None:
                    self.checked, self.touched = None, True
                    if self.quoted.lower() not in checked.names:
                        return False
                return self._quoted_closed(self.quoted)
            self.quoted += ch
            if checked is not None:
                self.touched = True
                return ch.isascii() and self.quoted.lower() in checked.prefixes
            return True
        if self.pending is not None:
            name, self.pending = self.pending, None
            if ch == ".":
                self.touched = True
                return self._qualifier(name)
            self.operand = False  # an opaque literal / quoted name was an operand
        if ch in IDENT_CHARS:
            if not self.word:
                self.word_set_at_start = words = self.word_set()
                self.word_block_at_start = self.word_block() if words is None else None
            self.word += ch
            return len(self.word) <= (MAX_NUMBER if self.word[0].isdigit() else self.schema.max_word)
        if self.word:
            word, self.word = self.word, ""
            if not self._word(word, ch):
                return False
        if ch.isspace():
            return True
        return self._punct(ch)

    def _punct(self, ch: str) -> bool:
        scope = self.scopes[-1] if self.scopes else None
        if ch == ".":
            return True  # a qualifier's dot (the qualifier was read) or a decimal point
        last, self.last = self.last, ch
        if self.qual is not None:
            qual, self.qual = self.qual, None
            if ch != "*" and ch not in _QUOTES:
                return False  # garbage after `Q.`
            if scope is not None and scope.clause == "select":
                scope = self._mut()
                scope.refs[qual] = scope.refs.get(qual, frozenset())
                if ch == "*":
                    scope.stars |= {qual}
            if ch in _QUOTES:  # `Q."col"`: read as typed, a column Q may have (as `Q.col`)
                self.mode, self.quoted, self.last = ch, "", "q"
                self.qual = qual  # until the name closes
                self.checked = checked = self._qualified_choices(qual, ch)
                if checked is not None:
                    self.touched = True
                    return bool(checked.names)
                return True
            self.operand = False
            return True
        if ch in _QUOTES:
            self.mode, self.quoted = ch, ""
            self.checked = checked = self.quoted_choices(ch)
            if checked is not None:
                self.touched = True
                return bool(checked.names)
            return True
        if ch == "'":
            self.mode = "'"
            return True
        if ch == "(":
            self.last = {"a": "(a", "f": "(f"}.get(last, "(")
            self.parens.append(False)
            self.calls.append(self.callee if self.last != "(" else "")
            self.operand = True
            if scope is not None and scope.clause == "from" and scope.slot == "table":
                scope = self._mut()
                scope.slot, scope.items = "sub_open", min(scope.items + 1, MAX_FROM_ITEMS + 1)
            return True
        if ch == ")":
            if not self.parens:
                return True
            self.calls.pop()
            if self.parens.pop():
                if not self._end_from():
                    return False
                names = self._result_names(self.scopes.pop())
                self._owned = False  # the new innermost scope may be shared
                outer = self.scopes[-1] if self.scopes else None
                if outer is not None and outer.clause == "from" and outer.slot == "sub_open":
                    outer = self._mut()
                    # past MAX_FROM_ITEMS its columns are left unknown: it binds what FROM lacks
                    derived = (self.schema.derived(names) if names is not None and outer.items <= MAX_FROM_ITEMS
                               else None)
                    outer.slot, outer.table = "after_sub", derived
                    outer.bound[f"({len(outer.bound)})"] = derived  # until an alias names it
            self.operand = False
            return True
        if ch == ";":
            if not self._end_from() or self.parens:
                return False
            self.ended = True
            return True
        if ch == ",":
            if (scope is not None and len(self.parens) == scope.depth and scope.clause == "select"
                    and last in ("k", "n")):
                return False  # `a AND,`: the grammar's alias `AND`, which sqlite refuses
            if (scope is not None and len(self.parens) == scope.depth and scope.clause == "from"
                    and scope.slot == "table" and last == "k"):
                return False  # `a FROM ,`: the grammar's alias `FROM`; no FROM item yet
            self.operand = True
            if scope is not None and len(self.parens) == scope.depth and scope.clause in ("from", "on"):
                if scope.clause == "from" and not self._bind_plain_table():
                    return False
                if self._join_closed():
                    return False  # no table may follow
                if not self._may_start_item(self.scopes[-1]):
                    return False
                scope = self._mut()
                scope.clause, scope.slot, scope.joined = "from", "table", False
            return True
        if ch == "*":
            if (self.operand and scope is not None and scope.clause == "select"
                    and len(self.parens) == scope.depth):
                self._mut().stars |= {""}  # `SELECT *`
            self.operand = not self.operand  # `count(*)` / `SELECT *`, else a product
            return True
        self.operand = True  # operator
        return True

    def _qualified_char(self, ch: str) -> bool:
        """One character of a quoted column after `Q.`: its text stays a prefix of a column Q
        may have and closes on one (where Q's columns are known), which Q then requires
        before FROM, as `Q.col` does."""
        checked = self.checked
        if ch != _QUOTES[self.mode]:
            self.quoted += ch
            if checked is None:
                return True
            self.touched = True
            return ch.isascii() and self.quoted.lower() in checked.prefixes
        qual, low = self.qual, self.quoted.lower()
        self.mode, self.last, self.operand, self.qual, self.checked = "", "w", False, None, None
        if checked is None:
            return True
        self.touched = True
        if low not in checked.names:
            return False
        scope = self.scopes[-1] if self.scopes else None
        if scope is not None and qual is not None and scope.clause == "select" and qual not in scope.bound:
            scope = self._mut()
            scope.refs[qual] = scope.refs.get(qual, frozenset()) | {low}
        return True

    def _quoted_closed(self, name: str) -> bool:
        low = name.lower()
        scope = self.scopes[-1] if self.scopes else None
        if scope is not None and scope.clause == "from" and scope.slot in (
                "table", "after_table", "after_as", "after_sub"):
            self.touched = True
            return self._from_name(low, quoted=True)
        self.pending = low
        return True

    def _qualifiable(self, table: str | None) -> bool:
        """Whether a name bound to `table` may qualify a column: it has a column of the
        schema (the grammar names no other after `Q.`; a subquery's result may hold none)."""
        return table is None or not self.schema.columns_of(table).isdisjoint(self.schema.all_columns)

    def _result_names(self, scope: _Scope) -> frozenset[str] | None:
        """The names the result columns of the SELECT read in `scope` may have, a superset:
        every column and alias its select list (or an ON) named, every column of the tables
        its `*` / `Q.*` spans; None: unknown (a compound SELECT: its first core names them;
        a `*` over a subquery whose result is unknown)."""
        if scope.compound:
            return None
        names = set(scope.bare) | scope.aliases
        for columns in scope.refs.values():
            names |= columns
        for qual in scope.stars:
            tables = list(scope.bound.values()) if qual == "" else [scope.bound.get(qual)]
            if None in tables:
                return None
            for table in tables:
                names |= self.schema.columns_of(table)
        return frozenset(names)

    def _qualifier(self, name: str) -> bool:
        scope = self.scopes[-1] if self.scopes else None
        if scope is None or name in KEYWORDS or name.startswith("("):  # "(0)": a subquery's place
            return False
        if scope.clause != "select":
            visible = self._visible()
            if name not in visible or not self._qualifiable(visible[name]):
                return False
        self.qual = name
        return True

    def _word(self, word: str, nxt: str) -> bool:
        """A complete bare word, followed by the character `nxt`."""
        low = word.lower()
        last, self.last = self.last, "w"
        if word[0].isdigit():
            self.operand = nxt == "."  # `1.5`: the digits after the point are the operand
            return True
        scope = self.scopes[-1] if self.scopes else None
        if self.qual is not None:
            qual, self.qual = self.qual, None
            choices = self._column_choices(qual)
            if choices is not None and low not in choices:
                return False
            if scope is not None and scope.clause == "select" and qual not in scope.bound:
                scope = self._mut()
                scope.refs[qual] = scope.refs.get(qual, frozenset()) | {low}
            self.operand = False
            return True
        if nxt == ".":
            return self._qualifier(low)
        if self.as_pending:  # a select-list alias, or the type of CAST(x AS type)
            self.as_pending = False
            self.operand = False
            if scope is not None:
                self._mut().aliases.add(low)
            return True
        if low in KEYWORDS:
            return self._keyword(low, last)
        if scope is None:
            return True
        if scope.clause == "from" and scope.slot in ("table", "after_table", "after_as", "after_sub"):
            return self._from_name(low)
        if (scope.clause == "select" and not self.operand and last not in ("k", "n")
                and len(self.parens) == scope.depth):  # `COUNT(*) n`: an alias without AS
            self._mut().aliases.add(low)
            return True
        words = self.word_set_at_start
        self.operand = False
        if low in self.schema.functions:
            self.last = "a" if low in _DISTINCT_CALLS else "f"  # a call's bracket comes next
            self.callee = low
            return self._may_call(low, last)
        if scope.clause == "select":
            self._mut().bare.add(low)
            return True
        if words is not None and low not in words:
            return False
        if scope.clause == "on" and low not in scope.bare and any(
                low in self.schema.columns_of(table) for table in scope.bound.values()):
            self._mut().bare.add(low)  # resolved here: a table joined later must not hold it too
        return True

    def _may_call(self, function: str, last: str) -> bool:
        """Whether a call of `function` may start here (`last`: before its name): fewer than
        MAX_CALL_DEPTH calls open, and not the first operand of a call of the same function
        (`UPPER(UPPER(`: no query needs it; a greedy loop does)."""
        calls = [call for call in self.calls if call]
        if len(calls) >= MAX_CALL_DEPTH:
            return False
        return not (last in ("(a", "(f") and self.calls and self.calls[-1] == function)

    def _from_name(self, low: str, *, quoted: bool = False) -> bool:
        """A name in the innermost FROM: a table, or the alias of the item before it."""
        scope = self.scopes[-1]
        slot = scope.slot
        if slot == "table":
            taken = self._taken(scope)
            if taken & self.schema.columns_of(low):
                return False  # a bare column already in a table bound here would be ambiguous
            if scope.items >= MAX_FROM_ITEMS and not self._useful_table(scope, low):
                return False  # past the cap, an item binds what FROM lacks
            scope = self._mut()
            scope.table, scope.slot = low, "after_table"
            scope.items = min(scope.items + 1, MAX_FROM_ITEMS + 1)
            return True
        if low in KEYWORDS or not self._alias_fits(scope, low):
            return False
        if scope.items > MAX_FROM_ITEMS and not self._useful(scope, low, scope.table):
            return False
        block = None if quoted else self.word_block()  # a quoted name is not typed as a word
        if block is not None and low not in block[1] and (
                sql_glue.glued(low, block[0]) or sql_glue.near(low, [*scope.refs, *scope.bound])):
            return False
        scope = self._mut()
        if scope.table is None or scope.table.startswith(DERIVED):  # a subquery's
            last = next(reversed(scope.bound), "")
            if last.startswith("("):
                del scope.bound[last]  # its place: the alias names it now
        scope.bound[low] = scope.table
        scope.slot = "after_alias"
        return True

    def _keyword(self, low: str, last: str) -> bool:
        scope = self.scopes[-1] if self.scopes else None
        depth = len(self.parens)
        if (scope is not None and depth == scope.depth and scope.clause == "from"
                and low not in _AFTER_ITEM.get(scope.slot, KEYWORDS)):
            return False  # the grammar reads `t OR` as `t` aliased `or`: never a keyword's place
        if low == "from" and scope is not None and depth == scope.depth and scope.clause != "select":
            return False  # `a FROM FROM t`: the grammar read the first as an alias (no table is `from`)
        if scope is not None and depth == scope.depth and scope.clause == "select":
            # the grammar also reads a keyword after a select-list operand as an alias (`a
            # WHERE`, `a AND FROM`, `a NOT,`): only a keyword's own places are let through
            if last == "n" and low not in _AFTER_NOT:
                return False
            if low == "from" and (self.operand or last == "k"):
                return False
            if not self.operand and last not in ("k", "n") and low not in _AFTER_OPERAND:
                return False
        if low == "case":
            self.cases += (depth,)
        elif low in _CASE_WORDS:  # only a CASE's (the grammar also reads `a THEN` as an alias)
            if not self.cases or self.cases[-1] != depth:
                return False
            if low == "end":
                self.cases = self.cases[:-1]
        binary_not = low == "not" and not self.operand
        if low == "not":
            self.operand = self.operand  # unary NOT keeps an operand coming; `x NOT IN` does not
        else:
            self.operand = low in _STRICT_AFTER or low == "select"
        if low == "select":
            if self.parens and last == "(" and (scope is None or depth > scope.depth):
                self.parens[-1] = True
                self.scopes.append(_Scope(depth))
                self._owned = True
            elif scope is None:
                self.scopes.append(_Scope(depth))
                self._owned = True
            elif scope.core_pending and depth == scope.depth:
                self.scopes[-1] = _Scope(depth, compound=True)
                self._owned = True
            self.last = "k"
            return True
        self.last = "w" if low in _OPERAND_ENDS else "n" if binary_not else "k"  # NULL / END close an operand
        if low == "cast":  # a call as far as nesting goes
            self.last, self.callee = "f", low
            return self._may_call(low, last)
        if low == "as":
            if (scope is not None and depth == scope.depth and scope.clause == "from"
                    and scope.slot in ("after_table", "after_sub")):
                self._mut().slot = "after_as"
            else:
                self.as_pending = True
            return True
        if scope is None or depth != scope.depth:
            return True
        if low == "from" and scope.clause == "select":
            scope = self._mut()
            scope.clause, scope.slot, scope.table, scope.joined = "from", "table", None, False
            scope.items = 0
            return True
        if scope.clause in ("from", "on") and low in _JOIN_WORDS:
            if scope.clause == "from" and not self._bind_plain_table():
                return False
            if scope.slot != "join_kw" and low in _CLOSED_JOINS and self._join_closed():
                return False  # no table may follow
            if scope.slot != "join_kw" and not self._may_start_item(self.scopes[-1]):
                return False
            scope = self._mut()
            scope.clause = "from"
            scope.slot = "table" if low == "join" else "join_kw"
            scope.joined = True
            scope.natural = scope.natural or low == "natural"
            return True
        if low == "on" and scope.clause == "from":
            if not self._bind_plain_table():
                return False
            self._mut().clause = "on"
            return True
        if low in _FROM_END:
            if not self._end_from():
                return False
            if low in _SET_OPS:
                self._mut().core_pending = True
            elif low in _TAILS and scope.tail != _TAILS[low]:
                self._mut().tail = _TAILS[low]
        return True
