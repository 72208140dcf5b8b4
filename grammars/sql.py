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
  numeric literals, and an optional trailing ";". Keywords are case-insensitive. Words are
  separated by 1-8 whitespace characters (bounded: no whitespace runaway).
- With `tables=None` table and column names are any identifier (plain, "quoted",
  `backticked` or [bracketed]). With tables, table names must be one of the schema's tables
  and column names one of its columns (case-insensitive, optionally double-quoted);
  table and column aliases (`AS T1`) are any identifier and a column may be qualified by a
  table name or any alias. Known limits: a qualifier is not checked against the aliases the
  query defined, and a bare reference to a select-list alias (`ORDER BY cnt`) is refused in
  schema mode unless `cnt` is a column.

Knows nothing of tokenizers or backends.
"""

from __future__ import annotations

import json
import re
from typing import Any

from grammars.errors import GrammarError

_KEYWORDS = (
    "select distinct all from where group by having order asc desc limit offset union "
    "intersect except join inner left right full outer cross natural on as and or not in "
    "like glob between is null exists case when then else end cast count sum avg min max"
).split()
_FUNCTIONS = (
    "abs length lower upper round substr substring coalesce ifnull nullif instr replace trim "
    "ltrim rtrim typeof date time datetime julianday strftime total group_concat"
).split()
_TYPES = "integer int real text numeric float double varchar char boolean date datetime".split()
_IDENT = r'[A-Za-z_][A-Za-z0-9_$]*'


def _ci(word: str) -> str:
    """EBNF matching `word` case-insensitively."""
    parts = []
    for ch in word:
        if ch.isalpha() and ch.lower() != ch.upper():
            parts.append(f"[{ch.lower()}{ch.upper()}]")
        else:
            parts.append(json.dumps(ch))
    return " ".join(parts)


def _name_alternatives(names: list[str]) -> str:
    unique = sorted({name.lower() for name in names})
    alts = []
    for name in unique:
        alts.append(f"({_ci(name)})")
        alts.append(f'("\\"" {_ci(name)} "\\"")')
    return " | ".join(alts)


def sql_ebnf(tables: dict[str, list[str]] | None) -> str:
    kw = "\n".join(f"kw_{word} ::= {_ci(word)}" for word in _KEYWORDS)
    functions = " | ".join(f"({_ci(name)})" for name in _FUNCTIONS)
    types = " | ".join(f"({_ci(name)})" for name in _TYPES)
    if tables is None:
        table_name = "ident"
        column_name = "ident"
    else:
        if not tables:
            raise GrammarError("the SQL schema has no tables", param="response_format.sql.schema")
        columns = [column for cols in tables.values() for column in cols]
        table_name = _name_alternatives(list(tables))
        column_name = _name_alternatives(columns) if columns else "ident"
    return f"""root ::= s query s (";" s)?
s ::= [ \\t\\n]{{0,8}}
S ::= [ \\t\\n]{{1,8}}
query ::= select_core (S compound S select_core)* order_clause? limit_clause?
compound ::= kw_union (S kw_all)? | kw_intersect | kw_except
select_core ::= kw_select S ((kw_distinct | kw_all) S)? result_cols S kw_from S from_clause where_clause? group_clause? having_clause?
result_cols ::= result_col (s "," s result_col)*
result_col ::= "*" | qualifier s "." s "*" | expr (S kw_as S alias)?
from_clause ::= table_ref (join_op table_ref (S kw_on S expr)?)*
join_op ::= s "," s | S (kw_natural S)? (((kw_left | kw_right | kw_full) (S kw_outer)? | kw_inner | kw_cross) S)? kw_join S
table_ref ::= table_name (S (kw_as S)? alias)? | "(" s query s ")" (s (kw_as S)? alias)?
where_clause ::= S kw_where S expr
group_clause ::= S kw_group S kw_by S expr (s "," s expr)*
having_clause ::= S kw_having S expr
order_clause ::= S kw_order S kw_by S order_item (s "," s order_item)*
order_item ::= expr (S (kw_asc | kw_desc))?
limit_clause ::= S kw_limit S integer (S kw_offset S integer | s "," s integer)?
expr ::= and_expr (S kw_or S and_expr)*
and_expr ::= not_expr (S kw_and S not_expr)*
not_expr ::= (kw_not S)? predicate
predicate ::= arith pred_tail?
pred_tail ::= s cmp_op s arith | S (kw_not S)? kw_in s "(" s (query | arith (s "," s arith)*) s ")" | S (kw_not S)? (kw_like | kw_glob) S arith | S (kw_not S)? kw_between S arith S kw_and S arith | S kw_is S (kw_not S)? kw_null
cmp_op ::= "=" | "==" | "!=" | "<>" | "<" | "<=" | ">" | ">="
arith ::= unary (s arith_op s unary)*
arith_op ::= "+" | "-" | "*" | "/" | "%" | "||"
unary ::= ("-" s)? primary
primary ::= number | string | kw_null | column_ref | aggregate | function_call | case_expr | cast_expr | kw_exists s "(" s query s ")" | "(" s query s ")" | "(" s expr s ")"
aggregate ::= (kw_count | kw_sum | kw_avg | kw_min | kw_max) s "(" s ((kw_distinct S)? expr | "*") s ")"
function_call ::= function_name s "(" s (expr (s "," s expr)*)? s ")"
function_name ::= {functions}
case_expr ::= kw_case (S expr)? (S kw_when S expr S kw_then S expr)+ (S kw_else S expr)? S kw_end
cast_expr ::= kw_cast s "(" s expr S kw_as S type_name s ")"
type_name ::= {types}
column_ref ::= (qualifier s "." s)? column_name
qualifier ::= table_name | alias
alias ::= ident
table_name ::= {table_name}
column_name ::= {column_name}
ident ::= {_IDENT_EBNF} | "\\"" [^"\\n]+ "\\"" | "`" [^`\\n]+ "`" | "[" [^\\]\\n]+ "]"
integer ::= [0-9]+
number ::= [0-9]+ ("." [0-9]*)? ([eE] [+\\-]? [0-9]+)? | "." [0-9]+
string ::= "'" ([^'] | "''")* "'" | "\\"" [^"]* "\\""
{kw}
"""


_IDENT_EBNF = "[A-Za-z_] [A-Za-z0-9_$]*"


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
        items, depth, current = [], 0, []
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
