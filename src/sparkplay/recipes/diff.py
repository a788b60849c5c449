"""A semantic diff of two recipes: what would change for the deployment, not for the file."""

from __future__ import annotations

from typing import Any

from sparkplay.recipes import cmdline

FIELDS = (
    "engine.name",
    "engine.image",
    "engine.runtime",
    "model.repo",
    "model.revision",
    "model.quant",
    "model.served_name",
    "context_length",
    "topology.nodes",
    "topology.tensor_parallel",
    "topology.pipeline_parallel",
    "topology.expert_parallel",
    "serve.port",
    "serve.bind",
    "speculative.method",
    "speculative.num_tokens",
    "speculative.draft_model",
)


def _get(doc: dict[str, Any], dotted: str) -> Any:
    node: Any = doc
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _show(value: Any) -> str:
    return "(none)" if value is None else str(value)


def mapping_diff(label: str, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for key in sorted(old.keys() | new.keys()):
        if key not in new:
            lines.append(f"{label} {key}: removed (was {_show(old[key])})")
        elif key not in old:
            lines.append(f"{label} {key}: added ({_show(new[key])})")
        elif old[key] != new[key]:
            lines.append(f"{label} {key}: {_show(old[key])} -> {_show(new[key])}")
    return lines


def _flags(args: list[str]) -> dict[str, str]:
    return {flag: "on" if value is None else value for flag, value in cmdline.flag_map(args).items()}


def semantic_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One line per difference: fields, then knobs, flags and env added/removed/changed."""
    lines = [
        f"{field}: {_show(_get(old, field))} -> {_show(_get(new, field))}"
        for field in FIELDS
        if _get(old, field) != _get(new, field)
    ]
    lines += mapping_diff("knob", old.get("knobs") or {}, new.get("knobs") or {})
    old_args, new_args = _get(old, "serve.args") or [], _get(new, "serve.args") or []
    lines += mapping_diff("flag", _flags(old_args), _flags(new_args))
    lines += mapping_diff("env", _get(old, "serve.env") or {}, _get(new, "serve.env") or {})
    return lines
