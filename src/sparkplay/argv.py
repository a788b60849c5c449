"""An engine's argument list read as its parser reads it: `--f v`, `--f=v`, switches, nargs="+" lists.

The one reading of flags every part shares (the importers, the engines' own rules, the plans, admission);
it never changes a value.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from typing import TypeVar

from sparkplay.errors import BadInput

T = TypeVar("T", int, float)


def flag_value(args: Sequence[str], *names: str) -> str | None:
    """The last value given for any of `names` (`--f v` or `--f=v`), else None."""
    found: str | None = None
    for i, token in enumerate(args):
        for name in names:
            if token == name and i + 1 < len(args) and not is_flag(args[i + 1]):
                found = args[i + 1]
            elif token.startswith(name + "="):
                found = token[len(name) + 1 :]
    return found


def flag_values(args: Sequence[str], *names: str) -> list[str]:
    """Every value the last of `names` was given (`--f a b c`, as an nargs="+" option reads it)."""
    found: list[str] = []
    for i, token in enumerate(args):
        if token in names:
            found = list(itertools.takewhile(lambda t: not is_flag(t), args[i + 1 :]))
        elif token.split("=", 1)[0] in names and "=" in token:
            found = [token.split("=", 1)[1]]
    return found


def has_flag(args: Sequence[str], *names: str) -> bool:
    return any(token in names or token.split("=", 1)[0] in names for token in args)


def without_flags(args: Sequence[str], *names: str) -> list[str]:
    """`args` minus every `--f v` / `--f=v` / switch `--f` for the given names, all else in order."""
    kept: list[str] = []
    skip = False
    for i, token in enumerate(args):
        if skip:
            skip = False
            continue
        if token in names:
            skip = i + 1 < len(args) and not is_flag(args[i + 1])
            continue
        if token.split("=", 1)[0] in names and "=" in token:
            continue
        kept.append(token)
    return kept


def with_flag(args: Sequence[str], name: str, value: str) -> list[str]:
    """`args` with `name` set to `value`: its first occurrence changed in place, later ones dropped, else added."""
    if not has_flag(args, name):
        return [*args, name, value]
    first = next(i for i, token in enumerate(args) if token == name or token.startswith(name + "="))
    rest = without_flags(args[first:], name)
    return [*args[:first], name, value, *rest]


def is_flag(token: str) -> bool:
    # "-1" or "-0.5" are values, not flags
    return token.startswith("-") and not re.match(r"^-\d", token)


def flag_map(args: Sequence[str]) -> dict[str, str | None]:
    """Flags to their values (None for a switch), for diffs; positional tokens are keyed by index."""
    result: dict[str, str | None] = {}
    i = 0
    while i < len(args):
        token = args[i]
        if is_flag(token):
            if "=" in token:
                name, value = token.split("=", 1)
                result[name] = value
            elif i + 1 < len(args) and not is_flag(args[i + 1]):
                result[token] = args[i + 1]
                i += 1
            else:
                result[token] = None
        else:
            result[f"#{i}"] = token
        i += 1
    return result


def whole(value: str | None, flag: str) -> int | None:
    """A flag's integer value (None: not given); a value the engine would refuse is refused, naming the flag."""
    return _read(value, flag, int, "a whole number")


def number(value: str | None, flag: str) -> float | None:
    """A flag's numeric value (None: not given), refused like whole's."""
    return _read(value, flag, float, "a number")


def _read(value: str | None, flag: str, kind: Callable[[str], T], what: str) -> T | None:
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        word = "non-integer" if kind is int else "non-numeric"
        raise BadInput(f"{flag} has a {word} value {value!r}", f"give {flag} {what}") from None
