"""The identifier-scope layer of schema-aware SQL (grammars.sql.scope, grammars.sql.mask.matcher):
gold Spider queries pass, the model outputs sqlite refused (alias-qualified columns of the
wrong table) are refused at the right character and token, the mask equals the token-by-token
reading exactly, rollback is exact, and random walks under the mask run on sqlite."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
import torch

from grammars import spec_from_request
from grammars.sql.check import check_sql
from grammars.sql.grammar import FUNCTIONS, parse_sql_schema
from grammars.sql.mask.vocab import opaque_shape
from grammars.sql.scope import SqlSchema, SqlScope
from tests.conftest import DATA
from tests.grammars.sql.scope_reading import refused_at
from tokenmask import unpack_bitmask

SPIDER = DATA / "text2sql" / "spider"
# Outputs of Qwen2.5-Coder-1.5B under the grammar that sqlite refused (text2sql accuracy run,
# 24 questions) and the prefix at whose last character the scope layer refuses them.
REFUSED = [
    ("concert_singer", "SELECT T1.Name, T1.Capacity FROM stadium AS T1 JOIN concert AS T2 ON "
     "T1.Stadium_ID = T2.Stadium_ID ORDER BY T2.Average DESC LIMIT 1", "ORDER BY T2.A"),
    ("pets_1", "SELECT T1.Major, T1.Age FROM Student AS T1 JOIN Has_Pet AS T2 ON T1.StuID = "
     "T2.StuID WHERE T2.PetType = 'dog'", "WHERE T2.PetT"),
    ("car_1", "SELECT DISTINCT T2.Model FROM car_names AS T1 INNER JOIN model_list AS T2 ON "
     "T1.Model = T2.Model WHERE T1.Make = 'General Motors' OR T1.Weight > 3500", "OR T1.W"),
    ("course_teach", "SELECT T1.Name, T2.Course FROM teacher AS T1 JOIN course_arrange AS T2 ON "
     "T1.Teacher_ID = T2.Teacher_ID", "course_arrange AS T2"),  # at its `2` (grammars.sql.glue)
    ("singer", "SELECT T1.Title, T2.Name FROM singer AS T1 JOIN song AS T2 ON T1.Singer_ID = "
     "T2.Singer_ID", "FROM singer AS T1"),
]


def _tables(db: str) -> dict[str, list[str]]:
    return parse_sql_schema((SPIDER / "ddl" / f"{db}.sql").read_text())


def _gold() -> list[dict[str, Any]]:
    return json.loads((SPIDER / "dev.json").read_text())  # type: ignore[no-any-return]


def _refused_at(query: str, tables: dict[str, list[str]]) -> int | None:
    """Index of the character the scope reader refuses (len(query) when it cannot end)."""
    return refused_at(query, tables, must_end=True)


def _compiled(compiler: Any, db: str) -> Any:
    ddl = (SPIDER / "ddl" / f"{db}.sql").read_text()
    return compiler.compile(spec_from_request({"response_format": {"type": "sql", "sql": {"schema": ddl}}}))


def test_scope_reader_passes_every_gold_query() -> None:
    refused = [(e["query"], at) for e in _gold() if (at := _refused_at(e["query"], _tables(e["db_id"])))
               is not None]
    assert not refused, refused[:3]


@pytest.mark.parametrize("db,query,prefix", REFUSED)
def test_scope_reader_refuses_wrong_table_columns_where_they_start(db: str, query: str, prefix: str) -> None:
    tables = _tables(db)
    assert not check_sql(query, tables).valid  # sqlite refuses it
    at = _refused_at(query, tables)
    assert at is not None and query[: at + 1].endswith(prefix), (at, query[: (at or 0) + 1])


def test_scope_reader_rules() -> None:
    tables = {"singer": ["id", "name"], "song": ["id", "title", "singer_id"]}
    ok = ["SELECT T2.title FROM singer AS T1 JOIN song AS T2 ON T1.id = T2.singer_id",
          "SELECT name FROM singer WHERE id IN (SELECT singer_id FROM song AS s WHERE s.title = 'x')",
          "SELECT count(*) AS id FROM singer GROUP BY name ORDER BY id DESC",  # an alias that is a column
          "SELECT singer.name FROM singer", "SELECT x.id FROM (SELECT id FROM song) AS x",
          "SELECT name FROM singer UNION SELECT title FROM song ORDER BY name"]
    for query in ok:
        assert _refused_at(query, tables) is None, query
        assert check_sql(query, tables).valid, query
    bad = {"SELECT T1.title, T1.name FROM": "SELECT T1.title, T1.n",  # no table has both
           "SELECT T1.title FROM singer AS T1 WHERE": "singer AS T1",  # singer has no title (at `1`)
           "SELECT T9.name FROM singer AS T1 WHERE": "singer AS T1 W",  # T9 never bound, FROM ends
           "SELECT name FROM singer AS T1 WHERE T2.id = 1": "WHERE T2",  # not a bound qualifier
           "SELECT name FROM song": "FROM song",  # bare `name` in no FROM table (it cannot end)
           "SELECT singer.name FROM singer AS s WHERE": "AS s W",  # an aliased table loses its name
           # a bare alias that is no column: the grammar reads `n` only as a qualifier (`n.x`)
           "SELECT count(*) AS n FROM singer GROUP BY name ORDER BY n DESC": "ORDER BY n "}
    for query, prefix in bad.items():
        at = _refused_at(query, tables)
        assert at is not None and query[: at + 1].endswith(prefix) or (
            at == len(query) and query.endswith(prefix)), (query, at)


def test_a_subquery_in_from_is_bound_to_its_result_names() -> None:
    """A derived table binds the names its result may have (select-list columns and aliases,
    the columns a `*` / `Q.*` spans): a column it does not return is refused outside it, as
    sqlite refuses it; where its result is unknown (a compound SELECT), any column resolves."""
    tables = {"player": ["player_api_id", "height", "name"], "attrs": ["player_api_id", "rating"]}
    sub = "(SELECT player_api_id FROM player WHERE height < 180) AS T2"
    ok = [f"SELECT T1.rating FROM attrs AS T1 JOIN {sub} ON T1.player_api_id = T2.player_api_id",
          "SELECT max(c) FROM (SELECT count(*) AS c FROM attrs GROUP BY player_api_id)",
          "SELECT n FROM (SELECT count(*) n FROM attrs) ORDER BY n",
          "SELECT name FROM (SELECT * FROM player) WHERE height > 3",
          "SELECT T.rating FROM (SELECT P.*, A.rating FROM player AS P JOIN attrs AS A "
          "ON P.player_api_id = A.player_api_id) AS T WHERE T.height > 1",
          "SELECT x.name FROM (SELECT name FROM player UNION SELECT rating FROM attrs) AS x",
          "SELECT T2.name FROM attrs AS T1 JOIN (SELECT name, player_api_id FROM player) AS T2 "
          "ON T1.player_api_id = T2.player_api_id WHERE T2.name = 'x'"]
    for query in ok:
        assert _refused_at(query, tables) is None, query
        assert check_sql(query, tables).valid, query
    bad = [f"SELECT height FROM attrs AS T1 JOIN {sub} ON T1.player_api_id = T2.player_api_id",
           f"SELECT T1.rating FROM attrs AS T1 JOIN {sub} ON T1.player_api_id = T2.h",
           "SELECT name FROM (SELECT height FROM player) WHERE",
           "SELECT T.rating FROM (SELECT P.* FROM player AS P JOIN attrs AS A "
           "ON P.player_api_id = A.player_api_id) AS T"]
    for prefix in bad:  # refused at its last character, or cannot end there
        assert _refused_at(prefix, tables) in (len(prefix) - 1, len(prefix)), prefix
        assert _refused_at(prefix[:-1], tables) in (None, len(prefix) - 1), prefix


def test_a_result_without_a_schema_column_never_qualifies() -> None:
    """The grammar names only the schema's columns after `Q.`: a subquery whose result holds
    none of them cannot be a qualifier after FROM (it would be a dead end)."""
    tables = {"player": ["player_api_id", "height"]}
    reader = SqlScope(SqlSchema(tables, FUNCTIONS))
    assert reader.feed("SELECT 1 FROM (SELECT count(*) AS c FROM player) AS x WHERE ")
    words = reader.word_set()
    assert words is not None and "x" not in words and "height" not in words
    assert not reader.copy().feed("x.")


def test_a_copy_and_its_original_never_share_a_change() -> None:
    """Copies share their scopes until one of them changes the innermost (copy on write):
    feeding either side, at every character of gold queries with subqueries, joins and set
    operations, leaves the other side's signature as it was."""
    queries = [e for e in _gold() if "(" in e["query"] or " JOIN " in e["query"].upper()
               or "UNION" in e["query"].upper()][:40]
    assert len(queries) == 40
    texts = ["SELECT name FROM singer WHERE id IN (SELECT singer_id FROM song AS s) "
             "UNION SELECT x.title FROM (SELECT title FROM song) AS x, singer"]
    schemas = [{"singer": ["id", "name"], "song": ["id", "title", "singer_id"]}]
    texts += [e["query"] for e in queries]
    schemas += [_tables(e["db_id"]) for e in queries]
    for text, tables in zip(texts, schemas, strict=True):
        scope = SqlScope(SqlSchema(tables, FUNCTIONS))
        for index, ch in enumerate(text):
            before = scope.signature()
            probe = scope.copy()
            for rest in (text[index:], ", x) AS y JOIN t ON", "'a' UNION SELECT z FROM t AS q"):
                probe.copy().feed(rest)  # reads that change every kind of field, then dropped
            assert probe.signature() == before == scope.signature(), (text, index)
            kept = scope.copy()
            assert scope.feed(ch), (text, index)
            assert kept.signature() == before, (text, index)  # the original fed on, the copy not


