"""A recipe import: read and normalise the source (sparkplay.recipes), then rehearse its plan.

Above the engines and the deployment in the import graph: the recipes
package reads formats and knows nothing of how a recipe is planned.
"""

from __future__ import annotations

from typing import Any, Unpack

from sparkplay import argv, settings
from sparkplay.engines import plan, registry
from sparkplay.errors import BadInput
from sparkplay.recipes.store import catalog, choices


def import_source(source: str, **how: Unpack[catalog.Reading]) -> dict[str, Any]:
    """SOURCE's one recipe (import_sources says how); a source of several needs pick=."""
    return catalog.only_one(import_sources(source, **how), source)


def import_sources(source: str, **how: Unpack[catalog.Reading]) -> list[dict[str, Any]]:
    """SOURCE (an https URL, a file, or - for stdin) as recipes that can be deployed (catalog.read_sources says
    how it is read: one, or one per engine service of a compose file); one that could never start (its plan
    refused on stand-in nodes) is refused, naming the source."""
    docs = catalog.read_sources(source, **how)
    root = settings.DEFAULTS["sparkplay_model_root"]
    numbers = {id(doc): number for number, doc in enumerate(docs, 1)}

    def rehearsed(doc: dict[str, Any]) -> None:
        try:  # what the recipe alone decides must plan: an import that could never start is no import
            plan.rehearse(doc, root)
        except BadInput as exc:
            # one of a file's launches run together (compose services, llama-swap models): nothing is imported;
            # --pick takes one (a text's choices: the others are imported, this one named)
            number = numbers[id(doc)]
            others = f" (or --pick another of its {len(docs)}; this is {number})" if len(docs) > 1 else ""
            raise BadInput(
                f"{source}: recipe {doc['name']} cannot be planned as written: {exc.problem}", exc.fix + others
            ) from None

    docs = choices.each(docs, rehearsed, source)
    for doc in docs:
        for key in plan.env_not_passed(doc, root):
            doc["provenance"].append(
                {
                    "key": f"serve.env.{key}",
                    "how": "overridden",
                    "detail": (
                        f"the recipe sets {key}={doc['serve']['env'][key]!r}; the {doc['engine']['name']} plan sets "
                        "it on each node itself (from that node's cable, paths and rank), so the recipe's value is not "
                        "used"
                    ),
                }
            )
        for flag, why in registry.spec(doc["engine"]["name"]).added_flags.items():
            if not argv.has_flag(doc["serve"]["args"], flag):
                doc["provenance"].append({"key": "serve.args", "how": "added", "detail": f"{flag}: {why}"})
    return docs
