"""sparkrun's recipe YAML (`recipe_version` 1 to 4), read by sparkrun's own rules: the recipe (recipe), its
fields (fields), command templates (template), the flag maps for a recipe without one (flags, flagmaps.json),
the rules around its command and image (rules) and its executor settings (executor)."""
