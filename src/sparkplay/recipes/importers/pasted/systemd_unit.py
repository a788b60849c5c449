"""A systemd service unit that starts an engine, read as systemd reads it (systemd.syntax(7), the "Command
lines" of systemd.service(5), Environment= of systemd.exec(5)): no shell runs an ExecStart= line.

A line ending in a backslash continues on the next; lines starting with `#` or `;` are comments. Only the
[Service] section is read. `Environment=` holds space-separated NAME=value assignments (double quotes keep
spaces), never expanded; an empty one clears the list. An ExecStart= line is split into words by systemd's own
quoting (single and double quotes, C-style escapes); a lone `;` separates commands. Its program may carry the
prefixes `-`, `@` (the next word is only argv[0]), `:` (no variable substitution), `+`, `!`, `!!`. Then each
word is expanded: `$NAME` as a word of its own is the value split at whitespace, `${NAME}` the value as it is,
`$$` a dollar; `%%` a percent. A variable no Environment= line sets (an EnvironmentFile=, the manager's own)
and a specifier (`%i`, `%h`) are the machine's: unknown, and refused where the engine would need them.
"""

from __future__ import annotations

import re

from sparkplay.errors import BadInput
from sparkplay.recipes.importers.pasted import docker_run, launches
from sparkplay.recipes.importers.pasted.launches import Found
from sparkplay.recipes.importers.pasted.shell_words import unknown

SECTION = re.compile(r"^\s*\[([^\]]*)\]\s*$")
EXEC_START = re.compile(r"^\s*ExecStart\s*=", re.MULTILINE)
WORD_VARIABLE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
BRACED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
SPECIFIER = re.compile(r"%(.)")
ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "s": " "}
# the unit's keys that shape how the engine runs, which sparkplay's own unit decides: named, not applied
NAMED = (
    "ExecStartPre",
    "ExecStartPost",
    "ExecStop",
    "EnvironmentFile",
    "User",
    "Group",
    "WorkingDirectory",
    "LimitMEMLOCK",
    "LimitNOFILE",
    "CPUAffinity",
)


def is_unit(text: str) -> bool:
    return any(SECTION.match(line) and line.strip() == "[Service]" for line in text.splitlines()) and bool(
        EXEC_START.search(text)
    )


def find(text: str, where: str) -> Found:
    """The engine each ExecStart= starts, with the unit's Environment=; what it does not carry, named."""
    section, env, starts, named = None, {}, [], []
    for number, line in _lines(text):
        if heading := SECTION.match(line):
            section = heading.group(1).strip()
            continue
        key, sep, value = line.partition("=")
        if section != "Service" or not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "Environment":
            env = {} if not value else {**env, **_assignments(value, f"{where}: line {number}")}
        elif key == "ExecStart":
            starts = [] if not value else [*starts, (number, value)]
        elif key in NAMED and key not in named:
            named.append(key)
    found = Found()
    for number, value in starts:
        for words in _commands(value, env, f"{where}: line {number}"):
            count = len(found.launches)
            launches._statement(words, f"line {number}", dict(env), found)
            for launch in found.launches[count:]:
                if named:
                    launch.notes.append(
                        (
                            "serve.args",
                            "ignored",
                            f"the unit's {', '.join(named)}: not applied (sparkplay's own unit starts the "
                            "engine, as its own user, in its own folder, with its own limits)",
                        )
                    )
                if launch.container is not None and env:
                    launch.notes.append(docker_run.env_outside("the unit's Environment=", list(env)))
    return found


