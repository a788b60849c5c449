"""Shell words as POSIX sh/bash splits them, with their quoting kept for expansion (pasted.shell).

Quotes, escapes, comments, line continuations, `$(...)`/`${...}` kept whole, here-documents consumed, bash
arrays (`NAME=(...)`) and redirection operators told apart from words. Never run.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from sparkplay.errors import BadInput

# What an expansion the text cannot settle becomes: `UNKNOWN + name + UNKNOWN`, never a value
UNKNOWN = "\ue000"
OPERATORS = ("&&", "||", ";;", ";", "|&", "|", "&", "(", ")")
REDIRECTS = ("&>>", "&>", ">>", ">&", ">|", "<<<", "<<-", "<<", "<&", "<>", ">", "<")


def unknown(name: str) -> str:
    return UNKNOWN + name + UNKNOWN


@dataclass
class Piece:
    text: str
    quoted: bool  # in quotes: no field splitting
    expand: bool  # '$' forms in it are expansions (not inside single quotes, not escaped)


@dataclass
class Word:
    pieces: list[Piece] = field(default_factory=list)
    array: list[Word] | None = None  # NAME=( ... ): the words of an array assignment

    def raw(self) -> str:
        return "".join(p.text for p in self.pieces)


Token = tuple[str, Word | str, int]
ARRAY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
PLACEHOLDER = re.compile(r"<([A-Za-z][A-Za-z0-9_ .:/-]{0,80})>")
HEREDOC_WORD = re.compile(r"\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")


def lex(text: str, in_array: bool = False) -> Iterator[Token]:
    """("word", Word, line) and ("op", operator, line) tokens; a heredoc's body is consumed with its redirect."""
    return _Lexer(text, in_array).tokens()


class _Lexer:
    """One pass over the text: quoting and expansions grow the current word; blanks, newlines and operators
    end it."""

    def __init__(self, text: str, in_array: bool) -> None:
        self.text, self.in_array = text, in_array
        self.i, self.line = 0, 1
        self.heredocs: list[str] = []
        self.word: Word | None = None

    def flush(self) -> Iterator[Token]:
        if self.word is not None:
            yield "word", self.word, self.line
            self.word = None

    def add(self, piece: Piece) -> None:
        if self.word is None:
            self.word = Word()
        last = self.word.pieces[-1] if self.word.pieces else None
        if last is not None and not last.quoted and not piece.quoted and last.expand and piece.expand:
            last.text += piece.text  # bare characters run together, so `$NAME` stays one expansion
        else:
            self.word.pieces.append(piece)

    def tokens(self) -> Iterator[Token]:
        text, n = self.text, len(self.text)
        while self.i < n:
            c = text[self.i]
            if self._quoting(c) or self._special(c):
                continue
            if c == "\n":
                yield from self._newline()
            elif c in " \t\r":
                yield from self.flush()
                self.i += 1
            elif (op := next((o for o in (*REDIRECTS, *OPERATORS) if text.startswith(o, self.i)), None)) is not None:
                yield from self._operator(op)
            else:
                self.add(Piece(c, False, True))
                self.i += 1
        yield from self.flush()
        if self.heredocs:
            raise BadInput(f"the here-document <<{self.heredocs[0]} is never ended", "end it with its delimiter line")

    def _closed(self, end: int, what: str) -> int:
        """`end` (a closing quote or bracket's index), the lines up to it counted; unbalanced when -1."""
        if end < 0:
            raise _unbalanced(what, self.line)
        self.line += self.text.count("\n", self.i, end)
        return end

    def _quoting(self, c: str) -> bool:
        """An escape, a quoted string, `$(...)`/`${...}` or a backquote at the cursor: consumed into the word."""
        text, i = self.text, self.i
        if c == "\\" and i + 1 < len(text):
            if text[i + 1] == "\n":
                self.i, self.line = i + 2, self.line + 1
                return True
            self.add(Piece(text[i + 1], True, False))
            self.i += 2
        elif c == "'":
            end = self._closed(text.find("'", i + 1), "'")
            self.add(Piece(text[i + 1 : end], True, False))
            self.i = end + 1
        elif c == '"':
            self.i, self.line = _double(text, i + 1, self.line, self.add)
        elif c == "$" and i + 1 < len(text) and text[i + 1] in "({":
            end = self._closed(matching(text, i + 1), text[i + 1])
            self.add(Piece(text[i : end + 1], False, True))
            self.i = end + 1
        elif c == "`":
            end = text.find("`", i + 1)
            if end < 0:
                raise _unbalanced("`", self.line)
            self.add(Piece(UNKNOWN + "`...`" + UNKNOWN, False, False))
            self.i = end + 1
        else:
            return False
        return True

    def _special(self, c: str) -> bool:
        """A word's start that is not a character of it (~, #), an array's parentheses, a page's placeholder."""
        text, i = self.text, self.i
        if c == "~" and self.word is None:
            self.add(Piece(unknown("HOME"), False, False))  # the home folder of whoever runs it: not the text's
            self.i += 1
        elif c == "#" and self.word is None:
            end = text.find("\n", i)
            self.i = len(text) if end < 0 else end
        elif c == "(" and self.word is not None and ARRAY_NAME.fullmatch(self.word.raw()):
            if self.in_array:  # bash has no array inside an array
                raise _unbalanced("(", self.line)
            end = self._closed(matching(text, i), "(")
            inner = [w for kind, w, _ in lex(text[i + 1 : end], True) if kind == "word" and isinstance(w, Word)]
            self.word.array = inner
            self.i = end + 1
        elif c == "<" and (m := PLACEHOLDER.match(text, i)) and "\n" not in m.group(0):
            self.add(Piece(m.group(0), True, False))  # a page's placeholder (<your-token>), not a redirect
            self.i += len(m.group(0))
        else:
            return False
        return True

    def _newline(self) -> Iterator[Token]:
        yield from self.flush()
        yield "op", "\n", self.line
        self.line += 1
        self.i += 1
        for delimiter in self.heredocs:  # the bodies start on the next line
            self.i, self.line = _skip_heredoc(self.text, self.i, self.line, delimiter)
        self.heredocs = []

    def _operator(self, op: str) -> Iterator[Token]:
        if op in REDIRECTS and self.word is not None and self.word.raw().isdigit():
            self.word = None  # 2>&1: the descriptor belongs to the redirect
        yield from self.flush()
        if op in ("<<", "<<-") and (m := HEREDOC_WORD.match(self.text, self.i + len(op))):
            self.heredocs.append(m.group(2))
            self.i = m.end()
            yield "op", "<<", self.line
            return
        yield "op", op, self.line
        self.i += len(op)


