"""What sparkplay knows about models that recipes leave unsaid.

A recipe found on the web rarely says everything a deployment needs: the
Atlas recipe names no checkpoint repository, no pinned revision and no image
repository. Each engine's package holds such facts for the models it is known
to serve (its spec's `models`, with sources in docs/recipes.md), and every
value they supply is marked `filled` in the recipe's provenance. A value the
recipe states always wins over the table.
"""

from __future__ import annotations

from sparkplay.engines import registry
from sparkplay.engines.spec import KnownModel


def find_model(engine: str, model: str | None, flags: dict[str, str | None]) -> KnownModel | None:
    for known in registry.known_models():
        if known.engine != engine:
            continue
        value = model if known.match_flag == "model" else flags.get(known.match_flag)
        if value is not None and value.lower() == known.match_value.lower():
            return known
    return None
