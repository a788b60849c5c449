"""Pasted shell text read as POSIX sh/bash would read it, and never run.

A command line, a launcher script or a page's code blocks are read into
statements: words split and quoted as the shell splits them, variables
expanded from the text's own assignments (`MODEL=...`, `ARGS=(...)`,
`${PORT:-8000}`), redirections dropped. Nothing is executed: a command
substitution, a variable the text never sets, or a parameter form beyond
plain expansion stays UNKNOWN, and whoever uses such a word says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from sparkplay.errors import BadInput
from sparkplay.recipes.importers.pasted.shell_eval import Case, glob_escape, matches, substituted
from sparkplay.recipes.importers.pasted.shell_words import REDIRECTS, UNKNOWN, Piece, Word, lex, matching, unknown

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_BLOCK_OPEN = {"case": "esac"}
_CONTROL = {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "{", "}", "!", "[[", "]]"}
MAX_TEXT = 1 << 20


@dataclass
class Statement:
    """One simple command: its words expanded, the line it starts on, and what the text did around it."""

    words: list[str]
    line: int
    background: bool = False
    redirected: bool = False
    piped: bool = False
    depth: int = 0  # inside if/while/for bodies


class Variables:
    """The text's own variables and arrays, as its statements set them in order."""

    def __init__(self, given: dict[str, str] | None = None) -> None:
        self.scalars: dict[str, str] = dict(given or {})
        self.arrays: dict[str, list[str]] = {}
        self.without_arguments: list[str] = []  # the arguments read as absent, and what that made of them

    def value(self, name: str) -> str | None:
        if name in self.arrays:
            return self.arrays[name][0] if self.arrays[name] else ""
        return self.scalars.get(name)

    def expand(self, word: Word) -> list[str]:
        """The fields a word becomes: unquoted expansions split on blanks, empty unquoted ones gone."""
        fields: list[str] = []
        current, started = "", False
        for piece in word.pieces:
            for text, split, whole_array in self._pieces(piece):
                if whole_array is not None:  # "${A[@]}": one field per element
                    if whole_array:
                        current += whole_array[0]
                        fields.extend([current, *whole_array[1:-1]] if len(whole_array) > 1 else [])
                        current = whole_array[-1] if len(whole_array) > 1 else current
                        started = True
                    continue
                if not split:
                    current += text
                    started = started or piece.quoted or bool(text)
                    continue
                parts = text.split()
                if not parts:
                    if text and started:
                        fields.append(current)
                        current, started = "", False
                    continue
                if text[:1].isspace() and started:
                    fields.append(current)
                    current = ""
                current += parts[0]
                for part in parts[1:]:
                    fields.append(current)
                    current = part
                started = True
                if text[-1:].isspace():
                    fields.append(current)
                    current, started = "", False
        if started:
            fields.append(current)
        return fields

    def text(self, word: Word) -> str:
        """A word expanded without field splitting (an assignment's value)."""
        out = []
        for piece in word.pieces:
            for text, _, whole in self._pieces(piece):
                out.append(" ".join(whole) if whole is not None else text)
        return "".join(out)

    def _pieces(self, piece: Piece) -> Iterator[tuple[str, bool, list[str] | None]]:
        """(text, split it, array elements) for each part of a piece."""
        if not piece.expand or "$" not in piece.text:
            yield piece.text, False, None
            return
        i, text, literal = 0, piece.text, []
        while i < len(text):
            if text[i] != "$" or i + 1 >= len(text):
                literal.append(text[i])
                i += 1
                continue
            if literal:
                yield "".join(literal), False, None
                literal = []
            end, value, array = self._dollar(text, i)
            if array is not None and piece.quoted:
                yield "", False, array
            else:
                yield (" ".join(array) if array is not None else value), not piece.quoted, None
            i = end
        if literal:
            yield "".join(literal), False, None

    def _dollar(self, text: str, i: int) -> tuple[int, str, list[str] | None]:
        nxt = text[i + 1]
        end = matching(text, i + 1) if nxt in "({" else 0
        if end < 0:  # never closed: nothing after it can be read as the shell would
            return len(text), unknown(text[i:]), None
        if nxt == "(":  # a pure command on settled words is evaluated (shell_eval); anything else is unknown
            inner = read(text[i + 2 : end], self.scalars).statements
            one = inner[0] if len(inner) == 1 and not (inner[0].piped or inner[0].redirected) else None
            value = substituted(one.words) if one and not any(UNKNOWN in w for w in one.words) else None
            return end + 1, UNKNOWN + "$(...)" + UNKNOWN if value is None else value, None
        if nxt == "{":
            return end + 1, *self._braced(text[i + 2 : end])
        if m := _NAME.match(text, i + 1):
            value = self.value(m.group(0))
            return m.end(), value if value is not None else unknown(m.group(0)), None
        if nxt in "@*":  # every argument: none, read as the script runs with no arguments
            self.without_arguments.append(f"${nxt} is empty")
            return i + 2, "", None
        if nxt.isdigit() or nxt in "#?$!-":
            return i + 2, unknown("$" + nxt), None
        return i + 1, "$", None

    def _braced(self, inner: str) -> tuple[str, list[str] | None]:
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[([@*]|\d+)\]", inner)
        if m:
            elements = self.arrays.get(m.group(1))
            if elements is None:
                return unknown(m.group(1)), None
            if m.group(2) == "@":
                return "", list(elements)
            if m.group(2) == "*":
                return " ".join(elements), None
            index = int(m.group(2))
            return (elements[index] if index < len(elements) else ""), None
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(?:(:?)([-=+?])(.*))?", inner, re.DOTALL)
        if not m:
            return unknown("${" + inner + "}"), None
        name, colon, op, word = m.groups()
        if name.isdigit():  # an argument: unset, as the script runs with no arguments (its usage's default)
            if op in ("-", "+"):
                taken = self.text(Word([Piece(word or "", True, True)])) if op == "-" else ""
                self.without_arguments.append(f"${{{name}{colon}{op}...}} is {taken!r}")
                return taken, None
            return unknown(name), None
        value = self.value(name)
        unset = value is None or (colon == ":" and value == "")
        alternative = self.text(Word([Piece(word or "", True, True)]))
        if op in ("-", "="):
            if unset:
                if op == "=":
                    self.scalars[name] = alternative
                return alternative, None
        elif op == "+":
            return ("" if unset else alternative), None
        elif op == "?" and unset:
            return unknown(name), None
        return (value if value is not None else unknown(name)), None


