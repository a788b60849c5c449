"""What a node's probe (the collection's sparkplay_probe module) said, shaped for the rules that read it:
the deployment records it read, the node's memory and model bytes for admission, the paths to look at."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def record_texts(probe: Mapping[str, Any], record: str) -> dict[str, str | None]:
    """path -> text of every deployment record the probe read: the added ones (its read_dir) and the
    primary's (`record`, among its reads); the input of sparkplay.served.records."""
    return {**(probe.get("directory_contents") or {}), record: (probe.get("contents") or {}).get(record)}


def node_memory(probe: Mapping[str, Any]) -> dict[str, Any]:
    """What admission reads of a node: /proc/meminfo's text, the model's bytes here (its files' sizes; an
    absent one counts 0) and the first GGUF header read (llama.cpp's KV cache size), or None."""
    headers = [h for h in (probe.get("gguf_headers") or {}).values() if h]
    return {
        "meminfo": (probe.get("contents") or {}).get("/proc/meminfo"),
        "weights": sum(int(size or 0) for size in (probe.get("bytes") or {}).values()),
        "gguf": headers[0] if headers else None,
    }


def required_paths(launch: Mapping[str, Any]) -> list[str]:
    """The paths a launch plan requires on its nodes (the model's files, its overlay), each once."""
    return list(dict.fromkeys(str(need["path"]) for need in launch.get("requires") or ()))


def paths_lacking(required: Iterable[Mapping[str, Any]], missing: Iterable[str]) -> list[dict[str, Any]]:
    """The requirements whose path the probe did not find."""
    gone = set(missing)
    return [dict(need) for need in required if need.get("path") in gone]


def lacking_words(required: Iterable[Mapping[str, Any]], missing: Iterable[str]) -> str:
    """'the model (/path), the overlay (/path)': what a node lacks of what a plan requires; empty if nothing."""
    return ", ".join(f"{need.get('what')} ({need.get('path')})" for need in paths_lacking(required, missing))


def units_up(states: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The units the probe found active and enabled."""
    return [unit for unit, s in states.items() if s.get("active") == "active" and s.get("enabled") == "enabled"]
