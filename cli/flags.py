"""Command-line flags generated from `GatewaySettings`: one `--field-name` flag per settings
field, typed from its annotation (a Literal gives choices, a bool takes on/off), with the
field's description and default as help. Flags given override `SPECGATE_*` environment
variables; flags not given leave them alone. This is the only place flags for settings are
spelled, so a new setting is a flag (and an env var) by adding the field.
"""

from __future__ import annotations

import argparse
import types
import typing
from collections.abc import Iterable
from typing import Any

from pydantic import SecretStr
from pydantic_settings import BaseSettings

SHORT_FLAGS = {"k": "-k"}
LEGACY_FLAGS = {"stats_log_interval_s": "--stats-log-interval"}
_BOOL_WORDS = {"on": True, "true": True, "1": True, "yes": True,
               "off": False, "false": False, "0": False, "no": False}


def _parse_bool(text: str) -> bool:
    try:
        return _BOOL_WORDS[text.lower()]
    except KeyError:
        raise argparse.ArgumentTypeError(f"expected on|off, got {text!r}") from None


def _strip_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _argument_kwargs(annotation: Any) -> dict[str, Any]:
    annotation = _strip_optional(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return {"choices": [str(v) for v in typing.get_args(annotation)]}
    if annotation is bool:
        return {"type": _parse_bool, "metavar": "on|off"}
    if annotation in (int, float):
        return {"type": annotation}
    if annotation is SecretStr:
        return {"type": str}
    return {"type": str}


def add_settings_flags(
    parser: argparse.ArgumentParser, settings_cls: type[BaseSettings], *, only: Iterable[str] | None = None
) -> None:
    """Add one flag per settings field (or per field in `only`); unset flags stay absent."""
    wanted = set(only) if only is not None else None
    env_prefix = settings_cls.model_config.get("env_prefix", "")
    for name, info in settings_cls.model_fields.items():
        if wanted is not None and name not in wanted:
            continue
        names = [SHORT_FLAGS[name]] if name in SHORT_FLAGS else []
        names.append("--" + name.replace("_", "-"))
        if name in LEGACY_FLAGS:
            names.append(LEGACY_FLAGS[name])
        default = info.default
        shown = ("on" if default else "off") if isinstance(default, bool) else default
        help_text = f"{info.description or name} (default {shown}; env {env_prefix}{name.upper()})"
        parser.add_argument(*names, dest=name, default=argparse.SUPPRESS, help=help_text,
                            **_argument_kwargs(info.annotation))


def settings_overrides(args: argparse.Namespace, settings_cls: type[BaseSettings]) -> dict[str, Any]:
    """The settings fields the command line gave (for `settings_cls(**overrides)`)."""
    return {name: getattr(args, name) for name in settings_cls.model_fields if hasattr(args, name)}
