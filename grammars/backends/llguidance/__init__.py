"""The llguidance backend (`backend`) and the schema rewrites only it needs: objects closed
where no `strict_mode` does it (`closure`), string formats as patterns (`formats`), member
orders as parametric rules (`object_rules`), keywords beside a `$ref` resolved before it sees
them (`ref_siblings`), sliceable twins of search patterns (`search_strings`).

Importing this package imports nothing (llguidance is imported by `backend` alone).
"""
