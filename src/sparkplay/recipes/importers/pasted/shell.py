"""Pasted shell text read as POSIX sh/bash would read it, and never run.

A command line, a launcher script or a page's code blocks are read into
statements: words split and quoted as the shell splits them, variables
expanded from the text's own assignments (`MODEL=...`, `ARGS=(...)`,
`${PORT:-8000}`), redirections dropped. Nothing is executed: a command
substitution, a variable the text never sets, or a parameter form beyond
plain expansion stays UNKNOWN, and whoever uses such a word says so.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkplay.errors import BadInput
from sparkplay.recipes.importers.pasted.shell_eval import Case, glob_escape, matches
from sparkplay.recipes.importers.pasted.shell_vars import Variables
from sparkplay.recipes.importers.pasted.shell_vars import shown as shown  # the readers' one spelling
from sparkplay.recipes.importers.pasted.shell_vars import unknowns as unknowns
from sparkplay.recipes.importers.pasted.shell_words import REDIRECTS, UNKNOWN, Piece, Word, lex

_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_BLOCK_OPEN = {"case": "esac"}
_CONTROL = {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "{", "}", "!", "[[", "]]"}
MAX_TEXT = 1 << 20
MAX_CALLS = 8  # functions called inside functions: deeper than this is not read


@dataclass
class Statement:
    """One simple command: its words expanded, the line it starts on, and what the text did around it."""

    words: list[str]
    line: int
    background: bool = False
    redirected: bool = False
    piped: bool = False
    depth: int = 0  # inside if/while/for bodies


@dataclass
class Script:
    statements: list[Statement]
    control_flow: bool  # if/while/for read straight through, function bodies and unsettled cases skipped
    variables: Variables
    branches: list[str] = field(default_factory=list)  # the cases, functions and sources it read, said
    arguments: list[str] | None = None  # the arguments it was read as run with (None: none)

    def said(self) -> list[str]:
        """How the text was read, for the import's notes."""
        notes = list(self.branches)
        if self.arguments is not None:
            notes.append(f"read as run with the arguments {shlex.join(self.arguments)}")
        elif self.variables.without_arguments:
            notes.append(f"read as run with no arguments: {', '.join(dict.fromkeys(self.variables.without_arguments))}")
        if self.control_flow:
            notes.append(
                "the text has if/while/for/case or functions: sparkplay read its statements in order, without "
                "running its conditions or loops"
            )
        return notes


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
    script = _Reader(variables, origin.load if origin else None).read(_tokens(text))
    script.arguments = origin.arguments if origin else None
    return script


def _tokens(text: str) -> list[tuple[str, Word | str, int]]:
    if len(text) > MAX_TEXT:
        raise BadInput("the text is larger than 1 MiB", "a command or script is small; check the input")
    return list(lex(text.replace("\r\n", "\n")))  # a file saved on Windows: its line ends are the same lines


def _one_command(text: str, outer: Variables) -> list[str] | None:
    """The words of a command substitution's text when it is one simple command (no pipe, no redirect), in a
    copy of the shell's state; `cd DIR && pwd` is the folder it names (`$(cd "$(dirname "$0")" && pwd)`)."""
    variables = outer.copy()
    inner = _Reader(variables, None).read(_tokens(text)).statements
    if len(inner) == 2 and inner[0].words[:1] == ["cd"] and inner[1].words == ["pwd"]:
        return ["echo", variables.cwd] if variables.cwd else None
    return inner[0].words if len(inner) == 1 and not (inner[0].piped or inner[0].redirected) else None


