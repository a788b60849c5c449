"""Engine command lines: tokenised like a shell would, never run.

A recipe's command line is the source of truth for its flags. shlex splits
it exactly as POSIX sh would split words, so `;`, `$(...)` and backticks
stay literal characters inside arguments: they are data here, and nothing
downstream ever hands them to a shell.
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from sparkplay.errors import BadInput

ENV_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
ENGINES_HELP = (
    "sparkplay knows atlas (serve MODEL --kernel-target=..., or spark serve MODEL), vllm (vllm serve MODEL), "
    "sglang (python3 -m sglang.launch_server --model-path MODEL, or sglang serve) and llama.cpp (llama-server)"
)


# Each engine's flags for the context length; the first is the one sparkplay writes where a recipe's
# flags do not state it (the recipe's context_length field is the source of truth for both).
CONTEXT_FLAGS = {
    "vllm": ("--max-model-len",),
    "atlas": ("--max-seq-len",),
    "llamacpp": ("--ctx-size", "-c"),
    "sglang": ("--context-length",),
}


# vLLM's human-readable integers (its arg_utils): decimal k/m/g/t, binary K/M/G/T (no decimals), and
# -1 or auto for "as long as the memory allows"
_HUMAN_INT = re.compile(r"^(\d+(?:\.\d+)?)([kmgtKMGT])\Z")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def context_value(engine: str, text: str) -> int | None:
    """The context length an engine reads from its flag's text; None where the engine sizes it itself (vLLM's
    auto). A text the engine would refuse is refused, naming the flag."""
    flag = CONTEXT_FLAGS.get(engine, ("the context flag",))[0]
    value = text.strip()
    if engine == "vllm":
        if value == "-1" or value.lower() == "auto":
            return None
        if match := _HUMAN_INT.match(value):
            number, suffix = match.groups()
            if suffix in _DECIMAL:
                return int(float(number) * _DECIMAL[suffix])
            if number.isdigit():
                return int(number) * _BINARY[suffix]
    if engine == "llamacpp" and value == "0":
        return None  # llama.cpp: 0 is the model's own context length
    if value.isdigit():
        return int(value)
    raise BadInput(f"{flag} has a value the engine does not read: {text!r}", f"give {flag} a whole number of tokens")


def context_mismatch(engine: str, args: Sequence[str], length: int | None) -> str | None:
    """Why the flags and the context_length field disagree (None: they agree, or one is unstated)."""
    flags = CONTEXT_FLAGS.get(engine, ())
    stated = flag_value(args, *flags)
    if length is None or stated is None or context_value(engine, stated) == length:
        return None
    return f"context_length is {length} but the engine's flag {flags[0]} says {stated}"


def with_context(engine: str, args: Sequence[str], length: int | None) -> list[str]:
    """The engine's flags with the context length stated: the field's value, where the flags leave it out."""
    flags = CONTEXT_FLAGS.get(engine, ())
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
    # a CPU-pinning program the command ran the engine under (taskset, numactl), as written
    pinning: list[str] = field(default_factory=list)


# CPU pinning in front of the engine: the program, its options that take a value, and (taskset) the one
# positional mask or list before the command
_PINNING = {
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
    if program not in _PINNING:
        return [], tokens
    switches, valued, positional = _PINNING[program]
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
    program = tokens[0].rsplit("/", 1)[-1]
    rest = tokens[1:]
    if program == "vllm" and rest[:1] == ["serve"]:
        model, args = _split_model(rest[1:])  # vLLM reads --model where no positional model is given
        return Command("vllm", model or flag_value(args, "--model"), args, env, pinning)
    if program in ("python", "python3") and rest[:2] == ["-m", "vllm.entrypoints.openai.api_server"]:
        args = rest[2:]
        return Command("vllm", flag_value(args, "--model"), args, env, pinning)
    if program == "serve" and any(t == "--kernel-target" or t.startswith("--kernel-target=") for t in rest):
        model, args = _split_model(rest)
        return Command("atlas", model, args, env, pinning)
    if program == "spark" and rest[:1] == ["serve"]:  # Atlas's own launcher, as sparkrun's atlas runtime calls it
        model, args = _split_model(rest[1:])
        return Command("atlas", model, args, env, pinning)
    if (program in ("python", "python3") and rest[:2] == ["-m", "sglang.launch_server"]) or (
        program == "sglang" and rest[:1] == ["serve"]
    ):
        args = rest[2:] if program != "sglang" else rest[1:]
        return Command("sglang", flag_value(args, "--model-path", "--model"), args, env, pinning)
    if program == "llama-server":
        return Command("llamacpp", flag_value(rest, "-m", "--model"), rest, env, pinning)
    raise BadInput(f"unknown engine in the recipe's command line ({tokens[0]!r})", ENGINES_HELP)


def _split_model(tokens: list[str]) -> tuple[str | None, list[str]]:
    if tokens and not tokens[0].startswith("-"):
        return tokens[0], tokens[1:]
    return None, tokens


def flag_value(args: Sequence[str], *names: str) -> str | None:
    """The last value given for any of `names` (`--f v` or `--f=v`), else None."""
    found: str | None = None
    for i, token in enumerate(args):
        for name in names:
            if token == name and i + 1 < len(args) and not _is_flag(args[i + 1]):
                found = args[i + 1]
            elif token.startswith(name + "="):
                found = token[len(name) + 1 :]
    return found


def flag_values(args: Sequence[str], *names: str) -> list[str]:
    """Every value the last of `names` was given (`--f a b c`, as an nargs="+" option reads it)."""
    found: list[str] = []
    for i, token in enumerate(args):
        if token in names:
            found = list(itertools.takewhile(lambda t: not _is_flag(t), args[i + 1 :]))
        elif token.split("=", 1)[0] in names and "=" in token:
            found = [token.split("=", 1)[1]]
    return found


def has_flag(args: Sequence[str], *names: str) -> bool:
    return any(token in names or token.split("=", 1)[0] in names for token in args)


def without_flags(args: Sequence[str], *names: str) -> list[str]:
    """`args` minus every `--f v` / `--f=v` / switch `--f` for the given names, all else in order."""
    kept: list[str] = []
    skip = False
    for i, token in enumerate(args):
        if skip:
            skip = False
            continue
        if token in names:
            skip = i + 1 < len(args) and not _is_flag(args[i + 1])
            continue
        if token.split("=", 1)[0] in names and "=" in token:
            continue
        kept.append(token)
    return kept


def with_flag(args: Sequence[str], name: str, value: str) -> list[str]:
    """`args` with `name` set to `value`: its first occurrence changed in place, later ones dropped, else added."""
    if not has_flag(args, name):
        return [*args, name, value]
    first = next(i for i, token in enumerate(args) if token == name or token.startswith(name + "="))
    rest = without_flags(args[first:], name)
    return [*args[:first], name, value, *rest]


def _is_flag(token: str) -> bool:
    # "-1" or "-0.5" are values, not flags
    return token.startswith("-") and not re.match(r"^-\d", token)


def flag_map(args: Sequence[str]) -> dict[str, str | None]:
    """Flags to their values (None for a switch), for diffs; positional tokens are keyed by index."""
    result: dict[str, str | None] = {}
    i = 0
    while i < len(args):
        token = args[i]
        if _is_flag(token):
            if "=" in token:
                name, value = token.split("=", 1)
                result[name] = value
            elif i + 1 < len(args) and not _is_flag(args[i + 1]):
                result[token] = args[i + 1]
                i += 1
            else:
                result[token] = None
        else:
            result[f"#{i}"] = token
        i += 1
    return result
