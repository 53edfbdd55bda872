"""The machinery of the run config (training.config): fields with checks, the Section base that builds a frozen
dataclass from a TOML table and runs every check, the coercion of TOML values to field types, `--set` parsing.

A bad key or value raises ConfigError(<dotted key>, <message>).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import tomllib
import types
import typing
from dataclasses import field
from typing import Any, Callable, ClassVar

from training.errors import ConfigError

# A check returns None when the value is fine, else a message, or (sub-key, message) for a part of the value.
Check = Callable[[Any], "str | tuple[str, str] | None"]


def setting(default: Any, check: Check | None = None) -> Any:
    """A config field: its default and its check."""
    if isinstance(default, dict):
        return field(default_factory=lambda: copy.deepcopy(default), metadata={"check": check})
    return field(default=default, metadata={"check": check})


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def at_least(lo, message: str | None = None) -> Check:
    return lambda v: None if v >= lo else (message or f"must be >= {lo}")


def between(lo, hi, message: str, *, open_hi: bool = False) -> Check:
    return lambda v: None if lo <= v and (v < hi if open_hi else v <= hi) else message


def one_of(*choices: str, what: str) -> Check:
    return lambda v: None if v in choices else f"unknown {what} {v!r} ({', '.join(choices)})"


positive_int = at_least(1, "must be a positive integer")
nonneg_int = at_least(0, "must be an integer >= 0")
positive = (lambda v: None if v > 0 else "must be > 0")
nonneg = at_least(0)


# ---------------------------------------------------------------------------------------------- sections
class Section:
    """Base of every section: builds from a dict, runs the field checks, then the cross-field `check()`."""

    KEY: ClassVar[str] = ""  # dotted key of the section, e.g. "model.moe"

    def __post_init__(self):
        for f in dataclasses.fields(self):
            check, value = f.metadata.get("check"), getattr(self, f.name)
            problem = check(value) if check is not None and value is not None else None
            if problem:
                sub, message = problem if isinstance(problem, tuple) else ("", problem)
                raise ConfigError(".".join(p for p in (self.KEY, f.name, sub) if p), message)
        self.check()

    def check(self) -> None:
        """Rules between fields; raises ConfigError."""

    @classmethod
    def from_dict(cls, raw: Any, key: str | None = None):
        """Build from a parsed TOML table, rejecting unknown keys and wrongly typed values."""
        key = cls.KEY if key is None else key
        if not isinstance(raw, dict):
            raise ConfigError(key, "must be a table")
        hints = typing.get_type_hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        kwargs = {}
        for k, v in raw.items():
            sub = f"{key}.{k}" if key else k
            if k not in names:
                raise ConfigError(sub, f"unknown {'key' if key else 'table'} (known: {', '.join(names)})")
            kwargs[k] = _coerce(v, hints[k], sub)
        return cls(**kwargs)


def _coerce(v: Any, hint: Any, key: str) -> Any:
    """A TOML value to the field's type (int -> float, list -> tuple, "none" -> None for optional fields)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):  # `X | None`: TOML has no null, so "none" spells it
        inner = next(a for a in args if a is not type(None))
        if v is None or (isinstance(v, str) and v.lower() == "none"):
            return None
        return _coerce(v, inner, key)
    if isinstance(hint, type) and issubclass(hint, Section):
        return hint.from_dict(v, key)
    if hint is bool and not isinstance(v, bool):
        raise ConfigError(key, f"must be true or false, got {v!r}")
    if hint is int and not _is_int(v):
        raise ConfigError(key, f"must be an integer, got {v!r}")
    if hint is float:
        if not _is_num(v):
            raise ConfigError(key, f"must be a number, got {v!r}")
        return float(v)
    if hint is str and not isinstance(v, str):
        raise ConfigError(key, f"must be a string, got {v!r}")
    if origin is tuple:
        if not isinstance(v, (list, tuple)):
            raise ConfigError(key, f"must be a list, got {v!r}")
        return tuple(_coerce(x, args[0], f"{key}[{i}]") for i, x in enumerate(v))
    if origin is dict:
        if not isinstance(v, dict):
            raise ConfigError(key, f"must be a table, got {v!r}")
        return {str(k): _coerce(x, args[1], f"{key}.{k}") for k, x in v.items()}
    return v


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def parse_override(text: str) -> tuple[str, Any]:
    """`section.key=value` (the value a TOML scalar or array; a bare word is a string) -> (dotted key, value)."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or "." not in key:
        raise ConfigError(key or text, "an override is section.key=value, e.g. train.lr=3e-4")
    try:
        return key, tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        return key, value.strip()