class _Reader:
    """Tokens to statements: words gather until an operator ends the command; blocks that run only when
    called (functions) or depend on a condition are skipped or marked; assignments are kept as they come."""

    def __init__(self, variables: Variables, load: Callable[[str], tuple[str, str] | None] | None) -> None:
        self.variables = variables
        self.load = load
        self.statements: list[Statement] = []
        self.control = False  # the text has conditions, loops or functions: not one straight line
        self.words: list[Word] = []
        self.skip_until: list[str] = []  # the words that close the blocks being skipped
        self.depth = 0  # how many conditions or loops a statement sits in
        self.start_line = 1
        self.redirected = self.piped = False
        self.cases: list[Case] = []
        self.branches: list[str] = []
        self.functions: dict[str, list[tuple[str, Word | str, int]]] = {}
        self.calls = 0  # how many function bodies are being read inside each other (bounded)

    def read(self, items: list[tuple[str, Word | str, int]]) -> Script:
        self._feed(items)
        self.piped = False
        self.end("\n")
        return Script(self.statements, self.control, self.variables, self.branches)

    def _feed(self, items: list[tuple[str, Word | str, int]]) -> None:
        after_redirect = False
        at = 0
        while at < len(items):
            _, item, line = items[at]
            at += 1
            if self.cases and not self.skip_until and self._case(item):
                continue
            if not self.skip_until and (after := self._definition(items, at - 1)) is not None:
                at = after  # name() { ... }: its body is read where the text calls it
                continue
            if item == "(" and len(self.words) == 1 and at < len(items) and items[at][1] == ")":
                self.words = []  # a function of another form (a subshell body): never read
                self.skip_until.append("}")
                self.control = True
                continue
            if isinstance(item, Word):
                if after_redirect:
                    after_redirect = False
                    continue
                if not self.words:
                    self.start_line = line
                self.words.append(item)
                if len(self.words) == 3 and self.words[0].raw() == "case" and item.raw() == "in":
                    self.end("\n")  # `case WORD in pattern) ...` on one line: the patterns follow
                continue
            if item in REDIRECTS:
                self.redirected = True
                after_redirect = item != "<<"  # a here-document's delimiter was read with it
                continue
            if item in ("(", ")", ";;"):
                self.end(";")
                continue
            self.piped = item in ("|", "|&")
            self.end(item)

    def _definition(self, items: list[tuple[str, Word | str, int]], at: int) -> int | None:
        """At `name() {`, `function name {` or `function name() {`: the body kept under its name, and the index
        after its closing `}`; else None."""
        item = items[at][1]
        if item == "(" and len(self.words) == 1 and at + 1 < len(items) and items[at + 1][1] == ")":
            name, i = self.words[0].raw(), at + 2
        elif isinstance(item, Word) and item.raw() == "function" and not self.words and at + 1 < len(items):
            name, i = str(items[at + 1][1].raw()) if isinstance(items[at + 1][1], Word) else "", at + 2
            i += 2 if items[i : i + 2] and [t[1] for t in items[i : i + 2]] == ["(", ")"] else 0
        else:
            return None
        while i < len(items) and items[i][1] == "\n":
            i += 1
        if not name or i >= len(items) or not isinstance(items[i][1], Word) or items[i][1].raw() != "{":
            return None
        depth, start = 0, True
        for j in range(i, len(items)):
            token = items[j][1]
            if isinstance(token, Word):
                depth += start and token.raw() == "{"
                depth -= start and token.raw() == "}"
                if depth == 0:
                    self.functions[name], self.words, self.control = items[i + 1 : j], [], True
                    return j + 1
                start = token.raw() in _CONTROL
            else:
                start = token not in REDIRECTS
        return None

    def _source(self, path: str, arguments: list[str]) -> bool:
        """`source FILE` of a file the origin may read: its text read here, as bash runs it in this shell."""
        full = _resolved(self.variables.cwd, path)
        loaded = self.load(full) if self.load and full and self.calls < MAX_CALLS else None
        if loaded is None:
            return False
        text, named = loaded
        sources = self.variables.arrays.get("BASH_SOURCE", [])
        saved = (self.words, self.start_line, self.redirected, self.piped, self.variables.positional, sources)
        self.words, self.redirected, self.piped = [], False, False
        self.variables.positional = arguments or self.variables.positional
        self.variables.arrays["BASH_SOURCE"] = [full, *sources]
        self.calls += 1
        self._feed(_tokens(text))
        self.end("\n")
        self.calls -= 1
        self.words, self.start_line, self.redirected, self.piped, self.variables.positional, sources = saved
        self.variables.arrays["BASH_SOURCE"] = sources
        self.branches.append(f"read {named} where the text sources it")
        return True

    def _call(self, name: str, arguments: list[str]) -> None:
        """A function the text defined, called: its body read here, its $1... the call's arguments."""
        saved = (self.words, self.start_line, self.redirected, self.piped, self.variables.positional)
        self.words, self.redirected, self.piped, self.variables.positional = [], False, False, arguments
        self.calls += 1
        self._feed(self.functions[name])
        self.end("\n")
        self.calls -= 1
        self.words, self.start_line, self.redirected, self.piped, self.variables.positional = saved
        said = f"the function {name} read where the text calls it"
        self.branches += [said] if said not in self.branches else []

    def _case(self, item: Word | str) -> bool:
        """A token of a settled case's patterns or skipped body, consumed; in a body that runs, its `;;` ends it
        (the tokens between are read as any other)."""
        case = self.cases[-1]
        if case.phase == "run":
            if item in (";;", ";&", ";;&"):
                self.end(";")
                case.phase, case.patterns = "patterns", [""]
                return True
            return False
        starts, case.at_start = case.at_start, not isinstance(item, Word)
        if isinstance(item, Word) and starts and item.raw() == "esac":
            if case.nested:
                case.nested -= 1
            elif case.phase == "patterns" or case.phase == "skip":
                self.cases.pop()
            return True
        if case.phase == "skip":
            case.nested += isinstance(item, Word) and starts and item.raw() == "case"
            if item in (";;", ";&", ";;&") and not case.nested:
                case.phase, case.patterns = "patterns", [""]
            return True
        if isinstance(item, Word):  # a quoted part matches itself; an unquoted one is a glob
            case.patterns[-1] += "".join(
                glob_escape(self.variables.text(Word([p]))) if p.quoted else self.variables.text(Word([p]))
                for p in item.pieces
            )
        elif item == "|":
            case.patterns.append("")
        elif item == ")":
            hit = next((p for p in case.patterns if matches(case.subject, p)), None)
            case.phase = "run" if hit is not None and not case.taken else "skip"
            if case.phase == "run":
                case.taken, case.at_start = True, True
                self.branches.append(f"its case on {case.subject!r} took the branch {'|'.join(case.patterns)})")
        return True

    def end(self, op: str) -> None:
        """The command gathered so far ends at `op`: a block's opening or closing word, or a statement."""
        if self.words:
            first = self.words[0].raw()
            if self.skip_until:
                if first == self.skip_until[-1]:
                    self.skip_until.pop()
                elif first in _BLOCK_OPEN:  # a case in a skipped block: its esac is its own
                    self.skip_until.append(_BLOCK_OPEN[first])
            elif first == "esac" and self.cases:  # a running branch's case ends without a `;;`
                self.cases.pop()
            elif first == "case" and (case := self._settled_case()) is not None:
                self.cases.append(case)
            elif first in _BLOCK_OPEN:
                self.skip_until.append(_BLOCK_OPEN[first])
                self.control = True
            elif first == "function":
                self.skip_until.append("}")
                self.control = True
            else:
                self.statement(self.words, op, self.start_line)
        self.words, self.redirected = [], False

    def _settled_case(self) -> Case | None:
        """`case WORD in`, its word known (a script's `${1:-preset}`): matched; else None (skipped)."""
        if len(self.words) != 3 or self.words[2].raw() != "in":
            return None
        subject = self.variables.text(self.words[1])
        return None if UNKNOWN in subject else Case(subject)

    def statement(self, ws: list[Word], op: str, line: int) -> None:
        while ws and ws[0].raw() in _CONTROL:
            keyword = ws.pop(0).raw()
            self.control = True
            if keyword in ("if", "while", "until", "for"):
                self.depth += 1
            elif keyword in ("fi", "done"):
                self.depth = max(0, self.depth - 1)
            if keyword in ("if", "elif", "while", "until", "for"):
                return  # a condition or a loop head: run nothing from it
        assignments = []
        while ws and _ASSIGN.match(ws[0].raw()):
            assignments.append(ws.pop(0))
        if not ws:
            for word in assignments:
                _assign(self.variables, word)
            return
        variables = self.variables
        prefix = [f"{w.raw().split('=', 1)[0].rstrip('+')}={_value(variables, w)}" for w in assignments]
        expanded = [text for word in ws for text in variables.expand(word)]
        if expanded and expanded[0] in ("export", "readonly", "declare", "local", "typeset"):
            for word in ws[1:]:
                if _ASSIGN.match(word.raw()):
                    _assign(variables, word)
            self.statements.append(Statement(expanded, line, depth=self.depth))
            return
        if expanded and expanded[0] in self.functions and not prefix and self.calls < MAX_CALLS:
            self._call(expanded[0], expanded[1:])
            return
        if expanded[:1] == ["cd"]:  # where a relative path leads from here, while the text says it
            self.variables.cwd = _resolved(self.variables.cwd, expanded[1]) if len(expanded) == 2 else None
        if expanded[:1] in (["source"], ["."]) and len(expanded) > 1 and self._source(expanded[1], expanded[2:]):
            return
        argv = [*prefix, *expanded]
        self.statements.append(Statement(argv, line, op == "&", self.redirected, self.piped, self.depth))


