"""SQL (sqlite) grammars: one SELECT statement, generic or restricted to a given schema.

Contract:
- `parse_sql_schema(schema)` turns DDL text (CREATE TABLE statements) or
  `{"tables": {name: [columns]}}` into `{table: [columns]}` (names as written), raising
  GrammarError on anything else. Done at request time so bad schemas fail early.
- `sql_ebnf(tables)` returns xgrammar EBNF (root rule `root`) for one sqlite query:
  SELECT [DISTINCT] … FROM (tables, joins, subqueries) [WHERE] [GROUP BY] [HAVING]
  [ORDER BY] [LIMIT [OFFSET]], compound with UNION [ALL] / INTERSECT / EXCEPT, expressions
  with AND/OR/NOT, comparisons, [NOT] IN (list | subquery), [NOT] LIKE, BETWEEN, IS [NOT]
  NULL, EXISTS, CASE, CAST, arithmetic, aggregates and common scalar functions, string and
  numeric literals, and an optional trailing ";". Keywords are case-insensitive (a character
  class per letter: `[sS][eE]...`). Words are separated by whitespace; every run of
  [ \\t\\n] (inside string literals too) is capped at SQL_MAX_WHITESPACE (4) characters. The
  EBNF writes whitespace as the inline `[ \\t\\n]*` (a `{1,8}` repetition or a whitespace
  rule there makes every space-led token "uncertain" for xgrammar: 100-1000x slower
  masks), so the cap is enforced by the xgrammar matcher (`WhitespaceCap`), mask and
  accept alike: the grammar is only meaningful with that matcher.
- Shape (for xgrammar's mask cost, measured on Spider): flat operator chains
  (`operand (op operand)*`: a recognizer needs no precedence levels), names as tries (one
  branch per next character, so a schema of hundreds of names keeps one live parser item),
  whitespace never the last element of a rule, shared `ws_X ::= <ws> X` rules (one
  precomputed whitespace position per target: compile time).
- Lookaheads (run-time mask cost): xgrammar decides a token up front unless it runs past the
  end of the rule it starts in; then the token is "uncertain" and re-parsed at every fill
  (~0.3-0.6 µs each; ~3-10k of them at an alias or after a number made the p99). So a word
  that ends a rule carries a one-character lookahead, a superset of what can follow it
  anywhere (`(= [ \\t\\n,);])` after an alias, `(= [ \\t\\n,);=!<>+*/%|\\-])` after a number
  or a string): tokens like " café" or "5.getX" are refused at compile time. Such a rule
  must not be inlined by xgrammar (the inliner drops the lookahead): it is nullable
  (`table_alias ::= "" | ...`, used without `?`), refers to a rule (`number_tail`,
  `alias_name`) or is never first in a sequence (`alias_name`, shared by the three alias
  positions: one set of precomputed identifier states, compile time below the grammar
  before lookaheads). Alternatives that must stay in one rule are written flat
  (`_alternatives`: no nested group, which would be a rule of its own), and operators carry
  their whitespace in flat, reference-free rules that xgrammar inlines before their operand.
  A lookahead never changes what is accepted (xgrammar's parser ignores it), only how the
  mask is computed; tests/grammars/test_sql_equivalence.py checks the masks against the
  grammar before lookaheads, token position by token position.
- With `tables=None` table and column names are any identifier (plain, "quoted",
  `backticked` or [bracketed]); function calls take any identifier as the name. With
  tables, table names must be one of the schema's tables and column names one of its
  columns (case-insensitive, optionally double-quoted or backticked; a name that is not an
  identifier, e.g. with a space, only quoted), functions one of `_ARITY` with
  sqlite's argument count (`count(*)`, DISTINCT only in aggregates, `round` 1-2, `substr`
  2-3, `replace` 3, ...: what sqlite refuses for arity, the grammar refuses);
  table and column aliases (`AS T1`) are any identifier and a column may be qualified by a
  table name or any alias; a select-list alias may go without AS (`COUNT(*) n`; without a
  schema AS is required: the grammar also reads a keyword there as the alias, which only
  the scope layer refuses). The schema-aware matcher adds identifier scopes on top of this
  grammar (grammars.sql.mask.matcher: qualifiers, aliases and bare columns against the
  tables of each FROM). Known limits of the grammar itself, decided by that layer or by sqlite
  (grammars.sql.check; the gateway reports the verdict and can retry): a qualifier is not
  checked against the aliases the query defines (the select list comes before FROM, so a
  left-to-right grammar cannot know them), nor a column against the tables of its FROM,
  nor ambiguity (`FROM t JOIN t`); a bare reference to a select-list alias (`ORDER BY
  cnt`) is refused in schema mode unless `cnt` is a column; an identifier may spell a
  keyword (the recognizer then keeps both readings; excluding keywords cost 2-3x compile
  time). Short aliases only (`[A-Za-z_][A-Za-z0-9_]{0,3}` as nested optionals) made masks
  ~4x slower (measured), so aliases stay any identifier.

Knows nothing of tokenizers or backends.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from grammars.errors import GrammarError

_KEYWORDS = (
    "select distinct all from where group by having order asc desc limit offset union "
    "intersect except join inner left right full outer cross natural on as and or not in "
    "like glob between is null exists case when then else end cast"
).split()
# Function arities (schema mode): name -> argument list shape (see _call_rules).
_ARITY = {
    "count": "count", "sum": "agg1", "avg": "agg1", "total": "agg1", "group_concat": "agg12",
    "min": "1n", "max": "1n", "abs": "1", "length": "1", "lower": "1", "upper": "1", "typeof": "1",
    "round": "12", "trim": "12", "ltrim": "12", "rtrim": "12", "substr": "23", "substring": "23",
    "coalesce": "2n", "ifnull": "2", "nullif": "2", "instr": "2", "replace": "3", "iif": "3",
    "date": "0n", "time": "0n", "datetime": "0n", "julianday": "0n", "strftime": "1n",
}
FUNCTIONS = frozenset(_ARITY)
_TYPES = "integer int real text numeric float double varchar char boolean date datetime".split()
# longest whitespace run (gold Spider dev / BIRD mini-dev: 2); enforced by the matcher, not the EBNF
SQL_MAX_WHITESPACE = 4
_WS = "[ \\t\\n] [ \\t\\n]*"  # one or more; inline (a rule or {m,n} here costs 100x)
_WS0 = "[ \\t\\n]*"
_Trie = dict[str, "_Trie"]
# The four identifier forms, each an inline sequence (a `+` or a nested group would become
# a rule of its own, whose end a token can cross: see "Lookaheads" in the module docstring).
_IDENT_FORMS = ('[A-Za-z_] [A-Za-z0-9_$]*', '"\\"" [^"\\n] [^"\\n]* "\\""',
                '"`" [^`\\n] [^`\\n]* "`"', '"[" [^\\]\\n] [^\\]\\n]* "]"')
# What can follow a finished literal (number, string): whitespace, an operator, , ) ;
_AFTER_LITERAL = "(= [ \\t\\n,);=!<>+*/%|\\-])"
_AFTER_ALIAS = "(= [ \\t\\n,);])"  # a FROM / select-list alias: whitespace , ) ;


_SYM_OPS = ("=", "==", "!=", "<>", "<", "<=", ">", ">=", "+", "-", "*", "/", "%", "||")
_FRACTIONS = ("", '"." [0-9]*')  # `("." [0-9]*)?`, flat
_EXPONENTS = ("", "[eE] [0-9] [0-9]*", "[eE] [+\\-] [0-9] [0-9]*")  # `([eE] [+\\-]? [0-9]+)?`


def _alternatives(prefixes: Sequence[str], forms: Sequence[str]) -> str:
    """`p f` for every prefix p and form f, as top-level alternatives (no nested group: a
    nested group is a rule of its own, and a lookahead only covers its own rule's end); the
    empty one (both parts empty) left out."""
    alternatives = (" ".join(part for part in (prefix, form) if part)
                    for prefix in prefixes for form in forms)
    return " | ".join(alternative for alternative in alternatives if alternative)


def _char(ch: str) -> str:
    """EBNF for one character, both cases for an ASCII letter."""
    if ch.isascii() and ch.isalpha():
        return f"[{ch.lower()}{ch.upper()}]"
    return json.dumps(ch)


def _kw(word: str) -> str:
    """Inline EBNF matching keyword `word` in any case (a sequence, not a rule)."""
    return " ".join(_char(ch) for ch in word)


def _trie(words: list[str]) -> _Trie:
    root: _Trie = {}
    for word in words:
        node = root
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}  # end of a word
    return root


def _trie_ebnf(node: _Trie) -> str:
    """Deterministic EBNF for the words of a trie: one branch per distinct next character."""
    alts = []
    for ch in sorted(k for k in node if k):
        rest = _trie_ebnf(node[ch])
        alts.append(f"{_char(ch)} {rest}" if rest else _char(ch))
    if not alts:
        return ""
    body = alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"
    return f"({body})?" if "" in node else body


def _names_ebnf(names: list[str]) -> str:
    """Any of `names` (case-insensitive, double-quoted or backticked, as sqlite reads both;
    bare too where the name is an identifier: sqlite reads `T1.Low Grade` as `T1.Low`
    aliased `Grade`) as a trie-shaped alternation."""
    quoted = f'"\\"" {_trie_ebnf(_trie(sorted({name.lower() for name in names})))} "\\""'
    ticked = sorted({name.lower() for name in names if "`" not in name and "\n" not in name})
    if ticked:
        quoted += f' | "`" {_trie_ebnf(_trie(ticked))} "`"'
    bare = sorted({name.lower() for name in names if _IDENT_RE.match(name)})
    return f"{_trie_ebnf(_trie(bare))} | {quoted}" if bare else quoted


_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*\Z")


def _qualifier_ebnf(tables: list[str]) -> str:
    """`table_name | ident` as flat alternatives: the identifier forms, plus the quoted table
    names an identifier does not spell (with a `"` or a newline); the same words."""
    forms = list(_IDENT_FORMS)
    quoted = [name for name in tables if '"' in name or "\n" in name]
    if quoted:
        forms.append(f'"\\"" {_trie_ebnf(_trie(sorted({name.lower() for name in quoted})))} "\\""')
    return " | ".join(forms)


def sql_ebnf(tables: dict[str, list[str]] | None) -> str:
    """xgrammar EBNF (root rule `root`) for one sqlite query; see the module docstring."""
    ws, ws0 = _WS, _WS0
    k = {word: _kw(word) for word in _KEYWORDS}
    if tables is None:
        name_rules = [
            "table_name ::= ident",
            f'name_expr ::= ident ("." ident | {ws0} "(" {ws0} call_args)?',
            'qualified_star ::= ident "." "*"',
        ]
    else:
        if not tables:
            raise GrammarError("the SQL schema has no tables", param="response_format.sql.schema")
        columns = [column for cols in tables.values() for column in cols]
        if not columns:
            raise GrammarError("the SQL schema has no columns",
                               param="response_format.sql.schema")
        name_rules = [
            f"table_name ::= {_names_ebnf(list(tables))}",
            f"column_name ::= {_names_ebnf(columns)}",
            f"qualifier ::= {_qualifier_ebnf(list(tables))} (= \".\")",
            'name_expr ::= qualifier "." column_name | column_name | function_call',
            'qualified_star ::= qualifier "." "*"',
            *_call_rules(k),
        ]
    types = _trie_ebnf(_trie(_TYPES))
    k_as = k["as"]
    as_ws = f"{ws} {k_as} {ws}"
    word_ops = [k["and"], k["or"], *(f"{k['not']} {ws} {k[w]}" for w in ("like", "glob", "between")),
                k["like"], k["glob"], k["between"], k["is"], f"{k['is']} {ws} {k['not']}"]
    comma = f'{ws0} "," {ws0}'
    rules = [
        f'root ::= {ws0} query ({ws0} ";")? {ws0}',
        f"query ::= select_core ({ws} compound {ws} select_core)* ({ws} {k['order']} {ws} "
        f"{k['by']} {ws} order_item ({comma} order_item)*)? ({ws} {k['limit']} {ws} [0-9]+ "
        f"({ws} {k['offset']} {ws} [0-9]+ | {comma} [0-9]+)?)?",
        f"compound ::= {k['union']} ({ws} {k['all']})? | {k['intersect']} | {k['except']}",
        f"select_core ::= {k['select']} {ws} (({k['distinct']} | {k['all']}) {ws} result_cols "
        f"| result_cols) {ws} {k['from']} {ws} from_item (join from_item ({ws} {k['on']} {ws} "
        f"expr)?)* ({ws} {k['where']} {ws} expr)? ({ws} {k['group']} {ws} {k['by']} {ws} expr "
        f"({comma} expr)*)? ({ws} {k['having']} {ws} expr)?",
        f"result_cols ::= result_col ({comma} result_col)*",
        'result_col ::= "*" | qualified_star | expr result_alias',
        # an alias without AS (`COUNT(*) n`) only with a schema: the scope layer then refuses a
        # keyword the grammar reads as that alias too (`a WHERE FROM`), which sqlite refuses
        f'result_alias ::= "" | {as_ws} alias_name'
        + (f" | {ws} alias_name {_AFTER_ALIAS}" if tables is not None else f" {_AFTER_ALIAS}"),
        f"join ::= {comma} | {ws} join_kw {ws}",
        f"join_kw ::= {k['natural']} {ws} join_kind | join_kind",
        f"join_kind ::= {k['join']} | ({k['inner']} | {k['cross']}) {ws} {k['join']} | "
        f"({k['left']} | {k['right']} | {k['full']}) {ws} ({k['outer']} {ws} {k['join']} | "
        f"{k['join']})",
        f'from_item ::= table_name table_alias | "(" {ws0} query {ws0} ")" subquery_alias',
        f'table_alias ::= "" | {as_ws} alias_name | {ws} alias_name {_AFTER_ALIAS}',
        f'subquery_alias ::= "" | {ws0} {k_as} {ws} alias_name | {ws0} alias_name {_AFTER_ALIAS}',
        f"alias_name ::= {' | '.join(_IDENT_FORMS)} {_AFTER_ALIAS}",
        f"order_item ::= expr ({ws} ({k['asc']} | {k['desc']}))?",
        # flat operator chains: a recognizer needs no precedence, and flat rules keep the
        # parser state small (one live item per operand position)
        f"expr ::= operand (ws0_sym_op {ws0} operand | ws_word_op {ws} operand | in_tail)*",
        # operators with their leading whitespace as flat alternatives without a rule
        # reference: xgrammar inlines them into the loop above, so the operand follows in
        # the same rule and a token running past an operator is decided at compile time
        f"ws0_sym_op ::= {_alternatives([ws0], [json.dumps(op) for op in _SYM_OPS])}",
        f"ws_word_op ::= {_alternatives([ws], word_ops)}",
        f'in_tail ::= {ws} ({k["not"]} {ws} {k["in"]} | {k["in"]}) {ws0} "(" {ws0} (query | '
        f'expr ({comma} expr)*) {ws0} ")"',
        f'operand ::= {k["not"]} {ws} operand | "-" {ws0} operand | primary',
        f"primary ::= number | string | {k['null']} | name_expr | case_expr | {k['cast']} {ws0} "
        f'"(" {ws0} expr {ws} {k["as"]} {ws} ({types}) {ws0} ")" | {k["exists"]} {ws0} "(" '
        f'{ws0} query {ws0} ")" | "(" {ws0} (query | expr ({comma} expr)*) {ws0} ")"',
        f'call_args ::= ("*" | {k["distinct"]} {ws} expr ({comma} expr)* | expr ({comma} '
        f'expr)*)? {ws0} ")"',
        f"case_expr ::= {k['case']} ({ws} expr)? ({ws} {k['when']} {ws} expr {ws} {k['then']} "
        f"{ws} expr)+ ({ws} {k['else']} {ws} expr)? {ws} {k['end']}",
        *name_rules,
        f'number ::= [0-9] [0-9]* number_tail | "." [0-9] [0-9]* {_AFTER_LITERAL}',
        f'number_tail ::= "" | {_alternatives(_FRACTIONS, _EXPONENTS)} {_AFTER_LITERAL}',
        f"string ::= \"'\" [^']* (\"''\" [^']*)* \"'\" | \"\\\"\" [^\"]* \"\\\"\" "
        f"{_AFTER_LITERAL}",
        'ident ::= [A-Za-z_] [A-Za-z0-9_$]* | "\\"" [^"\\n]+ "\\"" | "`" [^`\\n]+ "`" | "[" '
        '[^\\]\\n]+ "]"',
    ]
    return "\n".join(_share_leading_whitespace(rules)) + "\n"


def _call_rules(k: dict[str, str]) -> list[str]:
    """Schema-mode function calls, one rule per arity shape (sqlite refuses a wrong count)."""
    ws, ws0 = _WS, _WS0
    comma = f'{ws0} "," {ws0}'
    distinct = f"({k['distinct']} {ws})?"
    shapes = {
        "count": f'("*" | {distinct} expr)', "agg1": f"{distinct} expr",
        "agg12": f"{distinct} expr ({comma} expr)?", "1": "expr", "1n": f"expr ({comma} expr)*",
        "12": f"expr ({comma} expr)?", "2": f"expr {comma} expr", "2n": f"expr ({comma} expr)+",
        "23": f"expr {comma} expr ({comma} expr)?", "3": f"expr {comma} expr {comma} expr",
    }
    # `date()`: no argument (then "now"); the group ends on ")", never on whitespace
    zero = f'call_0n {ws0} "(" {ws0} (expr ({comma} expr)* {ws0} ")" | ")")'
    by_shape: dict[str, list[str]] = {}
    for name, shape in _ARITY.items():
        by_shape.setdefault(shape, []).append(name)
    calls = [zero if shape == "0n" else f'call_{shape} {ws0} "(" {ws0} {shapes[shape]} {ws0} ")"'
             for shape in by_shape]
    return ["function_call ::= " + " | ".join(calls),
            *[f"call_{shape} ::= {_trie_ebnf(_trie(names))}" for shape, names in by_shape.items()]]


def _nested_optional(depth: int) -> str:
    """`([ \t\n] ([ \t\n] (...)?)?)?`: 0..depth whitespace characters, inline."""
    out = ""
    for _ in range(depth):
        out = f"([ \\t\\n] {out})?" if out else "([ \\t\\n])?"
    return out


def sql_ebnf_bounded(ebnf: str) -> str:
    """`ebnf` (from sql_ebnf) with the whitespace bound written into the grammar, for
    consumers that recompile the text without our matcher (engine.vllm): the same runs
    between words (1..4 / 0..4 characters; string literals not capped), written as nested
    optionals, not `{1,8}` repetitions. Measured on 10 Spider gold queries (Qwen tokenizer,
    plain xgrammar matchers, interleaved, 2-core EPYC under heavy load): fill mean 14 ms
    nested vs 200 ms with `{1,8}` (p50 0.2 vs 2.1 ms) and 6.3 ms for the unbounded `[ \t\n]*`
    the torch path uses under WhitespaceCap."""
    top = SQL_MAX_WHITESPACE
    return ebnf.replace(_WS, "[ \\t\\n] " + _nested_optional(top - 1)).replace(
        _WS0, _nested_optional(top))


_SHARED = ("expr", "operand", "query", "select_core", "result_col", "from_item", "order_item",
           "call_args", "join_kind", "table_name")


def _share_leading_whitespace(rules: list[str]) -> list[str]:
    """Rewrite `<ws> X` as a shared rule `ws_X ::= <ws> X` (and `<ws0> X` as `ws0_X`).

    xgrammar precomputes a token mask at every whitespace position of the grammar, and
    one in front of an expression walks the whole expression closure for ~70k space-led
    tokens: one such position per target cuts compile time several-fold, and a shared
    rule never ends on whitespace, so run-time masks stay certain."""
    used: dict[str, str] = {}
    out = []
    for rule in rules:
        for target in _SHARED:
            for prefix, ws in (("ws_", _WS), ("ws0_", _WS0)):
                pattern = re.compile(re.escape(f"{ws} {target}") + r"(?![A-Za-z0-9_])")
                if pattern.search(rule):
                    rule = pattern.sub(prefix + target, rule)
                    used[prefix + target] = f"{ws} {target}"
        out.append(rule)
    return out + [f"{name} ::= {body}" for name, body in used.items()]


def parse_sql_schema(schema: Any, *, param: str = "response_format.sql.schema") -> dict[str, list[str]]:
    if isinstance(schema, str):
        tables = _parse_ddl(schema)
        if not tables:
            raise GrammarError("no CREATE TABLE statement found in the SQL schema", param=param)
        return tables
    if isinstance(schema, dict) and isinstance(schema.get("tables"), dict):
        result: dict[str, list[str]] = {}
        for name, columns in schema["tables"].items():
            if not isinstance(name, str) or not re.fullmatch(r"[^\"\n]+", name):
                raise GrammarError(f"invalid table name {name!r}", param=param)
            if not isinstance(columns, list) or not all(
                isinstance(c, str) and re.fullmatch(r"[^\"\n]+", c) for c in columns
            ):
                raise GrammarError(f"columns of table {name!r} must be a list of names", param=param)
            result[name] = list(columns)
        if not result:
            raise GrammarError("the SQL schema has no tables", param=param)
        return result
    raise GrammarError(
        'the SQL schema must be DDL text or {"tables": {name: [columns]}}', param=param
    )


_CREATE_RE = re.compile(
    r"create\s+(?:temp(?:orary)?\s+)?table\s+(?:if\s+not\s+exists\s+)?"
    r"(\"[^\"]+\"|`[^`]+`|\[[^\]]+\]|[A-Za-z_][\w$.]*)\s*\(",
    re.IGNORECASE,
)
_CONSTRAINT_WORDS = {"primary", "foreign", "unique", "check", "constraint", "key", "index"}


def _unquote(name: str) -> str:
    if name[:1] in "\"`[" and len(name) >= 2:
        return name[1:-1]
    return name


def _parse_ddl(ddl: str) -> dict[str, list[str]]:
    ddl = re.sub(r"--[^\n]*", "", ddl)
    tables: dict[str, list[str]] = {}
    for match in _CREATE_RE.finditer(ddl):
        depth, start, pos = 1, match.end(), match.end()
        while pos < len(ddl) and depth:
            depth += {"(": 1, ")": -1}.get(ddl[pos], 0)
            pos += 1
        body = ddl[start : pos - 1]
        items: list[str] = []
        depth = 0
        current: list[str] = []
        for ch in body:
            if ch == "," and depth == 0:
                items.append("".join(current))
                current = []
                continue
            depth += {"(": 1, ")": -1}.get(ch, 0)
            current.append(ch)
        items.append("".join(current))
        columns = []
        for item in items:
            item = item.strip()
            first = re.match(r"(\"[^\"]+\"|`[^`]+`|\[[^\]]+\]|\S+)", item)
            if not first or first.group(1).lower() in _CONSTRAINT_WORDS:
                continue
            columns.append(_unquote(first.group(1)))
        name = _unquote(match.group(1)).split(".")[-1]
        tables[name] = columns
    return tables
