"""The glued-alias rule: a FROM alias may not run on from a name it cannot be.

Why: SqlScope refuses an alias whose table lacks a column the alias is required to have
(`SELECT T1.Title ... FROM singer AS T1`) at the character after it. A model refused that way
kept the identifier going into the keyword it meant to write next and never finished:
`singer AS T1JOINsong`, `course_arrange AS T2ONT1_teacher_ID` (Qwen2.5-Coder-1.5B, Spider
dev-366 / dev-197); refused the glued spelling it wrote `T1Jo JOIN`, then `T1Joignsong`. An
alias slot admits any identifier, so nothing else stopped it. So the rule refuses the run-on
at its root, where the model can still pick another alias (`singer AS T2 JOIN song AS T1`).

The rule, exactly (all comparisons lower case). In an alias slot of FROM (`t AS _`, `t _`,
`(subquery) _`), let N be the qualifiers used before FROM in this SELECT core and the names it
has bound so far, and R those qualifiers used before FROM, not bound, whose required columns
the table of this item lacks (none after a subquery: its columns are unknown). The *blocked
prefixes* are R and every *glue prefix* `n + sep + k` (n in N, sep in {"", "_"}, k a keyword
that may follow a FROM item, `GLUE_KEYWORDS`: the join words, ON, and the words that end FROM:
WHERE GROUP HAVING ORDER LIMIT UNION INTERSECT EXCEPT), and, in an alias slot without AS
(`t _`, `(subquery) _`), those keywords themselves (`KEYWORD_PREFIXES`: `cards WHERElanguage`,
`Player_Attributes WHEREOverall_rating`: the model glued the keyword to the name it meant to
write next; no Spider dev or BIRD mini-dev gold alias starts so). A complete alias is refused when it
has a blocked prefix (`T1x` for T1 in R; `T1JOINsong`), or is a name of N run on into the
beginning of sep + keyword (`T1Jo`, `T1_`: the glue stopped short), unless it is one of the
*exceptions*: a name the schema or the query gives it (a table of the schema or a qualifier
used before FROM) that would be accepted as this alias anyway, or a keyword that SqlScope
accepts as a keyword there (a keyword is read as a keyword, never as an alias; one it refuses
there, such as WHERE while FROM may not end, is no exception: refused as typed). While the word is being typed it stays viable iff it has no
blocked prefix or is a prefix of an exception: the word is refused as soon as its blocked
prefix is complete (at the `1` of `T1` for T1 in R; it cannot run on forever; a mere beginning
such as `T1Jo` can still go on to `T1Jox`), and never a dead end: a viable word can always be
completed to an accepted one.

So with T1 in R (`SELECT T1.Title ... FROM singer AS`): `T1`, `T10`, `T1x` are refused as
typed; with T1 / T2 used or bound: `T1JOINsong`, `T1_join`, `t2on`, `T1where_x`, `T1Jo`,
`T1_`, `T1o` are refused, `T1Jox`, `T1_x`, `T21` are not (for T2 not in R); a table really
called `t1_join` or `tonnage` (with a qualifier `t`) stays allowed where it fits, and so does
a qualifier `tonnage` used before FROM. What it also refuses: an invented alias such as
`sonny` when a qualifier `s` is used (`s` + ON + `ny`), or `T10` for a table that T1 cannot
be (a query that uses T1 before FROM and aliases another table `T10`); a Spider gold query
never does this (tested).

`glue_prefixes(names)` builds the glue prefixes; `glued(word, prefixes)` tests a prefix;
`near(word, names)` whether it is a name of `names` run on into (the beginning of) sep +
keyword (every glued word is); `viable(word, block)` the typed-word test. Pure functions.
"""

from __future__ import annotations

from collections.abc import Iterable

GLUE_KEYWORDS = frozenset(
    "natural inner cross left right full outer join on where group having order limit union "
    "intersect except".split())
# an alias without AS may not start with one of these and go on (`cards WHERElanguage`)
KEYWORD_PREFIXES = GLUE_KEYWORDS
_SEPARATORS = ("", "_")
_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyz_")
_TAILS = frozenset(sep + keyword for sep in _SEPARATORS for keyword in GLUE_KEYWORDS)

Block = tuple[frozenset[str], frozenset[str]]  # (glue prefixes, exceptions), lower case


def glue_prefixes(names: Iterable[str]) -> frozenset[str]:
    """`n + sep + k` for each identifier n of `names` (lower case; others, such as the
    placeholder names of FROM subqueries, are skipped)."""
    return frozenset(name + sep + keyword for name in names if name[:1] in _NAME_START
                     for sep in _SEPARATORS for keyword in GLUE_KEYWORDS)


def glued(word: str, prefixes: frozenset[str]) -> bool:
    """Whether `word` (lower case) starts with one of `prefixes` (one set lookup per
    beginning of the word: words are short, prefix sets are not)."""
    return any(word[:end] in prefixes for end in range(len(word), -1, -1))


def near(word: str, names: Iterable[str]) -> bool:
    """Whether `word` (lower case) is a name of `names` followed by a non-empty text that
    has sep + keyword as a prefix or is a beginning of one."""
    for name in names:
        if len(word) > len(name) and word.startswith(name):
            rest = word[len(name):]
            if any(tail.startswith(rest) or rest.startswith(tail) for tail in _TAILS):
                return True
    return False


def viable(word: str, block: Block) -> bool:
    """Whether `word` (lower case, being typed) can still become an accepted alias."""
    prefixes, exceptions = block
    return not glued(word, prefixes) or any(name.startswith(word) for name in exceptions)
