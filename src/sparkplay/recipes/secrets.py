"""The secrets a recipe's source may carry (a token, a key, a password): never stored in a recipe.

A recipe comes from a web page, a registry or a chat; whatever secret its text holds is someone else's (or a
placeholder) and would be copied into the recipe file, the unit and `ps` with it. Every importer takes such
values out here, one rule for an environment name and a flag, and says where sparkplay takes each from
instead; a hand-written recipe's `--api-key`/`--hf-token` travel in the rank's 0600 env file (engines/plan.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sparkplay import argv

# an environment name that holds a secret
ENV_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|ACCESS_KEY|CREDENTIALS?)$", re.IGNORECASE)
# a flag whose value is one: vLLM's and llama.cpp's --hf-token (llama.cpp's -hft), --api-key, SGLang's
# --admin-api-key, Atlas's --auth-token; `token$` leaves --max-tokens and --tokenizer alone
FLAG = re.compile(
    r"^--?(hft|[a-z0-9-]*(token|secret|password|passwd|api-key|apikey|access-key|credentials?))$", re.IGNORECASE
)

HF_WHERE = (
    "sparkplay downloads the checkpoint itself with checkpoint_hf_token (HF_TOKEN in the controller's "
    "environment, or the inventory's vault); the engine needs none"
)
KEY_WHERE = (
    "to key this engine, add the flag to the recipe yourself (`sparkplay recipes edit`; it travels in the "
    "rank's 0600 env file, never a unit or ps), or ask clients for the gateway's keys (serve_gateway_keys_file)"
)


def where(name: str) -> str:
    """Where sparkplay takes the secret named `name` (a variable or a flag) from instead."""
    bare = name.lstrip("-").upper().replace("-", "_")
    return HF_WHERE if bare in ("HFT", "HF_TOKEN") or bare.startswith(("HF_", "HUGGING")) else KEY_WHERE


def flags_in(args: Sequence[str]) -> list[str]:
    """The secret-bearing flags `args` gives (`--f v` or `--f=v`), each once, in order."""
    found: list[str] = []
    for token in args:
        name = token.split("=", 1)[0]
        if FLAG.match(name) and name not in found:
            found.append(name)
    return found


def without_flags(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(`args` without any secret-bearing flag and its value, the flags taken out)."""
    found = flags_in(args)
    return (argv.without_flags(args, *found) if found else list(args)), found


def note(name: str) -> str:
    """The import's line for a secret it left out."""
    return f"{name} left out: a secret is never stored in a recipe; {where(name)}"
