"""Lookup `sparkplay_recipe`: load and validate recipes/<name>.yml with sparkplay's own code.

    recipe: "{{ lookup('sparkplay_recipe', 'glm53', image_pins=sparkplay_image_pins | default({})) }}"

Returns the normalised recipe (a dict). A missing, malformed or incomplete
recipe fails the task with the validator's one-line message, so a play can
stop before any host is touched.
"""

# ruff: noqa: E402  (validate-modules wants the documentation before the imports)
from __future__ import annotations

DOCUMENTATION = """
name: sparkplay_recipe
short_description: Load and validate a sparkplay recipe from the catalog
description:
  - Reads recipes/NAME.yml of the sparkplay project this plugin ships in.
  - Fails with the validator's message when the recipe is unknown, malformed or incomplete.
options:
  _terms:
    description: Recipe name(s).
    required: true
  image_pins:
    description:
      - Floating image references (no tag, or latest) mapped to the digest `sparkplay apply` resolved them to;
        the recipe is served with the pinned reference.
    type: dict
    default: {}
  allow:
    description:
      - The privileged requests the inventory allows by name (serve_allow). Given, the recipe passes the recipe
        boundary (sparkplay.boundary) here, before any host is touched, or the lookup fails naming the request.
    type: list
    elements: str
  trusted_images:
    description:
      - The image repositories the inventory trusts (serve_trusted_images; none - the defaults). An engine image
        from elsewhere is a privileged request, allowed only pinned by digest (image:REPO@DIGEST).
    type: list
    elements: str
  knobs:
    description: The inventory's own knob settings (they are the user's choice, not the recipe's request).
    type: dict
    default: {}
  bind:
    description: The inventory's API address (empty - the recipe's).
    type: str
    default: ''
"""

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.sparkplay.spark.plugins.plugin_utils.sparkplay_package import missing

try:
    from sparkplay import boundary
    from sparkplay.errors import SparkplayError
    from sparkplay.recipes.store import catalog
    from sparkplay.recipes.store.apply import pin_image
except ImportError as error:  # the plugin still loads (ansible-doc, Galaxy); a call says the fix
    SPARKPLAY_MISSING: ImportError | None = error
else:
    SPARKPLAY_MISSING = None

PROJECT = Path(__file__).resolve().parents[2]


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> list[Any]:
        if SPARKPLAY_MISSING is not None:
            raise missing(SPARKPLAY_MISSING)
        results = []
        for term in terms:
            name = str(term).strip()
            if not name:
                raise AnsibleLookupError(
                    "no recipe chosen: pass -e recipe=NAME or record one with `sparkplay apply NAME -i INVENTORY`"
                )
            try:
                # pinned first: an image from outside the trusted repositories is allowed by its digest
                doc = catalog.load_for_use(catalog.catalog_dir(PROJECT), name)
                doc = pin_image(doc, kwargs.get("image_pins") or {})
                if kwargs.get("allow") is not None:
                    boundary.confine(doc)
                    allow = boundary.check_allow(kwargs["allow"], doc)
                    trusted = boundary.check_trusted(kwargs.get("trusted_images") or boundary.TRUSTED_IMAGES)
                    boundary.enforce(doc, allow, kwargs.get("knobs") or {}, kwargs.get("bind") or None, trusted)
                results.append(doc)
            except SparkplayError as exc:
                raise AnsibleLookupError(str(exc)) from None
        return results
