"""Atlas: its recipe-side rules (spec), the SparkGLM images' launch (plan) and the GB10 images' (gb10)."""
