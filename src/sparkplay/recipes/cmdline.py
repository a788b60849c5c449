"""Engine command lines: tokenised like a shell would, never run.

A recipe's command line is the source of truth for its flags. shlex splits
it exactly as POSIX sh would split words, so `;`, `$(...)` and backticks
stay literal characters inside arguments: they are data here, and nothing
downstream ever hands them to a shell.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from sparkplay.argv import flag_value
from sparkplay.engines import registry
from sparkplay.errors import BadInput

ENV_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)


def context_mismatch(engine: str, args: Sequence[str], length: int | None) -> str | None:
    """Why the flags and the context_length field disagree (None: they agree, or one is unstated)."""
    spec = registry.spec(engine)
    stated = flag_value(args, *spec.context_flags) if spec.context_flags else None
    if length is None or stated is None or spec.context_value(stated) == length:
        return None
    return f"context_length is {length} but the engine's flag {spec.context_flags[0]} says {stated}"


def with_context(engine: str, args: Sequence[str], length: int | None) -> list[str]:
    """The engine's flags with the context length stated: the field's value, where the flags leave it out."""
    flags = registry.spec(engine).context_flags
    if length is None or not flags or flag_value(args, *flags) is not None:
        return list(args)
    return [*args, flags[0], str(length)]


@dataclass
class Command:
    """A parsed engine command line."""

    engine: str
    model: str | None
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    # what the command ran the engine under, as written: a CPU-pinning program (taskset, numactl) or the
    # engine's own multi-node launcher (its spec's launcher)
    pinning: list[str] = field(default_factory=list)


# CPU pinning in front of the engine: the program, its options that take a value, and (taskset) the one
# positional mask or list before the command
PINNING = {
    "taskset": ({"-c", "--cpu-list", "-a", "--all-tasks"}, set(), True),
    "numactl": (
        {"-l", "--localalloc", "-a", "--all"},
        {"-N", "--cpunodebind", "-m", "--membind", "-C", "--physcpubind", "-i", "--interleave", "-p", "--preferred"},
        False,
    ),
}


def _strip_pinning(tokens: list[str]) -> tuple[list[str], list[str]]:
    """(the pinning words, the command after them); no pinning program: ([], tokens)."""
    program = tokens[0].rsplit("/", 1)[-1] if tokens else ""
    if program not in PINNING:
        return [], tokens
    switches, valued, positional = PINNING[program]
    i = 1
    while i < len(tokens) and tokens[i].startswith("-"):
        name = tokens[i].split("=", 1)[0]
        if name == "--":
            i += 1
            break
        if name not in switches and name not in valued:
            raise BadInput(
                f"the command runs the engine under {program} {tokens[i]}, which sparkplay does not read",
                f"remove the {program} prefix from the recipe's command",
            )
        i += 2 if name in valued and "=" not in tokens[i] else 1
    i += 1 if positional else 0
    if i >= len(tokens):
        raise BadInput(f"the command is only {program}, with no engine after it", "give the engine's command line")
    return tokens[:i], tokens[i:]


# Shell words that make a command more than one engine command line
_SHELL_OPERATORS = {"|", "||", "&", "|&", "<", ">", ">>", "<<", "<&", ">&", "&>", "(", ")"}


def split_preamble(text: str, scripts: bool = False) -> tuple[dict[str, str], str, list[str]]:
    """A launcher's command as (the environment it exports first, the engine command line, the commands it
    runs before the engine).

    Accepted, as a shell would run them: `export A=1 B=2` statements (or bare
    assignments) before the command, joined by newlines, `;` or `&&`, and an
    `exec` in front of it. With `scripts`, a simple command before the engine
    (words only: `pip install x`, `python3 -c '...'`) is returned for the
    caller to carry as a privileged request. Anything else a shell would do
    (a pipe, a redirect, a subshell, a value the shell would expand) is
    refused: sparkplay starts the engine itself.
    """
    joined = re.sub(r"\\\r?\n", " ", text)
    statements: list[list[str]] = []
    for line in joined.splitlines():
        if not line.strip() or line.strip().startswith("#"):
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>()")
        lexer.whitespace_split = True
        try:
            words = list(lexer)
        except ValueError as exc:
            raise BadInput(
                f"the recipe's command line cannot be split into arguments ({exc})",
                "fix the unbalanced quotes in its command",
            ) from None
        current: list[str] = []
        for word in words:
            if word in (";", "&&"):
                statements.append(current)
                current = []
            elif word in _SHELL_OPERATORS or set(word) <= set(";&|<>()"):
                raise script_error(f"it uses the shell's {word!r}")
            else:
                current.append(word)
        statements.append(current)
    statements = [s for s in statements if s]
    if not statements:
        raise BadInput("the recipe's command line is empty", "the recipe must give the engine's serve command")
    env: dict[str, str] = {}
    script: list[str] = []
    for at, statement in enumerate(statements[:-1]):
        if statements[at + 1][0].startswith("-"):  # a flag starting a statement: the line before it ended
            raise BadInput(
                f"the command ends before {statements[at + 1][0]}: a line without a trailing backslash ends it, so "
                "a shell would pass the flags after it to no engine (they would run as a second command)",
                "add the missing backslash at the end of the line before it",
            )
        words = statement[1:] if statement[:1] == ["export"] else statement
        expands = any("$" in w or "`" in w for w in statement)  # the words lost their quotes: not re-writable
        if words and all(ENV_ASSIGNMENT.match(w) for w in words) and not expands:
            env.update(dict(w.split("=", 1) for w in words))
        elif scripts and not expands and statement[0] not in ("export", "cd", "source", ".", "exec"):
            script.append(shlex.join(statement))
        else:
            raise script_error(f"{shlex.join(statement)!r} runs before the engine")
    command = statements[-1][1:] if statements[-1][:1] == ["exec"] else statements[-1]
    return env, shlex.join(command), script


def script_error(why: str) -> BadInput:
    return BadInput(
        f"the command is a shell script, not one engine command line: {why}",
        "sparkplay starts the engine itself: reduce the command to the engine's own line (exported settings "
        "before it are fine), or leave command out and set the flags in defaults",
    )


def tokenise(text: str) -> list[str]:
    # A trailing backslash-newline is a shell line continuation.
    joined = re.sub(r"\\\r?\n", " ", text)
    try:
        return shlex.split(joined, comments=False, posix=True)
    except ValueError as exc:  # "No closing quotation" and friends
        raise BadInput(
            f"the recipe's command line cannot be split into arguments ({exc})",
            "fix the unbalanced quotes in its command",
        ) from None


def parse(text: str) -> Command:
    """Recognise the engine and split off the program, subcommand and model."""
    tokens = tokenise(text)
    env: dict[str, str] = {}
    while tokens and (match := ENV_ASSIGNMENT.match(tokens[0])):
        env[match.group(1)] = match.group(2)
        tokens.pop(0)
    pinning, tokens = _strip_pinning(tokens)
    if not tokens:
        raise BadInput("the recipe's command line is empty", "the recipe must give the engine's serve command")
    for spec in registry.specs().values():  # an engine's own multi-node launcher around its server
        if skip := spec.launcher(tokens):
            pinning, tokens = [*pinning, *tokens[:skip]], tokens[skip:]
            break
    program = tokens[0].rsplit("/", 1)[-1]
    rest = tokens[1:]
    for spec in registry.specs().values():
        if (found := spec.recognise(program, rest)) is not None:
            return Command(spec.name, found[0], found[1], env, pinning)
    raise BadInput(f"unknown engine in the recipe's command line ({tokens[0]!r})", registry.command_help())
