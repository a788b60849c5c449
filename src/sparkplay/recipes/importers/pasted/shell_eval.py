"""What the shell reader evaluates itself, because its result follows from the text alone: a test on settled words
(`[ "$X" = 1 ]`, `[ -z "$Y" ]`), a `case` on a settled
word (bash's glob matching, first match wins) and a command substitution of a pure command on settled words
(`$(basename "$MODEL")`, `$(dirname ...)`, `$(echo ...)`). Anything else stays unknown."""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkplay.recipes.importers.pasted.shell_words import REDIRECTS, UNKNOWN, Word

# a command's first words that keep the next word at a command's start
CONTROL = {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "{", "}", "!", "[[", "]]"}


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


@dataclass
class If:
    """An if/elif/else/fi as far as it is read: its condition being read, a branch that runs, one skipped, the
    rest after a branch ran, or (a condition the text cannot settle) every branch read straight through."""

    state: str  # cond, run, skip, done or straight
    straight: bool = False  # an elif of a straight-through if: its branches are read straight through too


def test(words: list[str]) -> bool | None:
    """The status of `[ ... ]`, `[[ ... ]]`, `test ...`, `true`, `false` or `:` on settled words: string tests
    (-z, -n, a word alone, =, ==, !=) and integer ones (-eq ... -ge), `!` first negating; None for anything
    else (a file test, a glob in `[[ == ]]`, -a/-o) or anything unsettled."""
    if not words or any("\ue000" in w for w in words):
        return None
    negate = words[0] == "!"
    words = words[1:] if negate else words
    result = _test(words)
    return None if result is None else result != negate


def _test(words: list[str]) -> bool | None:
    if words in (["true"], [":"]):
        return True
    if words == ["false"]:
        return False
    if words[:1] == ["test"]:
        inner = words[1:]
    elif (words[:1], words[-1:]) in ((["["], ["]"]), (["[["], ["]]"])):
        inner = words[1:-1]
    else:
        return None
    if inner[:1] == ["!"]:
        result = _expression(inner[1:], words[0] == "[[")
        return None if result is None else not result
    return _expression(inner, words[0] == "[[")


def _expression(inner: list[str], double: bool) -> bool | None:
    if len(inner) == 1:
        return inner[0] != ""
    if len(inner) == 2 and inner[0] in ("-z", "-n"):
        return (inner[1] == "") == (inner[0] == "-z")
    if len(inner) != 3:
        return None
    left, op, right = inner
    if op in ("=", "==", "!="):
        if double and re.search(r"[*?\[]", right):
            return None  # [[ x == pattern ]]: a glob whose quoting the words no longer show
        return (left == right) == (op != "!=")
    numeric = {"-eq": 0, "-ne": 1, "-lt": 2, "-le": 3, "-gt": 4, "-ge": 5}
    if op in numeric and re.fullmatch(r"-?\d+", left) and re.fullmatch(r"-?\d+", right):
        a, b = int(left), int(right)
        return (a == b, a != b, a < b, a <= b, a > b, a >= b)[numeric[op]]
    return None


def block(items: list[tuple[str, Word | str, int]], at: int, opening: str, closing: str) -> int | None:
    """The index of the word that closes the block ITEMS[at] opens (`do`...`done`, `{`...`}`), counting the
    blocks inside it by their words where a command starts; None where it is not such a block or never closed."""
    if at >= len(items) or not isinstance(items[at][1], Word) or items[at][1].raw() != opening:
        return None
    depth, start = 0, True
    for j in range(at, len(items)):
        token = items[j][1]
        if isinstance(token, Word):
            depth += start and token.raw() == opening
            depth -= start and token.raw() == closing
            if depth == 0:
                return j
            start = token.raw() in CONTROL
        else:
            start = token not in REDIRECTS
    return None


def places(
    cwd: str | None, script: str | None, path: str, load: Callable[[str], tuple[str, str] | None] | None
) -> tuple[str, tuple[str, str] | None]:
    """A file the text sources, and its text and name as LOAD reads it (None: not read): from the folder the
    text is in; where that is unknown, from its own file's folder, then that folder's parent (a repository whose
    launcher cds to its root before it sources `recipes/x.env`), said as such."""
    full = resolved(cwd, path)
    if full is not None or cwd is not None or not script or path.startswith(("/", "~")) or UNKNOWN in path:
        return full or "", load(full) if load and full else None
    here = posixpath.dirname(script)
    for guess in (resolved(here, path), resolved(posixpath.dirname(here), path)):
        if guess and load and (loaded := load(guess)) is not None:
            text, named = loaded
            return guess, (
                text,
                f"{named} (from the file's folder or its parent: the text does not say which folder it runs in)",
            )
    return "", None


def resolved(cwd: str | None, path: str) -> str | None:
    """A settled path from the folder the text is in (an absolute one as it is); None where that is unknown."""
    if UNKNOWN in path or path in ("", "-", "~") or path.startswith("~"):
        return None
    if path.startswith("/"):
        return posixpath.normpath(path)
    return posixpath.normpath(posixpath.join(cwd, path)) if cwd else None