def _resolved(cwd: str | None, path: str) -> str | None:
    """A settled path from the folder the text is in (an absolute one as it is); None where that is unknown."""
    if UNKNOWN in path or path in ("", "-", "~") or path.startswith("~"):
        return None
    if path.startswith("/"):
        return posixpath.normpath(path)
    return posixpath.normpath(posixpath.join(cwd, path)) if cwd else None


def _value(variables: Variables, word: Word) -> str:
    """An assignment word's value (NAME=value), expanded without field splitting."""
    m = _ASSIGN.match(word.raw())
    return variables.text(Word(_after(word.pieces, len(m.group(0)) if m else 0)))


def _after(pieces: list[Piece], skip: int) -> list[Piece]:
    """The pieces of a word after its first `skip` characters."""
    out: list[Piece] = []
    for piece in pieces:
        if skip >= len(piece.text):
            skip -= len(piece.text)
            continue
        out.append(Piece(piece.text[skip:], piece.quoted, piece.expand))
        skip = 0
    return out


def _assign(variables: Variables, word: Word) -> None:
    m = _ASSIGN.match(word.raw())
    if m is None:
        return
    name, append = m.group(1), m.group(2) == "+"
    if word.array is not None:
        elements = [f for w in word.array for f in variables.expand(w)]
        variables.arrays[name] = [*variables.arrays.get(name, []), *elements] if append else elements
        variables.scalars.pop(name, None)
        return
    value = _value(variables, word)
    if append:
        value = (variables.value(name) or "") + value
    variables.scalars[name] = value
    variables.arrays.pop(name, None)
