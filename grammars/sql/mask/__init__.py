"""The schema-aware SQL mask's speed layer: what makes `SqlScope` cheap enough per token.

Modules: `matcher` (`ScopedSqlMatcher`: the grammar's matcher and a scope reader, one mask),
`vocab` (the vocabulary seen as SQL words, built once per tokenizer), `punct` (punctuation
texts whose verdict a few facts of the state decide), `literal_rows` (one grammar row for
every position inside a string literal). Knows the language only through `grammars.sql`.
Importing this package imports nothing.
"""
