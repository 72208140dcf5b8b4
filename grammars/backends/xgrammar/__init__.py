"""The xgrammar backend (`backend`) and its front end for grammar text (`grammar_text`: the
GBNF / Lark spellings xgrammar's parser does not take).

Importing this package imports nothing (xgrammar is imported by `backend` alone).
"""
