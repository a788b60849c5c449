"""llama-swap's config (`models: {ID: {cmd, env, ...}}`, `macros`), read as llama-swap reads it
(mostlygeek/llama-swap internal/config: macros.go, commands.go): each model's `cmd` is one launch.

A cmd is no shell text: its `#` comment lines are dropped, a trailing backslash joins a line to the next, and
the rest is split into words by POSIX shell quoting only (no expansion). Before that, macros fill it, each a
`${name}`: `MODEL_ID` (the model's id), then the global `macros`, then the model's own (which replace a global
one of the same name), substituted from the last declared to the first, so a macro may use one declared
before it; `${PORT}` is the port llama-swap gives each model that uses it (`startPort`, 5800, counted over the
model ids in sorted order). `${env.NAME}` is the machine's environment: not in the file, so refused where a
cmd needs it, like an unknown macro (llama-swap refuses both too). The proxy, the swapping and unloading
(`ttl`, groups, matrix), aliases and filters are llama-swap's own serving: sparkplay's gateway serves the
models instead, and the import names each such key it does not carry.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from sparkplay.errors import BadInput
from sparkplay.recipes.importers.pasted import docker_run, launches
from sparkplay.recipes.importers.pasted.launches import Found

MACRO = re.compile(r"\$\{([A-Za-z0-9_-]+)\}")
ENV_MACRO = re.compile(r"\$\{env\.([A-Za-z_][A-Za-z0-9_]*)\}")
RESERVED = ("PID", "PORT", "MODEL_ID")
START_PORT = 5800  # llama-swap's startPort default
MAX_TEXT = 64 * 1024  # a command line this long is no engine's
# a model's keys that are llama-swap's serving, not the engine's start: named when a model sets one
NOT_CARRIED = (
    "aliases",
    "ttl",
    "proxy",
    "checkEndpoint",
    "cmdStop",
    "filters",
    "unlisted",
    "useModelName",
    "concurrencyLimit",
    "unloadTimeout",
    "sendLoadingState",
    "timeouts",
)


# the config's own keys for that serving (named, never their values: apiKeys are secrets)
SERVING = ("groups", "matrix", "routing", "hooks", "apiKeys", "peers")


def is_config(doc: dict[str, Any]) -> bool:
    models = doc.get("models")
    return isinstance(models, dict) and any(
        isinstance(m, dict) and isinstance(m.get("cmd"), str) for m in models.values()
    )


def find(doc: dict[str, Any], where: str) -> Found:
    """Each model's launch, in the file's order; a model whose cmd starts no engine is named as ignored."""
    found = Found(together=True)  # models served side by side, each asked for by its id
    declared = _macros(doc.get("macros"), f"{where}: macros")
    start = doc.get("startPort", START_PORT)
    if isinstance(start, bool) or not isinstance(start, int) or start < 1:
        raise BadInput(f"{where}: startPort must be a whole number above 0, got {start!r}", "fix startPort")
    filled: dict[str, tuple[str, list[tuple[str, Any]]]] = {}
    for model_id, spec in doc["models"].items():
        if isinstance(spec, dict) and isinstance(spec.get("cmd"), str):
            own = _macros(spec.get("macros"), f"{where}: model {model_id}: macros")
            macros = _merged([("MODEL_ID", str(model_id)), *declared], own)
            filled[str(model_id)] = (_filled(_uncommented(spec["cmd"]), macros), macros)
    # ${PORT}: the next port from startPort for each model whose filled cmd uses it, by sorted model id
    with_port = sorted(m for m, (cmd, _) in filled.items() if "${PORT}" in cmd)
    for model_id, spec in doc["models"].items():
        at = f"model {model_id}"
        if str(model_id) not in filled:
            found.ignored.append(f"{at} (no cmd)")
            continue
        cmd, macros = filled[str(model_id)]
        if str(model_id) in with_port:
            macros = [*macros, ("PORT", start + with_port.index(str(model_id)))]
            cmd = _filled(cmd, macros[-1:])
        words = _words(_settled(cmd, f"{where}: {at}: cmd"), f"{where}: {at}")
        env = _env(spec.get("env"), macros, f"{where}: {at}: env")
        count, ignored = len(found.launches), len(found.ignored)
        launches._statement(words, at, env, found)
        if len(found.launches) == count:
            found.ignored[ignored:] = [f"{at} ({words[0].rsplit('/', 1)[-1]})"]
            continue
        for launch in found.launches[count:]:
            launch.name_hint = str(model_id)
            launch.notes += _said(spec, at, env if launch.container else {}, dict(macros).get("PORT"))
    others = [f"the config's other models start no engine sparkplay serves: {', '.join(found.ignored)}"]
    if serving := [key for key in SERVING if doc.get(key) not in (None, "", [], {})]:
        others.append(f"llama-swap's {', '.join(serving)}: its own proxy's swapping and access, not applied")
    for launch in found.launches:
        launch.notes += [("source", "ignored", said) for said in others[0 if found.ignored else 1 :]]
    return found


def _said(spec: dict[str, Any], at: str, outside: dict[str, str], port: int | None) -> list[tuple[str, str, str]]:
    """What the import says of a model: its port from llama-swap, its env that stays outside a container, the
    keys of llama-swap's own serving."""
    notes = []
    if port is not None:
        notes.append(("serve.port", "derived", f"${{PORT}} in {at}'s cmd: llama-swap's port for it, {port}"))
    if outside:
        notes.append(docker_run.env_outside(f"{at}'s env", list(outside)))
    if carried := [key for key in NOT_CARRIED if spec.get(key) not in (None, "", [], {})]:
        notes.append(
            (
                "serve.args",
                "ignored",
                f"llama-swap's {', '.join(carried)} for {at}: its own proxy's serving, not applied "
                "(sparkplay's gateway serves the model: docs/serving.md)",
            )
        )
    return notes


