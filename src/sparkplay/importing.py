"""A recipe import: read and normalise the source (sparkplay.recipes), then rehearse its plan.

Above the engines and the deployment in the import graph: the recipes
package reads formats and knows nothing of how a recipe is planned.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sparkplay import deployment
from sparkplay.engines import plan
from sparkplay.errors import BadInput
from sparkplay.recipes import catalog


def import_source(
    source: str, name: str | None = None, sets: Sequence[str] = (), mods_from: Sequence[Path] = ()
) -> dict[str, Any]:
    """SOURCE (an https URL or a file) as a recipe that can be deployed (catalog.read_source says how it is
    read); one that could never start (its plan refused on stand-in nodes) is refused, naming the source."""
    doc = catalog.read_source(source, name, sets, mods_from)
    try:  # what the recipe alone decides must plan: an import that could never start is no import
        plan.rehearse(doc, deployment.DEFAULTS["sparkplay_model_root"])
    except BadInput as exc:
        raise BadInput(f"{source}: the recipe cannot be planned as written: {exc.problem}", exc.fix) from None
    return doc
