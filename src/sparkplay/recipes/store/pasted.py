"""Recipes from text that is no recipe format and from files of launches (a command line, a script, a profile,
a compose file, a page, a llama-swap config): each engine launch found becomes a recipe, one chosen unless
they run side by side."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from sparkplay.errors import BadInput
from sparkplay.fsutil import read_small_text
from sparkplay.recipes import model
from sparkplay.recipes.importers.pasted import (
    compose_run,
    launch_script,
    launches,
    page,
    profile,
    settings_profile,
    shell,
    systemd_unit,
    wrapper,
)
from sparkplay.recipes.importers.pasted import launch as paste
from sparkplay.recipes.normalise import normalise
from sparkplay.recipes.store import choices

MAX_SOURCED = 256 * 1024  # a file a script sources: a profile or a helper, small
# a copied terminal's prompt before a command (`$ vllm serve ...`)
PROMPT = re.compile(r"^[ \t]*\$[ \t]+(?=\S)", re.MULTILINE)


def origin(source: str, arguments: Sequence[str]) -> shell.Origin:
    """How a script read from SOURCE knows its own place: a local file's path ($0) and the files around it it may
    source; the arguments it is run with (`--arg`; none: its defaults, said)."""
    given = list(arguments) if arguments else None
    if "://" in source or source == "-":
        return shell.Origin(None, given)
    path = Path(source).resolve()
    return shell.Origin(str(path), given, partial(_sourced, path.parent.parent))


def _sourced(root: Path, path: str) -> tuple[str, str] | None:
    """A file a script sources, read where it lies inside ROOT (the script's folder's parent: a repository's
    `scripts/` and `recipes/` side by side) and is small text; no hidden file or folder (`.env`, `.ssh`: a
    user's own settings and secrets), no link out of ROOT. None: not read, and the script reads on without it."""
    try:
        real = Path(path).resolve(strict=True)
        inside = real.relative_to(root)
    except (OSError, ValueError):
        return None
    body = None if any(part.startswith(".") for part in inside.parts) else read_small_text(real, MAX_SOURCED)
    if body is None:
        return None
    return body.decode("utf-8", errors="replace"), f"{inside} (sha256 {hashlib.sha256(body).hexdigest()[:12]})"


def shell_text(
    text: str,
    source: Callable[[str], dict[str, Any]],
    name: str | None,
    pick: int | None,
    where: str,
    script: shell.Origin | None = None,
) -> list[dict[str, Any]]:
    """Text that is no recipe format: a page in Markdown, else shell text (a command line, a script, a profile)."""
    if page.is_markdown(text):
        return pasted(page.find(text, False, where), source("page"), name, pick, where, "a Markdown page")
    if systemd_unit.is_unit(text):
        return pasted(systemd_unit.find(text, where), source("command"), name, pick, where, "a systemd unit", False)
    try:
        found, variables = launches.find(PROMPT.sub("", text), origin=script)
    except BadInput:
        if _prose_like(text, where):  # its prose read as shell words fails on an apostrophe: say what it is
            raise _prose(where) from None
        raise
    if not (found.launches or found.elsewhere or found.compose_runs or found.wrappers) and _prose_like(text, where):
        raise _prose(where)
    if named := launch_script.profile(text):  # eugr's launch-cluster.sh runs it in its own image
        launch_script.adopt(found.launches, text, named)
    if not found.launches and len(found.compose_runs) == 1:
        service, path, _ = compose_run.find(*found.compose_runs[0], where)
        for launch in service.launches:
            launch.notes += [("serve.args", "derived", text) for text in found.read_as]
        return pasted(service, source("compose"), name, pick, str(path), "a compose file")
    if not found.launches and len(found.wrappers) == 1:
        return [normalise(wrapper.to_raw(found.wrappers[0], source("sparkrun"), name, where))]
    if not found.launches and profile.is_profile(variables.scalars, variables.arrays):
        # a model's vllm_profile.conf: the docker run its runner would start, imported as a pasted one
        line, said = profile.command(variables.scalars, variables.arrays, where)
        written = _written_out(line, said, f"{where} (as its runner starts it)")
        return pasted(written, source("command"), name, pick, where, "a vllm_profile.conf")
    if not (found.launches or found.elsewhere) and settings_profile.is_profile(variables.scalars, found.ignored):
        # settings a launcher sources (MODEL=, SERVE_ARGS=(...)): the command they make, imported as a pasted one
        line, said = settings_profile.command(variables.scalars, variables.arrays, where)
        written = _written_out(line, [*found.read_as, *said], f"{where} (as a profile read)")
        return pasted(written, source("command"), name, pick, where, "a profile of settings")
    if not found.launches and not found.elsewhere and not found.ignored and variables.scalars:
        raise BadInput(
            f"{where} is a profile of settings (NAME=value lines: {', '.join(list(variables.scalars)[:4])}) for a "
            "launcher script, with no engine command in it",
            "import the command or script the launcher runs with these settings (its engine command line)",
        )
    try:
        return pasted(found, source("command"), name, pick, where, "shell text (a command line or a script)")
    except BadInput as exc:  # a value that follows from the script's arguments: say how to give them
        if not variables.needed or "which the text never sets" not in exc.problem:
            raise
        needed = ", ".join(dict.fromkeys(variables.needed))
        raise BadInput(
            exc.problem, f"{exc.fix}; or import the script as run with its arguments: --arg VALUE (it needs {needed})"
        ) from None


def _written_out(line: str, said: list[str], where: str) -> launches.Found:
    """The launch of a command line a reader wrote out from a profile's settings, with what the reading said."""
    found, _ = launches.find(line, where)
    for launch in found.launches:
        launch.notes += [("serve.args", "derived", words) for words in said]
    return found


def _prose_like(text: str, where: str) -> bool:
    """Markdown with no code block: its marks, or (only to name it in a refusal) a Markdown file's name."""
    return page.is_prose(text) or where.lower().endswith((".md", ".markdown", ".mdx"))


def _prose(where: str) -> BadInput:
    return BadInput(
        f"{where} is a Markdown page with no code block, and holds no engine command sparkplay can read",
        "give the engine's command line, or a page with it in a fenced code block",
    )


def pasted(
    found: launches.Found,
    src: dict[str, Any],
    name: str | None,
    pick: int | None,
    where: str,
    shape: str,
    offers_choices: bool = True,
) -> list[dict[str, Any]]:
    """The recipes of the launches a command line, a script, a compose file or a page holds: all of them where
    they run side by side (a compose file's services), else each choice the text offers its own recipe (a page's
    commands, a script's runs; not a systemd unit's, whose one service runs one), or the one `--pick` names."""
    chosen = paste.pick(found, pick, where, shape)
    if len(chosen) > 1 and not found.together:
        if not offers_choices:
            raise BadInput(
                f"{where} holds {len(chosen)} engine commands: {paste.listing(found)}", "choose one with --pick N"
            )
        return _choices(found, chosen, src, name, where)
    docs = [_one(found, launch, src, name, len(chosen)) for launch in chosen]
    return _distinct_names(docs, chosen)


def _one(found: launches.Found, launch: launches.Launch, src: dict[str, Any], name: str | None, of: int) -> dict:
    own = f"{name}-{launch.name_hint}" if name and of > 1 and launch.name_hint else name
    raw = paste.to_raw(launch, {**src, "launch": launch.where}, own)
    if src["kind"] == "compose" and found.ignored:
        raw.note(
            "extra.compose.services",
            "ignored",
            f"the compose file's other services run no engine and are not applied: {', '.join(found.ignored)}",
        )
        raw.extra.setdefault("compose", {})["services"] = list(found.ignored)
    return normalise(raw)


def _choices(
    found: launches.Found, chosen: list[launches.Launch], src: dict[str, Any], name: str | None, where: str
) -> list[dict[str, Any]]:
    """Several engine commands that are choices: each one that imports as written a recipe of its own (the same
    command written twice, once); the rest named on those (store/choices.py)."""
    if len(chosen) > choices.MAX:
        raise BadInput(
            f"{where} holds {len(chosen)} engine commands, more choices than one import makes recipes of "
            f"({choices.MAX}): {paste.listing(found)[:600]}",
            "choose one with --pick N",
        )
    docs: list[dict[str, Any]] = []
    kept: list[launches.Launch] = []
    numbers: list[int] = []
    failed: list[tuple[str, BadInput]] = []
    for number, launch in enumerate(chosen, 1):
        try:
            doc = _one(found, launch, src, name, len(chosen))
        except BadInput as exc:
            failed.append((choices.label(number, launch.where), exc))
            continue
        if not any(_same(doc, other) for other in docs):
            docs.append(doc)
            kept.append(launch)
            numbers.append(number)
    if not docs:
        raise choices.refusal(len(chosen), where, failed)
    docs = _distinct_names(docs, kept, numbers)
    choices.mark(docs, numbers, len(chosen), where)
    choices.left_out(docs, [choices.why(launch, exc.problem, where) for launch, exc in failed])
    return docs


def _same(doc: dict[str, Any], other: dict[str, Any]) -> bool:
    """The same recipe, wherever in the text it is written (a page that repeats its command)."""

    def essence(d: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in d.items() if k not in ("name", "source", "provenance")}

    return essence(doc) == essence(other)


def _distinct_names(
    docs: list[dict[str, Any]], chosen: Sequence[launches.Launch], numbers: Sequence[int] = ()
) -> list[dict[str, Any]]:
    """A name each: where two share one, each gets its container's or service's name, else its number in the text."""
    names = [d["name"] for d in docs]
    if len(set(names)) == len(names):
        return docs
    hints = [launch.name_hint for launch in chosen]
    numbers = numbers or range(1, len(docs) + 1)
    by_hint = len(set(hints)) == len(hints) and all(hints)
    for doc, hint, number in zip(docs, hints, numbers, strict=True):
        doc["name"] = model.slugify(f"{doc['name']}-{hint if by_hint else number}")
    return docs
