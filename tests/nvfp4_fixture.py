"""The small GLM-like checkpoint the overlay tests use (sparkplay.nvfp4.testmodel, 2 experts)."""

from __future__ import annotations

from pathlib import Path

from sparkplay.nvfp4.overlay import DEFAULT_MATCH
from sparkplay.nvfp4.testmodel import make_checkpoint

MATCH = DEFAULT_MATCH  # the GLM-5.3-Flash MTP expert pattern; 2 experts x gate/up/down = 6 matrices


def make_source(dest: Path) -> Path:
    return make_checkpoint(dest, experts=2)