def test_a_signature_is_the_one_a_fresh_reader_gives() -> None:
    """A scope's key is kept until the scope changes (`_mut` drops it): at every character of
    gold queries, the signature of a reader fed on (its scopes changed in place) equals that
    of a reader that read the same text from the start."""
    queries = [e for e in _gold() if " JOIN " in e["query"].upper() or "(" in e["query"]][:20]
    for entry in queries:
        text, schema = entry["query"], SqlSchema(_tables(entry["db_id"]), FUNCTIONS)
        scope = SqlScope(schema)
        for index, ch in enumerate(text):
            scope.signature()  # keys kept, then changed by the next character
            assert scope.feed(ch), (text, index)
            fresh = SqlScope(schema)
            assert fresh.feed(text[:index + 1])
            assert scope.signature() == fresh.signature(), (text, index)


@pytest.mark.slow
def test_every_gold_query_accepted_token_by_token(xgr_compiler: Any) -> None:
    refused = []
    for example in _gold():
        matcher = _compiled(xgr_compiler, example["db_id"]).matcher()
        tokens = xgr_compiler.encode(example["query"])
        if matcher.validate(tokens) != len(tokens) or not (matcher.accept_text(example["query"])
                                                          and matcher.can_stop()):
            refused.append(example["query"])
    assert not refused, refused[:3]


