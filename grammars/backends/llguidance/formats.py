"""String formats as regular expressions, for a backend that does not implement them.

Contract: `formats_as_patterns(schema, formats)` returns a copy of `schema` (the input is not
modified) where every string `format` named in `formats` that `FORMAT_PATTERNS` spells is
replaced by that pattern (anchored, whole string): as `pattern` where the subschema has none,
otherwise as one more `allOf` member `{"pattern": …}`, so both hold. Other formats are left
as they are.

`FORMAT_PATTERNS` spells the four formats grammars.json.policy enforces that llguidance
ignores (it implements date, time, date-time, duration, email, hostname, ipv4, ipv6, uuid
and uri):
- `uri-reference`: RFC 3986 URI-reference (IP literals are checked for their characters);
- `uri-template`: RFC 6570 expressions; as the `uri-template` checker python-jsonschema
  uses, literals are any text without braces, `,` / `,+` are operators and an expression
  may end in a joiner;
- `json-pointer` (RFC 6901) and `relative-json-pointer`.
Each pattern is tested against python-jsonschema's format checkers (rfc3986-validator,
uri-template) on valid and malformed samples.

Knows nothing of backends, tokenizers or compilation.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from grammars.json.policy import iter_subschemas

_HEX2 = r"%[0-9A-Fa-f]{2}"
_PCHAR = rf"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|{_HEX2})"
_SEGMENT = rf"{_PCHAR}*"
_SEGMENT_NZ = rf"{_PCHAR}+"
_SEGMENT_NZ_NC = rf"(?:[A-Za-z0-9\-._~!$&'()*+,;=@]|{_HEX2})+"
_USERINFO = rf"(?:[A-Za-z0-9\-._~!$&'()*+,;=:]|{_HEX2})*@"
_HOST = (rf"(?:\[[0-9A-Fa-f:.]+\]|\[v[0-9A-Fa-f]+\.[A-Za-z0-9\-._~!$&'()*+,;=:]+\]"
         rf"|(?:[A-Za-z0-9\-._~!$&'()*+,;=]|{_HEX2})*)")
_AUTHORITY = rf"(?:{_USERINFO})?{_HOST}(?::[0-9]*)?"
_PATH_ABEMPTY = rf"(?:/{_SEGMENT})*"
_PATH_ABSOLUTE = rf"/(?:{_SEGMENT_NZ}(?:/{_SEGMENT})*)?"
_QUERY_FRAGMENT = rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
_URI = (rf"[A-Za-z][A-Za-z0-9+\-.]*:(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}"
        rf"|{_SEGMENT_NZ}(?:/{_SEGMENT})*)?")
_RELATIVE = (rf"(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}"
             rf"|{_SEGMENT_NZ_NC}(?:/{_SEGMENT})*)?")

_LITERAL = r"[^{}]"
_VARCHAR = rf"(?:[A-Za-z0-9_]|{_HEX2})"
_VARSPEC = rf"{_VARCHAR}(?:\.?{_VARCHAR})*(?::[1-9][0-9]{{0,3}}|\*)?"
_EXPRESSION = rf"\{{(?:[+#./;?&]|,\+?)?{_VARSPEC}(?:,{_VARSPEC})*[,./;&]?\}}"
_POINTER = r"(?:/(?:[^~/]|~[01])*)*"

FORMAT_PATTERNS: dict[str, str] = {
    "uri-reference": rf"^(?:{_URI}|{_RELATIVE}){_QUERY_FRAGMENT}$",
    "uri-template": rf"^(?:{_LITERAL}|{_EXPRESSION})*$",
    "json-pointer": rf"^{_POINTER}$",
    "relative-json-pointer": rf"^(?:0|[1-9][0-9]*)(?:#|{_POINTER})$",
}


def formats_as_patterns(schema: Any, formats: Iterable[str]) -> Any:
    wanted = {name: FORMAT_PATTERNS[name] for name in formats if name in FORMAT_PATTERNS}
    if not isinstance(schema, dict) or not wanted:
        return schema
    root = json.loads(json.dumps(schema))
    for _, sub in iter_subschemas(root):
        fmt = sub.get("format")
        pattern = wanted.get(fmt) if isinstance(fmt, str) else None
        if pattern is None:
            continue
        del sub["format"]
        if "pattern" in sub:
            members = sub.setdefault("allOf", [])
            if isinstance(members, list):
                members.append({"pattern": pattern})
        else:
            sub["pattern"] = pattern
    return root