def _macros(value: Any, where: str) -> list[tuple[str, Any]]:
    """A macros mapping as llama-swap validates it: names of [A-Za-z0-9_-] under 64 characters, not reserved,
    scalar values that do not name themselves."""
    if value is None:
        return []
    if not isinstance(value, dict):
        raise BadInput(f"{where} must be a mapping of name: value", "write each macro as name: value")
    out = []
    for name, text in value.items():
        name = str(name)
        if not MACRO.fullmatch(f"${{{name}}}") or len(name) >= 64 or name in RESERVED:
            raise BadInput(f"{where}: {name!r} is not a macro name llama-swap accepts", "rename it ([A-Za-z0-9_-])")
        if isinstance(text, (dict, list)) or text is None or f"${{{name}}}" in str(text):
            raise BadInput(f"{where}: {name} must be a text, a number or a bool, not naming itself", "fix it")
        out.append((name, text))
    return out


def _merged(base: list[tuple[str, Any]], own: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """A model's macro replaces the global one of its name in place; a new one comes after them."""
    merged = list(base)
    for name, value in own:
        index = next((i for i, (n, _) in enumerate(merged) if n == name), None)
        if index is None:
            merged.append((name, value))
        else:
            merged[index] = (name, value)
    return merged


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)  # Go's %v: true, not True


def _filled(text: str, macros: list[tuple[str, Any]]) -> str:
    for name, value in reversed(macros):  # the last declared first: a macro may hold an earlier one
        text = text.replace(f"${{{name}}}", _text(value))
        if len(text) > MAX_TEXT:  # macros that double at each step grow exponentially: bounded
            raise BadInput(
                f"a cmd or env grows past {MAX_TEXT // 1024} KiB once the macro ${{{name}}} is filled",
                "write the command out, or use fewer nested macros",
            )
    return text


def _settled(text: str, where: str) -> str:
    """A text with every macro filled: one from the machine's environment, or one never defined, refused."""
    if found := ENV_MACRO.search(text):
        raise BadInput(
            f"{where} uses ${{env.{found.group(1)}}}, a value llama-swap takes from its machine's environment",
            f"write the value of {found.group(1)} in its place (or in a macro)",
        )
    if found := MACRO.search(text):
        raise BadInput(
            f"{where} uses the macro ${{{found.group(1)}}}, which no macros entry defines",
            f"add {found.group(1)} to the config's macros (or the model's own)",
        )
    return text


def _uncommented(cmd: str) -> str:
    return "\n".join(line for line in cmd.split("\n") if not line.strip().startswith("#"))


def _words(cmd: str, where: str) -> list[str]:
    """llama-swap's SanitizeCommand: a trailing backslash joins the next line; POSIX quoting splits."""
    lines = [line.strip()[:-1] + " " if line.strip().endswith("\\") else line for line in _uncommented(cmd).split("\n")]
    try:
        words = shlex.split("\n".join(lines), comments=False, posix=True)
    except ValueError as exc:
        raise BadInput(f"{where}: its cmd cannot be split into words ({exc})", "fix the quotes in its cmd") from None
    if not words:
        raise BadInput(f"{where}: its cmd is empty", "give the command that starts the engine")
    return words


def _env(entries: Any, macros: list[tuple[str, Any]], where: str) -> dict[str, str]:
    if entries is None:
        return {}
    if not isinstance(entries, list) or not all(isinstance(e, str) and "=" in e for e in entries):
        raise BadInput(f"{where} must be a list of NAME=value texts", "write each as NAME=value")
    return dict(_settled(_filled(e, macros), where).split("=", 1) for e in entries)
