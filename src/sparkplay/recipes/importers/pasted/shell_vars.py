"""The variables of a shell text as its statements set them (pasted/shell.py reads the statements): expansion
with bash's quoting and field splitting, `${VAR:-default}` and the other parameter forms, arrays, a script's
arguments (none: it is read as run with no arguments; a function's, where it is called), and the settled
output of a pure command substitution. Anything the text does not settle stays UNKNOWN."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from sparkplay.errors import BadInput
from sparkplay.recipes.importers.pasted.shell_eval import substituted
from sparkplay.recipes.importers.pasted.shell_words import UNKNOWN, Piece, Word, lex, matching, unknown

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
MAX_ELEMENTS, MAX_VALUE = 10_000, 1 << 20  # a variable a launch could hold


class Fields(list[str]):
    """An expansion's fields as they are, quoted or not (an idiom whose inner expansion is quoted)."""


class Variables:
    """The text's own variables and arrays, as its statements set them in order."""

    def __init__(self, given: dict[str, str] | None = None) -> None:
        self.scalars: dict[str, str] = dict(given or {})
        self.arrays: dict[str, list[str]] = {}
        self.without_arguments: list[str] = []  # the arguments read as absent, and what that made of them
        self.needed: list[str] = []  # the script's arguments it cannot run without (`${1:?usage: ...}`)
        # a function's arguments while its body is read where it is called; None: the script's own (none)
        self.positional: list[str] | None = None
        # the words of a command substitution's one simple command (the shell reader's), None for any other
        self.command: Callable[[str, Variables], list[str] | None] = lambda _text, _variables: None
        self.script: str | None = None  # $0: the script's own path, where it was read from a file
        self.cwd: str | None = None  # the folder the text has cd'd to, where it follows from the text

    def copy(self) -> Variables:
        """The state a subshell starts with ($(...)): its changes stay its own."""
        other = Variables(self.scalars)
        other.arrays = {k: list(v) for k, v in self.arrays.items()}
        other.positional, other.command, other.script, other.cwd = self.positional, self.command, self.script, self.cwd
        return other

    def word(self, text: str, quoted: bool = False) -> str:
        """The word of `${NAME:-word}` as bash makes it: expanded, its quotes removed (`${HOST:-"0.0.0.0"}` is
        0.0.0.0), one field; inside double quotes a single quote in it is a character (bash keeps it)."""
        if quoted:
            return self.text(Word([Piece(re.sub(r'(?<!\\)"', "", text), True, True)]))
        try:
            words = [item for _, item, _ in lex(text) if isinstance(item, Word)]
        except BadInput:
            words = []
        if len(words) != 1:  # blanks between words, or none: the text as it stands
            return self.text(Word([Piece(text, True, True)]))
        return self.text(words[0])

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
            end, value, array = self._dollar(text, i, piece.quoted)
            if array is not None and (piece.quoted or isinstance(array, Fields)):
                yield "", False, array
            else:
                yield (" ".join(array) if array is not None else value), not piece.quoted, None
            i = end
        if literal:
            yield "".join(literal), False, None

    def _dollar(self, text: str, i: int, quoted: bool = False) -> tuple[int, str, list[str] | None]:
        nxt = text[i + 1]
        end = matching(text, i + 1) if nxt in "({" else 0
        if end < 0:  # never closed: nothing after it can be read as the shell would
            return len(text), unknown(text[i:]), None
        if nxt == "(":  # a pure command on settled words is evaluated (shell_eval); anything else is unknown
            words = self.command(text[i + 2 : end], self)
            value = substituted(words) if words and not any(UNKNOWN in w for w in words) else None
            return end + 1, UNKNOWN + "$(...)" + UNKNOWN if value is None else value, None
        if nxt == "{":
            return end + 1, *self._braced(text[i + 2 : end], quoted)
        if m := _NAME.match(text, i + 1):
            value = self.value(m.group(0))
            return m.end(), value if value is not None else unknown(m.group(0)), None
        if nxt == "0":  # the script's path: known where it was read from a file
            return i + 2, self.script or unknown("0"), None
        if self.positional is not None and (nxt in "@*#" or nxt.isdigit()):  # a called function's arguments
            given = self.positional
            if nxt == "#":
                return i + 2, str(len(given)), None
            if nxt in "@*":
                return i + 2, " ".join(given), (list(given) if nxt == "@" else None)
            return i + 2, given[int(nxt) - 1] if 0 < int(nxt) <= len(given) else "", None
        if nxt in "@*":  # every argument: none, read as the script runs with no arguments
            self.without_arguments.append(f"${nxt} is empty")
            return i + 2, "", None
        if nxt.isdigit() or nxt in "#?$!-":
            return i + 2, unknown("$" + nxt), None
        return i + 1, "$", None

    def _braced(self, inner: str, quoted: bool = False) -> tuple[str, list[str] | None]:
        if m := re.fullmatch(r"([@*]):(\d+)(?::(\d+))?", inner):  # ${@:2}: the arguments from the second on
            if self.positional is None:
                self.without_arguments.append(f"${{{inner}}} is empty")
            start = max(int(m.group(2)) - 1, 0)
            given = (self.positional or [])[start : start + int(m.group(3)) if m.group(3) else None]
            return " ".join(given), (list(given) if m.group(1) == "@" else None)
        if m := re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[[@*]\]:?([-+])(.*)", inner, re.DOTALL):
            # `${ARGS[@]+"${ARGS[@]}"}` (set -u's idiom): the elements, if any (an array comes from no environment)
            elements, op, alternative = self.arrays.get(m.group(1)) or [], m.group(2), m.group(3)
            itself = op == "-" or alternative.strip('"') == f"${{{m.group(1)}[@]}}"
            if elements and itself:
                return " ".join(elements), Fields(elements)
            if (op == "+") == bool(elements):  # `+` of a set array, `-` of an empty one: the alternative
                return self.word(alternative, quoted), None
            return "", Fields()
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
        if name == "0":
            return self.script or unknown("0"), None
        if name.isdigit() and self.positional is None:  # the script's argument: unset (run with none)
            if op in ("-", "+"):
                taken = self.word(word or "", quoted) if op == "-" else ""
                self.without_arguments.append(f"${{{name}{colon}{op}...}} is {taken!r}")
                return taken, None
            said = self.word(word or "", quoted) if op == "?" else ""
            self.needed.append(f"${name}" + (f" ({shown(said)})" if said else ""))
            return unknown(name), None
        if name.isdigit():  # a called function's argument
            index = int(name)
            value = self.positional[index - 1] if self.positional and 0 < index <= len(self.positional) else None
        else:
            value = self.value(name)
        unset = value is None or (colon == ":" and value == "")
        alternative = self.word(word or "", quoted)
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


def assigned(variables: Variables, word: Word) -> str:
    """An assignment word's value (NAME=value), expanded without field splitting."""
    m = ASSIGN.match(word.raw())
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


def assign(variables: Variables, word: Word) -> None:
    m = ASSIGN.match(word.raw())
    if m is None:
        return
    name, append = m.group(1), m.group(2) == "+"
    if word.array is not None:
        elements = [f for w in word.array for f in variables.expand(w)]
        variables.arrays[name] = _bounded(name, [*variables.arrays.get(name, []), *elements] if append else elements)
        variables.scalars.pop(name, None)
        return
    value = assigned(variables, word)
    if append:
        value = (variables.value(name) or "") + value
    variables.scalars[name] = _bounded(name, [value])[0]
    variables.arrays.pop(name, None)


def _bounded(name: str, elements: list[str]) -> list[str]:
    """A variable no launch needs this large (a loop that doubles it) is refused before it fills memory."""
    if len(elements) > MAX_ELEMENTS or sum(map(len, elements)) > MAX_VALUE:
        raise BadInput(
            f"the text's variable {name} grows past what a launch holds ({MAX_ELEMENTS} words, {MAX_VALUE} bytes)",
            "give the engine's command line as it runs",
        )
    return elements
