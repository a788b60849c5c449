"""Filters that reach sparkplay's rank rules (the logic lives in the package, not in Jinja)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sparkplay.topology import rank_layout_problems


def _layout_problems(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> list[str]:
    """`groups['sparkplay_nodes'] | sparkplay_rank_layout_problems(hostvars)`."""
    return rank_layout_problems({host: hostvars[host].get("sparkplay_rank") for host in hosts})


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"sparkplay_rank_layout_problems": _layout_problems}
