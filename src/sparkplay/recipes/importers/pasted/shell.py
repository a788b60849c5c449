"""Pasted shell text read as POSIX sh/bash would read it, and never run.

A command line, a launcher script or a page's code blocks are read into
statements: words split and quoted as the shell splits them, variables
expanded from the text's own assignments (`MODEL=...`, `ARGS=(...)`,
`${PORT:-8000}`), redirections dropped. Nothing is executed: a command
substitution, a variable the text never sets, or a parameter form beyond
plain expansion stays UNKNOWN, and whoever uses such a word says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sparkplay.recipes.importers.pasted.shell_reader import Reader, tokens
from sparkplay.recipes.importers.pasted.shell_reader import Script as Script
from sparkplay.recipes.importers.pasted.shell_reader import Statement as Statement
from sparkplay.recipes.importers.pasted.shell_vars import Variables
from sparkplay.recipes.importers.pasted.shell_vars import shown as shown  # the readers' one spelling
from sparkplay.recipes.importers.pasted.shell_vars import unknowns as unknowns


@dataclass
class Origin:
    """A script read from a file: its path ($0, BASH_SOURCE), the arguments it is run with (None: none, its
    defaults taken and said), and the reader of the files it sources (their text and how to name them, or None
    for one it may not read)."""

    path: str | None
    arguments: list[str] | None = None
    load: Callable[[str], tuple[str, str] | None] | None = None
    used: bool = False  # read as a script (a compose file, a page or a recipe is none)


def read(text: str, given: dict[str, str] | None = None, origin: Origin | None = None) -> Script:
    """Every simple command in the text, in order, expanded with the assignments before it."""
    variables = Variables(given)
    variables.command = _one_command
    if origin is not None:
        origin.used, variables.script, variables.positional = True, origin.path, origin.arguments
        variables.arrays["BASH_SOURCE"] = [origin.path] if origin.path else []
    script = Reader(variables, origin.load if origin else None).read(tokens(text))
    script.arguments = origin.arguments if origin else None
    return script


def _one_command(text: str, outer: Variables) -> list[str] | None:
    """The words of a command substitution's text when it is one simple command (no pipe, no redirect), in a
    copy of the shell's state; `cd DIR && pwd` is the folder it names (`$(cd "$(dirname "$0")" && pwd)`)."""
    variables = outer.copy()
    inner = Reader(variables, None).read(tokens(text)).statements
    if len(inner) == 2 and inner[0].words[:1] == ["cd"] and inner[1].words == ["pwd"]:
        return ["echo", variables.cwd] if variables.cwd else None
    return inner[0].words if len(inner) == 1 and not (inner[0].piped or inner[0].redirected) else None


def program_named(words: list[str]) -> tuple[list[str], tuple[str, str, str] | None]:
    """A program run from a folder the shell supplies (`$HOME/venv/bin/vllm serve ...`): its name alone is what
    says the engine (sparkplay runs the engine in its image, not from that folder), and how that is said."""
    folder, _, name = words[0].rpartition("/") if words else ("", "", "")
    if not unknowns(folder) or unknowns(name) or not name:
        return words, None
    said = f"the program {shown(words[0])} runs from a folder the shell supplies: read as {name}"
    return [name, *words[1:]], ("serve.args", "derived", said)
