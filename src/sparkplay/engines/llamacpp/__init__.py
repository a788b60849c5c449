"""llama.cpp: its recipe-side rules (spec) and its per-rank launch over the RPC backend (plan)."""