def unknowns(text: str) -> list[str]:
    """The names of the expansions a text could not settle."""
    return re.findall(UNKNOWN + "([^" + UNKNOWN + "]*)" + UNKNOWN, text)


def shown(text: str) -> str:
    """A text with its unsettled expansions written back as `$NAME`, for messages."""
    return re.sub(UNKNOWN + "([^" + UNKNOWN + "]*)" + UNKNOWN, lambda m: "$" + m.group(1).lstrip("$"), text)


@dataclass
class Script:
    statements: list[Statement]
    control_flow: bool  # if/while/for read straight through, function bodies and unsettled cases skipped
    variables: Variables
    branches: list[str] = field(default_factory=list)  # the case branches taken on a settled word, said


def read(text: str, given: dict[str, str] | None = None) -> Script:
    """Every simple command in the text, in order, expanded with the assignments before it."""
    if len(text) > MAX_TEXT:
        raise BadInput("the text is larger than 1 MiB", "a command or script is small; check the input")
    text = text.replace("\r\n", "\n")  # a file saved on Windows: its line ends are the same lines
    return _Reader(Variables(given)).read(list(lex(text)))


class _Reader:
    """Tokens to statements: words gather until an operator ends the command; blocks that run only when
    called (functions) or depend on a condition are skipped or marked; assignments are kept as they come."""

    def __init__(self, variables: Variables) -> None:
        self.variables = variables
        self.statements: list[Statement] = []
        self.control = False  # the text has conditions, loops or functions: not one straight line
        self.words: list[Word] = []
        self.skip_until: list[str] = []  # the words that close the blocks being skipped
        self.depth = 0  # how many conditions or loops a statement sits in
        self.start_line = 1
        self.redirected = self.piped = False
        self.cases: list[Case] = []
        self.branches: list[str] = []

    def read(self, items: list[tuple[str, Word | str, int]]) -> Script:
        after_redirect = False
        for at, (_, item, line) in enumerate(items):
            if self.cases and not self.skip_until and self._case(item):
                continue
            if item == "(" and len(self.words) == 1 and at + 1 < len(items) and items[at + 1][1] == ")":
                self.words = []  # name() { ... }: a function's body runs only when called; not read
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
        self.piped = False
        self.end("\n")
        return Script(self.statements, self.control, self.variables, self.branches)

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
        argv = [*prefix, *expanded]
        self.statements.append(Statement(argv, line, op == "&", self.redirected, self.piped, self.depth))


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