@pytest.mark.parametrize("db,query,prefix", REFUSED)
def test_refused_at_the_token_that_names_the_wrong_column(xgr_compiler: Any, db: str, query: str,
                                                          prefix: str) -> None:
    compiled = _compiled(xgr_compiler, db)
    tokens = xgr_compiler.encode(query)
    matcher = compiled.matcher()
    accepted = matcher.validate(tokens)
    assert accepted < len(tokens)
    text_before = xgr_compiler.tokenizer.decode(tokens[:accepted])
    text_with = xgr_compiler.tokenizer.decode(tokens[: accepted + 1])
    cut = query.index(prefix) + len(prefix)
    assert len(text_before) < cut <= len(text_with), (text_before, text_with)
    # the plain grammar accepts it all: the scope layer is what refuses
    assert matcher.inner.validate(tokens) == len(tokens)  # type: ignore[attr-defined]
    assert matcher.accept_text(text_before)
    bitmask = xgr_compiler.allocate_bitmask(1)
    matcher.fill_mask(bitmask, 0)
    assert not unpack_bitmask(bitmask, bitmask.shape[1] * 32)[0, tokens[accepted]]


def _mask_vs_reading(matcher: Any, bitmask: torch.Tensor, vocab_size: int) -> list[int]:
    """Tokens where the mask and the token-by-token reading disagree (grammar-allowed ones)."""
    matcher.fill_mask(bitmask, 0)
    scoped = unpack_bitmask(bitmask[0:1], vocab_size)[0]
    matcher.inner.fill_mask(bitmask, 1)
    grammar = unpack_bitmask(bitmask[1:2], vocab_size)[0]
    assert not bool((scoped & ~grammar).any())
    wrong = []
    for token in torch.nonzero(grammar).flatten().tolist():
        if token in matcher.stop_token_ids:
            expected = matcher.can_stop()
        else:
            expected = matcher._reads(matcher._states[-1], token) is not None
        if bool(scoped[token]) != expected:
            wrong.append(token)
    return wrong


