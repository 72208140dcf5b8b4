"""JSON Schema, shared by every backend: the strict-schema policy (`policy`), the whitespace
layout constrained JSON allows (`layout`) and schema algebra (`fold`: combinators folded into
plain schemas, which xgrammar needs and llguidance's rewrites reuse).

Knows JSON Schema and grammar text; knows no backend library. Importing this package imports
nothing.
"""
