"""The glued-alias rule: a FROM alias may not be a scope name run on into the keyword after it.

Why: SqlScope refuses an alias whose table lacks a column the alias is required to have
(`SELECT T1.Title ... FROM singer AS T1`) at the character after it. A model refused that way
kept the identifier going into the keyword it meant to write next and never finished:
`singer AS T1JOINsong`, `course_arrange AS T2ONT1_teacher_ID` (Qwen2.5-Coder-1.5B, Spider
dev-366 / dev-197). An alias slot admits any identifier, so nothing else stopped it.

The rule, exactly (all comparisons lower case). In an alias slot of FROM (`t AS _`, `t _`,
`(subquery) _`), with N = the qualifiers used before FROM in this SELECT core and the names it
has bound so far, a *glue prefix* is `n + sep + k` for n in N, sep in {"", "_"} and k a keyword
that may follow a FROM item (`GLUE_KEYWORDS`: the join words, ON, and the words that end FROM:
WHERE GROUP HAVING ORDER LIMIT UNION INTERSECT EXCEPT). A word with a glue prefix is refused
as an alias unless it is one of the *exceptions*: a name the schema or the query gives it
(a table of the schema or a qualifier used before FROM) that would be accepted as this alias
anyway, or a keyword (a keyword is read as a keyword, never as an alias). While the word is
being typed it stays viable iff it has no glue prefix or is a prefix of an exception, so a
refused word is refused as soon as its glue prefix is complete (it cannot run on forever), and
never a dead end: a viable word can always be completed to an accepted one.

So `T1JOINsong`, `T1_join`, `t2on`, `T1where_x` are refused when T1 / T2 is used or bound; a
table really called `t1_join` or `tonnage` (with a qualifier `t`) stays allowed, and so does a
qualifier `tonnage` used before FROM. What it also refuses: an invented alias such as `sonny`
when a qualifier `s` is used (`s` + ON + `ny`); a Spider gold query never does this (tested).

`glue_prefixes(names)` builds the prefixes; `glued(word, prefixes)` tests one word;
`viable(word, block)` the typed-word test. Pure functions, no state.
"""

from __future__ import annotations

from collections.abc import Iterable

GLUE_KEYWORDS = frozenset(
    "natural inner cross left right full outer join on where group having order limit union "
    "intersect except".split())
_SEPARATORS = ("", "_")
_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyz_")

Block = tuple[frozenset[str], frozenset[str]]  # (glue prefixes, exceptions), lower case


def glue_prefixes(names: Iterable[str]) -> frozenset[str]:
    """`n + sep + k` for each identifier n of `names` (lower case; others, such as the
    placeholder names of FROM subqueries, are skipped)."""
    return frozenset(name + sep + keyword for name in names if name[:1] in _NAME_START
                     for sep in _SEPARATORS for keyword in GLUE_KEYWORDS)


def glued(word: str, prefixes: frozenset[str]) -> bool:
    """Whether `word` (lower case) starts with one of `prefixes`."""
    return any(word.startswith(prefix) for prefix in prefixes)


def viable(word: str, block: Block) -> bool:
    """Whether `word` (lower case, being typed) can still become an accepted alias."""
    prefixes, exceptions = block
    return not glued(word, prefixes) or any(name.startswith(word) for name in exceptions)