@pytest.mark.slow
def test_mask_equals_token_by_token_reading(xgr_compiler: Any) -> None:
    rng = random.Random(0)
    bitmask = xgr_compiler.allocate_bitmask(2)
    vocab_size = xgr_compiler.vocab_size
    checked = 0
    for db, query, _ in REFUSED[:3]:
        matcher = _compiled(xgr_compiler, db).matcher()
        tokens = xgr_compiler.encode(query)
        accepted = matcher.validate(tokens)
        for position in sorted(rng.sample(range(accepted + 1), 3)):
            matcher.rollback(matcher.num_accepted)
            assert all(matcher.accept_token(t) for t in tokens[:position])
            assert _mask_vs_reading(matcher, bitmask, vocab_size) == []
            checked += 1
    assert checked == 9


@pytest.mark.parametrize("prefix", [
    'SELECT "_".Year FROM stadium AS',  # the alias "_" must have Year: stadium has none
    'SELECT "_".Year FROM stadium',
    'SELECT T1.Name FROM stadium AS T1 JOIN concert AS "_" ON',
    'SELECT "T1".Name FROM "stadium" AS "T1" WHERE "T1".Capacity =',
    'SELECT T1.',  # a column, `*` or a quoted column (its text not read) may follow
    'SELECT T1.Name FROM stadium AS T1 WHERE T1.',
    'SELECT T1.Name FROM stadium AS T1 WHERE',  # ` [T1`, `(\`Cap`: read as typed
    'SELECT T1.Name FROM stadium AS T1 WHERE T1.Capacity = (',
])
def test_mask_reads_quoted_names_where_their_text_matters(xgr_compiler: Any, prefix: str) -> None:
    # ` "_"` and ` ""` share an opaque shape; in an alias slot only ` ""` fits, so a mask that
    # let one reading decide both (SqlScope.touched ignored) disagrees here
    matcher = _compiled(xgr_compiler, "concert_singer").matcher()
    assert all(matcher.accept_token(t) for t in xgr_compiler.encode(prefix))
    assert _mask_vs_reading(matcher, xgr_compiler.allocate_bitmask(2), xgr_compiler.vocab_size) == []


