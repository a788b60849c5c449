"""vLLM: its recipe-side rules (spec), its per-rank launch (plan) and its CPU build for the lab (cpu)."""
