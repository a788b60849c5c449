"""TensorRT-LLM: its recipe-side rules (spec) and its per-rank launch over OpenMPI (plan)."""
