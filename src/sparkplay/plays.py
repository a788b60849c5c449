"""What the tasks of a play read of each other and of the commands they ran, written once for every role.

A role gathers each host's value of a variable (`hosts | sparkplay_per_host(hostvars, 'key')`) and reads a
node tool's JSON answer from a registered command result (`result | sparkplay_answer`), instead of shaping
hostvars and stdout in Jinja (issue 42).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any


def per_host(hosts: Iterable[str], hostvars: Mapping[str, Any], key: str, field: str | None = None) -> dict[str, Any]:
    """host -> its value of `key` (or that value's `field`), for each of `hosts` that has one, in the order
    given; a host the inventory does not know, or one that never set `key` (unreachable, skipped), is left
    out."""
    found = {}
    for host in hosts:
        here = hostvars.get(host)
        if here is not None and key in here:
            value = here[key]
            found[host] = value.get(field) if field is not None and isinstance(value, Mapping) else value
    return found


def of_hosts(
    hosts: Iterable[str], hostvars: Mapping[str, Any], key: str, field: str | None = None, *, joined: bool = False
) -> list[Any]:
    """The values of `key` of the hosts that have one that is not None, in host order; `field`: each value's
    field of that name (a looped task's `results`), which is a list, and the lists are joined into one;
    `joined`: each value is a list, joined likewise (each rank's records, one list for the cluster)."""
    values = [v for v in per_host(hosts, hostvars, key).values() if v is not None]
    if field is not None:
        values = [v.get(field) if isinstance(v, Mapping) else None for v in values]
        joined = True
    return [item for value in values for item in (value or [])] if joined else values


def any_host(hosts: Iterable[str], hostvars: Mapping[str, Any], key: str, field: str | None = "changed") -> bool:
    """Whether any of `hosts` has `key` with a true `field`: a task registered as `key` changed something
    there (the default; a skipped one did not), an outcome says `ready`; with no field, `key` is true."""
    values = per_host(hosts, hostvars, key).values()
    if field is None:
        return any(bool(v) for v in values)
    return any(isinstance(v, Mapping) and v.get(field) for v in values)


def answer(result: Any, otherwise: Any = None) -> Any:
    """A node tool's answer in a registered command result: its stdout, parsed, where that is a JSON object.
    Else `otherwise` where given, or {"why": what the command said on stderr, or why it did not run}: a tool
    that crashed, was absent or timed out is a reason in words, never a template error."""
    result = result if isinstance(result, Mapping) else {}
    text = str(result.get("stdout") or "").strip()
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    if otherwise is not None:
        return otherwise
    said = str(result.get("stderr") or "").strip() or str(result.get("msg") or "").strip()
    return {"why": said or ("skipped" if result.get("skipped") else "no answer")}


def readiness(result: Any, **extra: Any) -> dict[str, Any]:
    """The serve tool's `ready` answer ({ready, seconds, completion, journals: rank -> text}) in a registered
    command result, with each rank's journal as lines too (`journal_lines`) and `extra` fields beside; a tool
    that did not answer is not ready, and why is what it said."""
    said = answer(result)
    outcome = {"ready": False, "journals": {}, **said}
    outcome["journal_lines"] = {rank: str(text).split("\n") for rank, text in (outcome["journals"] or {}).items()}
    return {**outcome, **extra}


def properties(lines: Iterable[str] | None) -> dict[str, str]:
    """`systemctl show`'s KEY=VALUE lines as a mapping (a line without `=` is not a property)."""
    return dict(line.split("=", 1) for line in lines or () if "=" in line)