def _unbalanced(what: str, line: int) -> BadInput:
    return BadInput(
        f"an unbalanced {what} on line {line} of the text: it cannot be split into words",
        "fix the quotes or brackets on that line",
    )


def _double(text: str, i: int, line: int, add: Callable[[Piece], None]) -> tuple[int, int]:
    """A double-quoted string from after its quote: escapes as sh reads them, `$` forms kept for expansion."""
    buf: list[str] = []
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"':
            add(Piece("".join(buf), True, True))
            return i + 1, line
        if c == "\\" and i + 1 < n and text[i + 1] in '$`"\\\n':
            if text[i + 1] != "\n":
                add(Piece("".join(buf), True, True))
                add(Piece(text[i + 1], True, False))
                buf = []
            else:
                line += 1
            i += 2
            continue
        if c == "$" and i + 1 < n and text[i + 1] in "({":
            end = matching(text, i + 1)
            if end < 0:
                raise _unbalanced(text[i + 1], line)
            buf.append(text[i : end + 1])
            i = end + 1
            continue
        if c == "`":
            end = text.find("`", i + 1)
            if end < 0:
                raise _unbalanced("`", line)
            add(Piece("".join(buf), True, True))
            add(Piece(UNKNOWN + "`...`" + UNKNOWN, True, False))
            buf, i = [], end + 1
            continue
        line += c == "\n"
        buf.append(c)
        i += 1
    raise _unbalanced('"', line)


def matching(text: str, i: int) -> int:
    """The index of the bracket closing the one at `i`, quotes inside skipped; -1 when none."""
    close = {"(": ")", "{": "}"}[text[i]]
    depth, j, quote = 0, i, ""
    while j < len(text):
        c = text[j]
        if quote:
            if c == quote:
                quote = ""
            elif c == "\\" and quote == '"':
                j += 1
        elif c in "'\"":
            quote = c
        elif c == "\\":
            j += 1
        elif c == "#" and close == ")" and text[j - 1] in " \t\n(":
            # a comment inside $(...) or an array runs to the line's end: its quotes and brackets are prose
            end = text.find("\n", j)
            j = len(text) if end < 0 else end
            continue
        elif c == text[i]:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return -1


def _skip_heredoc(text: str, i: int, line: int, delimiter: str) -> tuple[int, int]:
    while i < len(text):
        end = text.find("\n", i)
        end = len(text) if end < 0 else end
        current = text[i:end]
        i, line = end + 1, line + 1
        if current.strip() == delimiter:
            return i, line
    raise BadInput(f"the here-document <<{delimiter} is never ended", "end it with its delimiter line")