@pytest.mark.parametrize("prefix", [
    "SELECT Name FROM singer WHERE Country = 'Fra",  # a string: its text is never read
    "SELECT Name FROM singer WHERE Country = 'it''",  # a doubled quote: the literal goes on
    'SELECT Name FROM singer WHERE Country = "Fra',  # an opaque literal (Spider's strings)
    'SELECT "T1".Name FROM singer AS "T',  # a name in FROM: its text is read at the quote
    'SELECT "_".Name FROM singer AS "_" JOIN concert AS "',  # `_"` refused (bound), `"` not
    'SELECT "T1".Name FROM singer AS T1 WHERE "T',  # a qualifier: read when "." follows
    "SELECT T1.Name FROM singer AS `T",
    "SELECT T1.Name FROM singer AS [T",
    "SELECT T1.`Na",  # a qualified column, quoted: the grammar's names, the reader's operand
    'SELECT T1.Name FROM singer AS T1 WHERE T1."Ag',
    "SELECT T1.Name FROM singer AS T1 WHERE [T",  # checked as typed: a name in scope
    "SELECT T1.Name FROM singer AS T1 WHERE [t1",  # ... closing on it, then `.`
    "SELECT T1.Name FROM singer AS T1 WHERE `Na",  # ... or a column of the schema
])
def test_mask_inside_a_literal_equals_token_by_token_reading(xgr_compiler: Any, prefix: str) -> None:
    # inside a literal, tokens that close it are read once per shape of their text after
    # the closer (the text before it only extends the literal), or one by one where the
    # reading consults the closed name; a key that dropped the text after the closer, or
    # read a consulted name once for all, disagrees here
    matcher = _compiled(xgr_compiler, "concert_singer").matcher()
    assert all(matcher.accept_token(t) for t in xgr_compiler.encode(prefix))
    assert matcher._states[-1].mode  # the position is inside the literal
    assert _mask_vs_reading(matcher, xgr_compiler.allocate_bitmask(2), xgr_compiler.vocab_size) == []


def test_recorded_verdicts_equal_readings_beyond_the_filled_mask(xgr_compiler: Any) -> None:
    """A signature table records one reading's verdict for every token with its reading key,
    also tokens the grammar did not allow at that fill, and another matcher of the grammar
    reuses it: at every position of a query walked after another one (shared tables), each
    recorded verdict (a sample of them) equals the token-by-token reading."""
    from grammars.sql.mask.matcher import _token_ids

    db, query, _ = REFUSED[0]
    compiled = _compiled(xgr_compiler, db)
    bitmask = xgr_compiler.allocate_bitmask(1)
    warm = compiled.matcher()
    for token in xgr_compiler.encode(query.replace("T2.Average", "T1.Capacity")):
        warm.fill_mask(bitmask, 0)
        assert warm.accept_token(token)
    rng = random.Random(2)
    matcher = compiled.matcher()
    recorded = beyond = 0
    for token in xgr_compiler.encode('SELECT "T1".Name, count(*) FROM stadium AS "T1" WHERE '
                                     "T1.Capacity > 10 AND T1.Name = 'a' GROUP BY T1.Name"):
        matcher.fill_mask(bitmask, 0)
        matcher.inner.fill_mask(bitmask, 0)
        grammar = set(torch.nonzero(unpack_bitmask(bitmask, xgr_compiler.vocab_size)[0]).flatten().tolist())
        table = matcher._table(matcher._states[-1])
        decided = [t for t in _token_ids(table.decided).tolist() if t not in matcher.stop_token_ids]
        refused = set(_token_ids(table.refused).tolist())
        for t in rng.sample(decided, min(len(decided), 300)):
            assert (matcher._reads(matcher._states[-1], t) is not None) == (t not in refused), \
                (matcher.vocab.text[t], xgr_compiler.tokenizer.decode(matcher._history))
            recorded += 1
            beyond += t not in grammar
        assert matcher.accept_token(token)
    assert recorded > 1000 and beyond > 100  # verdicts checked past what the grammar allowed