def _lines(text: str) -> list[tuple[int, str]]:
    """The unit's lines, continuations joined (systemd joins them with a space), comments and blanks dropped."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if pending is None and (not stripped or stripped[0] in "#;"):
            continue
        if pending is not None and stripped[:1] in ("#", ";"):
            continue  # a comment inside a continued line is dropped, the line goes on
        start, before = pending if pending is not None else (number, "")
        joined = f"{before} {stripped}" if before else stripped
        if joined.endswith("\\"):
            pending = (start, joined[:-1].rstrip())
            continue
        pending = None
        out.append((start, joined))
    if pending is not None:
        out.append(pending)
    return out


def _assignments(value: str, where: str) -> dict[str, str]:
    out = {}
    for word, _ in _split(value, where):
        name, sep, text = word.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise BadInput(f"{where}: Environment= {word!r} is not NAME=value", "write each assignment as NAME=value")
        out[name] = text
    return out


def _split(text: str, where: str) -> list[tuple[str, bool]]:
    """systemd's words: whitespace separates, quotes group (anywhere in a word), C escapes; (word, quoted)."""
    words: list[tuple[str, bool]] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] in " \t":
            i += 1
            continue
        chars: list[str] = []
        quoted = False
        while i < n and text[i] not in " \t":
            c = text[i]
            if c in "\"'":
                quoted, i = True, i + 1
                while i < n and text[i] != c:
                    if text[i] == "\\" and c == '"' and i + 1 < n:
                        char, i = _escape(text, i + 1)
                        chars.append(char)
                        continue
                    chars.append(text[i])
                    i += 1
                if i >= n:
                    raise BadInput(f"{where}: an unbalanced {c} in the line", "close the quote")
                i += 1
            elif c == "\\" and i + 1 < n:
                quoted = True  # `\;` is a semicolon, not the separator
                char, i = _escape(text, i + 1)
                chars.append(char)
            else:
                chars.append(c)
                i += 1
        if "\0" in chars:
            raise BadInput(f"{where}: an escape there is a NUL or no character at all", "write the character itself")
        words.append(("".join(chars), quoted))
    return words


def _escape(text: str, i: int) -> tuple[str, int]:
    """The C escape whose letter is at i (systemd's cunescape: \\n, \\xNN, \\uNNNN, \\NNN octal...); the
    character, and the index after it."""
    letter = text[i]
    for prefix, length, base in (("x", 2, 16), ("u", 4, 16), ("U", 8, 16)):
        digits = text[i + 1 : i + 1 + length]
        if letter == prefix and len(digits) == length and all(d in "0123456789abcdefABCDEF" for d in digits):
            code = int(digits, base)  # no character (a surrogate, past Unicode) reads as NUL, refused
            return chr(code) if code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF else "\0", i + 1 + length
    octal = text[i : i + 3]
    if len(octal) == 3 and all(d in "01234567" for d in octal):
        return chr(int(octal, 8)), i + 3
    return ESCAPES.get(letter, letter), i + 1


def _commands(value: str, env: dict[str, str], where: str) -> list[list[str]]:
    """Each command of an ExecStart= line, its words expanded (a lone `;` separates commands)."""
    commands: list[list[tuple[str, bool]]] = [[]]
    for word, quoted in _split(value, where):
        if word == ";" and not quoted:
            commands.append([])
        else:
            commands[-1].append((word, quoted))
    out = []
    for command in (c for c in commands if c):
        program, *rest = command
        prefix = program[0][: len(program[0]) - len(program[0].lstrip("-@:+!"))]
        if "@" in prefix and rest:
            rest = rest[1:]  # the word after the program is only its argv[0]
        words = [(program[0][len(prefix) :], program[1]), *rest]
        expand = ":" not in prefix
        out.append([part for word, quoted in words for part in _expanded(word, quoted, env, expand)])
    return out


def _expanded(word: str, quoted: bool, env: dict[str, str], variables: bool) -> list[str]:
    """A word after systemd's substitutions: specifiers always, variables unless the `:` prefix said not."""
    word = SPECIFIER.sub(lambda m: "%" if m.group(1) == "%" else unknown(f"%{m.group(1)}"), word)
    if not variables:
        return [word]
    if not quoted and (whole := WORD_VARIABLE.fullmatch(word)):
        name = whole.group(1)
        return env[name].split() if name in env else [unknown(name)]
    parts = word.split("$$")  # a literal dollar
    filled = [BRACED.sub(lambda m: env.get(m.group(1), unknown(m.group(1))), part) for part in parts]
    return ["$".join(filled)]
