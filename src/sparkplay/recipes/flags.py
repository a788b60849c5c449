"""What an engine's own flags say: context, topology, memory, port, bind, served names, speculative decoding.

Read by each engine's own grammar (its package's spec: vLLM's human-readable
integers, SGLang's and Atlas's flag names), never changed; every value read is
one the engine would read the same way.
"""

from __future__ import annotations

import json
from typing import Any

from sparkplay.argv import flag_value
from sparkplay.engines import registry
from sparkplay.errors import BadInput
from sparkplay.recipes.raw import RawRecipe

# Flags whose value is JSON text (vLLM); checked so a bad one fails at import.
JSON_FLAGS = (
    "--speculative-config",
    "--compilation-config",
    "--kv-transfer-config",
    "--hf-overrides",
    "--override-generation-config",
)


def aliases(raw: RawRecipe) -> list[str]:
    """The names the engine answers to beside its first."""
    return registry.spec(raw.engine).aliases(raw.args)


def left_out(raw: RawRecipe) -> None:
    """What the engine cannot serve or sparkplay cannot carry left out of the flags, each said."""
    raw.args = registry.spec(raw.engine).left_out(raw.args, raw.note)


def check_json_flags(args: list[str]) -> None:
    for flag in JSON_FLAGS:
        value = flag_value(args, flag)
        if value is None:
            continue
        try:
            json.loads(value)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{flag} is not valid JSON ({exc.msg})", f"fix the JSON text given to {flag}") from None


def speculative(raw: RawRecipe) -> dict[str, Any] | None:
    """The engine's speculative decoding as {method, num_tokens, draft_model}; None: off."""
    return registry.spec(raw.engine).speculative(raw.args, raw.note)


def derive(raw: RawRecipe) -> dict[str, Any]:
    """Context, topology, memory, port and bind as the engine's flags state them."""
    return registry.spec(raw.engine).derive(raw.args, raw.note)
