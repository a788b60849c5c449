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

from sparkplay.errors import BadInput

ENV_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
ENGINES_HELP = (
    "sparkplay knows atlas (serve MODEL --kernel-target=..., or spark serve MODEL), vllm (vllm serve MODEL) "
    "and llama.cpp (llama-server)"
)


# Each engine's flags for the context length; the first is the one sparkplay writes where a recipe's
# flags do not state it (the recipe's context_length field is the source of truth for both).
CONTEXT_FLAGS = {"vllm": ("--max-model-len",), "atlas": ("--max-seq-len",), "llamacpp": ("--ctx-size", "-c")}


def context_mismatch(engine: str, args: Sequence[str], length: int | None) -> str | None:
    """Why the flags and the context_length field disagree (None: they agree, or one is unstated)."""
    flags = CONTEXT_FLAGS.get(engine, ())
    stated = flag_value(args, *flags)
    if length is None or stated is None or not stated.strip().isdigit() or int(stated) == length:
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
    if not tokens:
        raise BadInput("the recipe's command line is empty", "the recipe must give the engine's serve command")
    program = tokens[0].rsplit("/", 1)[-1]
    rest = tokens[1:]
    if program == "vllm" and rest[:1] == ["serve"]:
        model, args = _split_model(rest[1:])
        return Command("vllm", model, args, env)
    if program in ("python", "python3") and rest[:2] == ["-m", "vllm.entrypoints.openai.api_server"]:
        args = rest[2:]
        return Command("vllm", flag_value(args, "--model"), args, env)
    if program == "serve" and any(t == "--kernel-target" or t.startswith("--kernel-target=") for t in rest):
        model, args = _split_model(rest)
        return Command("atlas", model, args, env)
    if program == "spark" and rest[:1] == ["serve"]:  # Atlas's own launcher, as sparkrun's atlas runtime calls it
        model, args = _split_model(rest[1:])
        return Command("atlas", model, args, env)
    if program == "llama-server":
        return Command("llamacpp", flag_value(rest, "-m", "--model"), rest, env)
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
