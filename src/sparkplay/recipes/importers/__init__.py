"""One importer per source format, each reading its format by the grammar of the tool that owns it and
handing sparkplay.recipes.normalise a RawRecipe: webjson (a recipe website's JSON), launcher (a launcher's
recipe.toml), sparkrun/ (spark-arena's registries' YAML), pasted/ (command lines, shell scripts, docker run,
compose files and pages with code blocks)."""
