"""A text's engine commands that are choices, not launches run together (a page's ways to serve a model, a
script's runs one after another): each imports as a recipe of its own. One that cannot (a placeholder, an
unknown model, a plan that could never start) is left out and named on the others, at whichever step of the
import it fails; the text is refused only when none is left."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sparkplay.errors import BadInput

KEY = "source.launch"
MAX = 24  # a text's choices one import makes recipes of: a page's alternatives, not a generated file's thousand
NUMBER = re.compile(r"this recipe is number (\d+)")


def mark(docs: list[dict[str, Any]], numbers: list[int], of: int, where: str) -> None:
    """Say on each recipe which of the text's OF engine commands it is (NUMBERS: each one's, from 1)."""
    for doc, number in zip(docs, numbers, strict=True):
        detail = (
            f"{where} holds {of} engine commands, each a choice, not run together: this recipe is number {number} "
            f"({doc['source'].get('launch', '')}), each other one a recipe of its own; --pick {number} imports "
            "this one alone"
        )
        doc.setdefault("provenance", []).append({"key": KEY, "how": "chosen", "detail": detail})


def is_choice(doc: dict[str, Any]) -> bool:
    return any(n["key"] == KEY and n["how"] == "chosen" for n in doc.get("provenance") or [])


def left_out(docs: list[dict[str, Any]], said: list[str]) -> None:
    """Name on every recipe kept the choices that were not imported, and why."""
    for doc in docs:
        doc["provenance"] += [{"key": KEY, "how": "ignored", "detail": f"not imported: {why}"} for why in said]


def label(number: int | str, where: str) -> str:
    """`3) code block 6, line 1`: a choice's number in the text and where it is."""
    return f"{number}) {where}"


def launch_of(doc: dict[str, Any]) -> str:
    """A marked recipe's label (its number, from the note mark wrote)."""
    said = next(n["detail"] for n in doc["provenance"] if n["key"] == KEY and n["how"] == "chosen")
    number = NUMBER.search(said)
    return label(number.group(1) if number else "?", doc["source"].get("launch") or doc["name"])


def why(launch: str, problem: str, where: str) -> str:
    """A choice's refusal without the places it names again (the source; `the command at code block 6, line 1`)."""
    problem = problem.removeprefix(where).lstrip(": ")
    at = f"the command at {launch.split(') ', 1)[-1]} "
    return f"{launch}: {problem.removeprefix(at)}"


def refusal(of: int, where: str, failed: list[tuple[str, BadInput]]) -> BadInput:
    """Every choice failed: each one's reason, or the one they share."""
    if len(failed) == 1:
        return failed[0][1]
    reasons = [why(launch, exc.problem, where) for launch, exc in failed]
    shared = {reason.split(": ", 1)[1] for reason in reasons}
    listed = f"each for the same reason: {shared.pop()}" if len(shared) == 1 else "; ".join(reasons)
    return BadInput(f"{where} holds {of} engine commands, and none imports as written: {listed}", failed[0][1].fix)


def each(docs: list[dict[str, Any]], check: Callable[[dict[str, Any]], None], where: str) -> list[dict[str, Any]]:
    """CHECK each recipe (it raises BadInput, or changes the recipe in place): when they are choices, one that
    fails is left out and named on the rest, unless all fail; else the first failure is raised."""
    if not all(is_choice(doc) for doc in docs):
        for doc in docs:
            check(doc)
        return docs
    kept: list[dict[str, Any]] = []
    failed: list[tuple[str, BadInput]] = []
    for doc in docs:
        try:
            check(doc)
        except BadInput as exc:
            failed.append((launch_of(doc), exc))
        else:
            kept.append(doc)
    if not kept:
        raise refusal(len(docs), where, failed)
    left_out(kept, [why(launch, exc.problem, where) for launch, exc in failed])
    return kept