def test_signature_tables_and_keep_rows_are_bounded_and_evicting_one_changes_no_mask(xgr_compiler: Any,
                                                                      monkeypatch: Any) -> None:
    import grammars.sql.mask.matcher as scope_matcher

    db, query, _ = REFUSED[1]
    compiled = _compiled(xgr_compiler, db)
    tokens = xgr_compiler.encode(query)
    bitmask = xgr_compiler.allocate_bitmask(1)

    def walk() -> list[torch.Tensor]:
        matcher = compiled.matcher()
        masks = []
        for token in tokens:
            matcher.fill_mask(bitmask, 0)
            masks.append(bitmask[0].clone())
            assert len(matcher._memo) <= scope_matcher._TABLES
            assert len(matcher._index.keeps) <= scope_matcher._KEEPS
            matcher.accept_token(token)
        return masks

    compiled.matcher().forget()
    unbounded = walk()
    compiled.matcher().forget()
    monkeypatch.setattr(scope_matcher, "_TABLES", 3)
    monkeypatch.setattr(scope_matcher, "_KEEPS", 2)  # `keep` rows shared by inputs: dropped and made again
    compiled.matcher()._index.keeps.clear()
    assert all(torch.equal(a, b) for a, b in zip(walk(), unbounded, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(walk(), unbounded, strict=True))  # a second walk: evicted tables


def test_opaque_shape_drops_quoted_names_but_qualifiers() -> None:
    assert opaque_shape(' "-"') == ' ""'
    assert opaque_shape('("x");') == '("");'
    assert opaque_shape('[a].b [c]') == '[a].b []'
    assert opaque_shape('"x".') == '"x".'
    assert opaque_shape("''=") == "''="
    assert opaque_shape('"') == '"'


def test_fill_masks_and_rollback_are_exact(xgr_compiler: Any) -> None:
    db, query, _ = REFUSED[0]
    good = query.replace("T2.Average", "T1.Capacity")
    matcher = _compiled(xgr_compiler, db).matcher()
    tokens = xgr_compiler.encode(good)
    bitmask = xgr_compiler.allocate_bitmask(5)
    single = xgr_compiler.allocate_bitmask(1)
    for index in range(0, len(tokens) - 4, 3):
        rows = matcher.fill_masks(bitmask, tokens[index : index + 4])
        assert rows == 5
        for row in range(5):
            matcher.fill_mask(single, 0)
            assert torch.equal(bitmask[row], single[0])
            if row < 4:
                assert matcher.accept_token(tokens[index + row])
        matcher.rollback(4)
        for token in tokens[index : index + 3]:
            assert matcher.accept_token(token)
    assert matcher.validate(tokens[matcher.num_accepted:]) == len(tokens) - matcher.num_accepted


# sqlite refusals the scope layer does not try to prevent (ambiguity, aggregate placement)
_OUT_OF_SCOPE = ("ambiguous column name", "misuse of aggregate", "aggregate functions are not allowed",
                 "a GROUP BY clause is required")


@pytest.mark.slow
def test_random_walks_under_the_mask_run_on_sqlite(xgr_compiler: Any) -> None:
    """Seeded random walks over the mask, ending as soon as the grammar may stop (biased to
    short SQL): every completed walk is accepted by sqlite, or refused for a reason outside
    the layer's rules (listed above)."""
    db = "concert_singer"
    tables = _tables(db)
    compiled = _compiled(xgr_compiler, db)
    vocab_size = xgr_compiler.vocab_size
    bitmask = xgr_compiler.allocate_bitmask(1)
    rng = random.Random(1)
    seed_prefixes = ["SELECT T1.", "SELECT T2.", "SELECT count(*) FROM ", "SELECT name FROM ", "SELECT "]
    completed = refused = 0
    for walk in range(24):
        matcher = compiled.matcher()
        assert matcher.accept_text(seed_prefixes[walk % len(seed_prefixes)])
        for _ in range(40):
            if matcher.can_stop() and rng.random() < 0.5:
                break
            matcher.fill_mask(bitmask, 0)
            allowed = torch.nonzero(unpack_bitmask(bitmask, vocab_size)[0]).flatten().tolist()
            allowed = [t for t in allowed if t not in matcher.stop_token_ids]
            assert allowed or matcher.can_stop()  # never a dead end
            if not allowed:
                break
            short = [t for t in allowed if len(matcher.vocab.text[t].strip()) <= 6] or allowed
            assert matcher.accept_token(rng.choice(short))
        if not matcher.can_stop():
            continue
        completed += 1
        text = xgr_compiler.tokenizer.decode(matcher._history)
        verdict = check_sql(text, tables)
        if not verdict.valid:
            assert verdict.error and any(m in verdict.error for m in _OUT_OF_SCOPE), (text, verdict)
            refused += 1
    assert completed >= 5
