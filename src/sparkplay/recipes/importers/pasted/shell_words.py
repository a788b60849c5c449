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


def lex(text: str, in_array: bool = False) -> Iterator[tuple[str, Word | str, int]]:
    """("word", Word, line) and ("op", operator, line) tokens; a heredoc's body is consumed with its redirect."""
    i, n, line = 0, len(text), 1
    heredocs: list[str] = []
    word: Word | None = None

    def flush() -> Iterator[tuple[str, Word | str, int]]:
        nonlocal word
        if word is not None:
            yield "word", word, line
            word = None

    def add(piece: Piece) -> None:
        nonlocal word
        if word is None:
            word = Word()
        last = word.pieces[-1] if word.pieces else None
        if last is not None and not last.quoted and not piece.quoted and last.expand and piece.expand:
            last.text += piece.text  # bare characters run together, so `$NAME` stays one expansion
        else:
            word.pieces.append(piece)

    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            if text[i + 1] == "\n":
                i, line = i + 2, line + 1
                continue
            add(Piece(text[i + 1], True, False))
            i += 2
        elif c == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise _unbalanced("'", line)
            add(Piece(text[i + 1 : end], True, False))
            line += text.count("\n", i, end)
            i = end + 1
        elif c == '"':
            i, line = _double(text, i + 1, line, add)
        elif c == "$" and i + 1 < n and text[i + 1] in "({":
            end = matching(text, i + 1)
            if end < 0:
                raise _unbalanced(text[i + 1], line)
            add(Piece(text[i : end + 1], False, True))
            line += text.count("\n", i, end)
            i = end + 1
        elif c == "`":
            end = text.find("`", i + 1)
            if end < 0:
                raise _unbalanced("`", line)
            add(Piece(UNKNOWN + "`...`" + UNKNOWN, False, False))
            i = end + 1
        elif c == "~" and word is None:
            add(Piece(unknown("HOME"), False, False))  # the home folder of whoever runs it: not the text's
            i += 1
        elif c == "#" and word is None:
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif c == "\n":
            yield from flush()
            yield "op", "\n", line
            line += 1
            i += 1
            for delimiter in heredocs:  # the bodies start on the next line
                i, line = _skip_heredoc(text, i, line, delimiter)
            heredocs = []
        elif c in " \t\r":
            yield from flush()
            i += 1
        elif c == "(" and word is not None and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\+?=", word.raw()):
            end = matching(text, i)
            if end < 0 or in_array:  # bash has no array inside an array
                raise _unbalanced("(", line)
            inner = [w for kind, w, _ in lex(text[i + 1 : end], True) if kind == "word" and isinstance(w, Word)]
            word.array = inner
            line += text.count("\n", i, end)
            i = end + 1
        elif c == "<" and (m := re.match(r"<([A-Za-z][A-Za-z0-9_ .:/-]{0,80})>", text[i:])) and "\n" not in m.group(0):
            add(Piece(m.group(0), True, False))  # a page's placeholder (<your-token>), not a redirect
            i += len(m.group(0))
        elif (op := next((o for o in (*REDIRECTS, *OPERATORS) if text.startswith(o, i)), None)) is not None:
            if op in REDIRECTS and word is not None and word.raw().isdigit():
                word = None  # 2>&1: the descriptor belongs to the redirect
            yield from flush()
            if op in ("<<", "<<-"):
                j = i + len(op)
                m = re.match(r"\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1", text[j:])
                if m:
                    heredocs.append(m.group(2))
                    i = j + m.end()
                    yield "op", "<<", line
                    continue
            yield "op", op, line
            i += len(op)
        else:
            add(Piece(c, False, True))
            i += 1
    yield from flush()
    if heredocs:
        raise BadInput(f"the here-document <<{heredocs[0]} is never ended", "end it with its delimiter line")


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
