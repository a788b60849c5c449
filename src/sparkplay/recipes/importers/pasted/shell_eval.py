"""What the shell reader evaluates itself, because its result follows from the text alone: a `case` on a settled
word (bash's glob matching, first match wins) and a command substitution of a pure command on settled words
(`$(basename "$MODEL")`, `$(dirname ...)`, `$(echo ...)`). Anything else stays unknown."""

from __future__ import annotations

import fnmatch
import posixpath
import re
from dataclasses import dataclass, field


def glob_escape(text: str) -> str:
    """A text a glob pattern matches only itself with."""
    return re.sub(r"([*?\[])", r"[\1]", text)


@dataclass
class Case:
    """A `case WORD in` whose word is settled: its branches are matched as bash matches them (glob patterns
    in order, the first match's body runs); the others are skipped."""

    subject: str
    phase: str = "patterns"  # reading a branch's patterns, or running or skipping its body
    patterns: list[str] = field(default_factory=lambda: [""])
    taken: bool = False
    nested: int = 0  # cases inside a skipped body: their `;;` and `esac` are theirs
    at_start: bool = True  # the next word starts a command (where `case` and `esac` are keywords)


def matches(subject: str, pattern: str) -> bool:
    """bash's case matching: the whole word against a glob (`*`, `?`, `[...]`, `[!...]` and `[^...]`)."""
    return fnmatch.fnmatchcase(subject, re.sub(r"\[\^", "[!", pattern))


def substituted(words: list[str]) -> str | None:
    """The output of `$(...)` whose one command is pure and whose words are settled, as bash substitutes it
    (trailing newlines gone); None for anything else."""
    if not words:
        return None
    name, args = posixpath.basename(words[0]), words[1:]
    if name in ("basename", "dirname") and args and args[0].startswith("-"):
        return None  # an option (-a, -z, --): not read
    if name == "basename" and 1 <= len(args) <= 2:
        stripped = args[0].rstrip("/")
        if not stripped:
            return "/" if args[0] else ""
        base = stripped.rsplit("/", 1)[-1]
        return (
            base[: -len(args[1])] if len(args) == 2 and args[1] and base.endswith(args[1]) and base != args[1] else base
        )
    if name == "dirname" and len(args) == 1:
        stripped = args[0].rstrip("/")
        if not stripped:
            return "/" if args[0] else "."
        return (stripped.rsplit("/", 1)[0].rstrip("/") or "/") if "/" in stripped else "."
    if name == "echo" and not (args and args[0].startswith("-")):
        return " ".join(args)
    return None
