"""Where recipes live and come from: the catalog (recipes/NAME.yml), fetching a recipe over HTTP, `sparkplay
apply` (the inventory's choice and knobs) and the image digests it resolves (registry)."""
