"""Recipes: what a user found, read and checked before anything is planned.

Laid out as it works:
- here, the recipe model and its rules: the normalised document and its schema (model, schema.json), what an
  importer read before normalising (raw, normalise), engines' command lines and flags (cmdline, flags), what
  recipes leave unsaid (known), the mods and hooks a recipe runs in its container, a semantic diff (diff);
- importers/: one importer per source format (a recipe website's JSON, a launcher's recipe.toml, sparkrun's
  YAML, pasted text: command lines, scripts, compose files, pages), each ending in a RawRecipe;
- store/: the catalog (recipes/NAME.yml: import, load, save, asking first), fetching over HTTP, `apply`
  and the image digests it records.

The layers go down: store imports importers and the model; importers import the model; the model imports
neither (tests/test_import_graph.py).
"""
