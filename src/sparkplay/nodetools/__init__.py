"""Standalone programs the roles install on the nodes (standard library only)."""

from __future__ import annotations

from importlib import resources


def path_of(name: str) -> str:
    """Filesystem path of a node tool shipped in this package."""
    return str(resources.files(__name__).joinpath(name))
