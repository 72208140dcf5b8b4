"""SQL (sqlite): the language, apart from the speed layer of its mask (`grammars.sql.mask`).

Modules: `grammar` (one SELECT statement as a grammar, generic or restricted to a schema),
`scope` (`SqlScope`: identifier scopes read one character at a time), `glue` (the glued-alias
rule), `check` (sqlite's verdict on an answer), `options` (the answer policy of a request).
Importing this package imports nothing.
"""
