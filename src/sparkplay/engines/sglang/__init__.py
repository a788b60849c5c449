"""SGLang: its recipe-side rules (spec) and its per-rank launch (plan)."""
